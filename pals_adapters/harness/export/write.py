"""Writing a run's export: the fine-tuned base once, then every task's own files and manifest.

Layout::

    <out_dir>/base/      the fine-tuned shared base (base_mode "finetune"), or with ``with_base`` the
                         frozen pretrained base, so that the export loads with no hub: a plain
                         transformers model folder (safetensors), its tokenizer, manifest.json, and the
                         method's shared modules if it has any (shared_modules.safetensors: CA-MTL)
    <out_dir>/<task>/    the task's native files (as its method backend writes them),
                         head.safetensors, README.md (its model card, see `card`) and
                         manifest.json (written last)

The whole ``<out_dir>`` is written beside the old one and swapped in at once (see `staging`), so a
crash leaves the previous export or the new one, never a mix of the two.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

from ... import __version__
from ...ca_mtl.shared_modules import SHARED_MODULES_FILE  # in <out_dir>/base: CA-MTL's shared modules
from ...errors import ConfigError
from ...pretrained import NO_REMOTE_CODE
from ..methods.model import MultiTaskModel
from ..methods.weights import json_default, save_tensors
from ..tasks.dataset_rows import dataset_record
from ..tasks.file_record import data_record, relative_to, shared_spec_json
from ..tasks.spec import check_task_name
from .card import write_card
from .files import BASE_DIR, hash_files
from .fingerprint import (
    backbone_of,
    base_config,
    base_state_dict,
    clean_config,
    dtype_name,
    dtype_of,
    fingerprint,
    fingerprinted_state,
    plain_class,
    shared_state_dict,
    tokenizer_differences,
    tokenizer_fingerprint,
)
from .library_heads import (
    add_peft_head,
    data_source_name,
    named_base,
    peft_head_fits,
    recorded_base_name,
    save_adapters_head,
    shared_base_name,
)
from .manifest import (
    BaseManifest,
    EvaluationRecord,
    MethodRecord,
    TaskManifest,
    manifest_contents,
    read_base_manifest,
    read_task_manifest,
    write_manifest,
)
from .staging import staged_export

PathLike = str | os.PathLike

HEAD_FILE = "head.safetensors"


def _check_exportable(model: MultiTaskModel, task: str | None = None) -> None:
    if not isinstance(model, MultiTaskModel):
        raise ConfigError(f"expected a MultiTaskModel, got {type(model).__name__}")
    if task is not None and task not in model.tasks:
        raise ConfigError(f"task {task!r} is not part of this model; its tasks are {list(model.tasks)}")
    for name in model.tasks:
        check_task_name(name)
    try:
        json.dumps(model.method.overrides, default=json_default)
    except TypeError as err:
        raise ConfigError(f"method overrides {model.method.overrides} cannot be written to JSON: {err}") from err


class _Base:
    """What every task manifest records about the base (hashed once per export)."""

    def __init__(self, model: MultiTaskModel, tokenizer):
        state = base_state_dict(model)
        self.state = state
        self.shared = shared_state_dict(model)  # the method's shared modules (CA-MTL), exported with the base
        self.fingerprint = fingerprint(fingerprinted_state(model))
        self.dtype = dtype_name(state)
        self.config = base_config(model)
        self.tokenizer = tokenizer
        self.tokenizer_files = tokenizer_fingerprint(tokenizer) if tokenizer is not None else None


def _write_base(model: MultiTaskModel, folder: Path, tokenizer, base: _Base, base_model_name: str | None) -> None:
    backbone = backbone_of(model)
    plain = plain_class(backbone).from_pretrained(
        None, config=clean_config(backbone), state_dict=base.state, dtype=dtype_of(base.state), **NO_REMOTE_CODE
    )
    folder.mkdir()
    plain.save_pretrained(str(folder), safe_serialization=True)
    if base.shared:
        save_tensors(folder / SHARED_MODULES_FILE, base.shared, BASE_DIR, "shared_modules")
    if tokenizer is not None:
        tokenizer.save_pretrained(str(folder))
    manifest = BaseManifest(
        fingerprint=base.fingerprint,
        dtype=base.dtype,
        files=hash_files(folder),
        base_model_name=recorded_base_name(base_model_name, folder),  # a local folder from here
        attn_implementation=backbone.config._attn_implementation,
        tokenizer_files=base.tokenizer_files,
    )
    write_manifest(folder, manifest)


def _base_is_current(folder: Path, base: _Base) -> bool:
    if manifest_contents(folder) != "base":
        return False
    existing = read_base_manifest(folder)
    same_tokenizer = base.tokenizer is None or (
        existing.tokenizer_files is not None
        and not tokenizer_differences(existing.tokenizer_files, base.tokenizer, folder)
    )
    return existing.fingerprint == base.fingerprint and same_tokenizer


def _write_task_weights(model: MultiTaskModel, task: str, folder: Path, base_model_name: str | None) -> None:
    """The task's weights in its library's layout, head included where the library has one (and the
    harness's own head file, which every export has), naming the base without a local path."""
    name = shared_base_name(base_model_name)
    with named_base(model.backbone.config, name):  # adapters writes it as the adapter's model_name
        model.backend.save_task(model, task, folder, name)
    save_tensors(folder / HEAD_FILE, model.task_head(task).state_dict(), task, "head")
    if model.method.kind in ("adapters", "ca_mtl"):
        save_adapters_head(model, task, folder, name)
    elif model.method.kind == "peft" and peft_head_fits(model):
        add_peft_head(model, task, folder)


def _write_task(
    model: MultiTaskModel,
    task: str,
    folder: Path,
    base: _Base,
    base_model_name,
    metrics,
    max_length,
    evaluation,
    base_mode: str | None = None,
    run_config=None,
    with_base: bool = False,
    origin=None,
) -> None:
    # base_mode: how the base was made, if not by this model's own training (a task added to an export
    # trains against the export's fine-tuned base with that base frozen; it still needs that base)
    base_mode = base_mode or model.base_mode
    carried = base_mode == "finetune" or with_base  # the base in <out_dir>/base, next to the task
    folder.mkdir()
    _write_task_weights(model, task, folder, base_model_name)
    if evaluation is not None:  # the data folder by its name and from the export: local paths are not shared
        evaluation = dataclasses.replace(
            evaluation,
            glue_dir=data_source_name(evaluation.glue_dir),
            glue_dir_from_export=relative_to(evaluation.glue_dir, folder),
        )
    manifest = TaskManifest(
        task=task,
        task_spec=shared_spec_json(model.tasks[task], folder),
        method=MethodRecord(model.method.name, model.method.kind, dict(model.method.overrides)),
        base_mode=base_mode,
        base_fingerprint=base.fingerprint,
        base_dtype=base.dtype,
        files=hash_files(folder),
        base_config=base.config,
        base_model_name=recorded_base_name(base_model_name, folder),  # a local folder from here
        attn_implementation=model.backbone.config._attn_implementation,
        base_path=f"../{BASE_DIR}" if carried else None,
        metrics=metrics,
        max_length=max_length,
        tokenizer_files=base.tokenizer_files,
        evaluation=evaluation,
        task_data=data_record(model.tasks[task], folder),
        dataset_source=dataset_record(model.tasks[task], folder),
        num_parameters=sum(p.numel() for _, p in model.task_parameters(task)),
        producer=f"pals_adapters {__version__}",
        pooling=model.pooling,
    )
    write_card(folder, manifest, run_config, origin)
    write_manifest(folder, manifest)  # last: a folder without it never loads


def export_base(
    model: MultiTaskModel, out_dir: PathLike, tokenizer=None, *, base_model_name: str | None = None
) -> Path:
    """Writes the shared (fine-tuned) base to ``<out_dir>/base/`` as a plain transformers model folder
    (the other folders of ``out_dir`` are kept)."""
    with staged_export(out_dir, only=[BASE_DIR]) as staging:
        _write_base(model, staging / BASE_DIR, tokenizer, _Base(model, tokenizer), base_model_name)
    return Path(out_dir) / BASE_DIR


def export_task(
    model: MultiTaskModel,
    task: str,
    out_dir: PathLike,
    *,
    base_model_name: str,
    metrics: dict | None = None,
    max_length: int | None = None,
    tokenizer=None,
    evaluation: EvaluationRecord | None = None,
    run_config=None,
) -> Path:
    """Writes ``<out_dir>/<task>/`` (native adapter files, head, model card, manifest), keeping the other
    tasks. For a fine-tuned base it also writes ``<out_dir>/base/`` unless the same base is already there.
    ``run_config``: the run's `RunConfig` (or its settings), for the card's training section."""
    _check_exportable(model, task)
    base = _Base(model, tokenizer)
    with staged_export(out_dir, only=[task]) as staging:
        if model.base_mode == "finetune" and not _base_is_current(staging / BASE_DIR, base):
            shutil.rmtree(staging / BASE_DIR, ignore_errors=True)  # a carried-over copy: never written into
            _write_base(model, staging / BASE_DIR, tokenizer, base, base_model_name)
        _write_task(
            model, task, staging / task, base, base_model_name, metrics, max_length, evaluation, run_config=run_config
        )
    return Path(out_dir) / task


def other_tasks(out_dir: PathLike, tasks) -> dict[str, TaskManifest]:
    """The task folders of the export in ``out_dir`` whose task is not in ``tasks`` (e.g. tasks added to it
    later with ``add_to``), by name, with their manifests."""
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        return {}
    return {
        path.name: read_task_manifest(path)
        for path in sorted(out_dir.iterdir())
        if path.is_dir() and path.name not in tasks and manifest_contents(path) == "task"
    }


def _why_not_kept(manifest: TaskManifest, model: MultiTaskModel, base: _Base, base_mode: str) -> str | None:
    """Why a task of the export cannot stay beside the model's tasks (None: it can; same method and base)."""
    overrides = json.loads(json.dumps(dict(model.method.overrides), default=json_default))
    if manifest.method.name != model.method.name or manifest.method.overrides != overrides:
        return f"method {manifest.method.name!r}, not {model.method.spec!r}"
    if manifest.base_mode != base_mode or manifest.base_fingerprint != base.fingerprint:
        return "another base (a fine-tuned base changes with every checkpoint)"
    if (
        base.tokenizer is not None
        and manifest.tokenizer_files is not None
        and tokenizer_differences(manifest.tokenizer_files, base.tokenizer)
    ):
        return "another tokenizer"
    return None


def check_other_tasks_kept(out_dir: PathLike, model: MultiTaskModel, tokenizer=None, base: _Base | None = None) -> list:
    """The tasks of the export in ``out_dir`` that ``model`` does not have, after checking that they can stay
    beside its tasks (same method, base and tokenizer); ConfigError naming them if not: an export of the
    model would delete them."""
    others = other_tasks(out_dir, model.tasks)
    base = base or _Base(model, tokenizer)
    refused = {name: why for name, m in others.items() if (why := _why_not_kept(m, model, base, model.base_mode))}
    if refused:
        detail = "; ".join(f"{name}: {why}" for name, why in refused.items())
        raise ConfigError(
            f"{out_dir} holds tasks {sorted(refused)} that this model does not have (added to the export later "
            f"with add_to?), trained on what this export would replace ({detail}): exporting here would delete "
            "them. Export to another folder (--out), or move them away first; nothing was written"
        )
    return sorted(others)


def export_run(
    model: MultiTaskModel,
    out_dir: PathLike,
    *,
    base_model_name: str,
    metrics_by_task: dict[str, dict] | None = None,
    tokenizer=None,
    max_length: int | None = None,
    evaluation: EvaluationRecord | None = None,
    run_config=None,
    with_base: bool = False,
    origin=None,
) -> dict[str, Path]:
    """The whole export of a run: `export_base` (fine-tuned runs; with ``with_base`` a frozen base too, so that
    the export loads with no hub and no model package) and every task, replacing what
    ``out_dir`` held in one step. Tasks of ``out_dir`` that the model does not have (added later with
    ``add_to``) are kept when they can stay beside the new base (same method, base and tokenizer: a
    re-export of the same checkpoint); otherwise nothing is written (ConfigError names them). Every task
    gets a model card; ``run_config``: the run's `RunConfig` (or its settings), for its training section;
    ``origin``: the comparison the run came from, for its section of the card. Returns ``{name: folder}``."""
    _check_exportable(model)
    out_dir = Path(out_dir)
    base = _Base(model, tokenizer)  # hashed once for all tasks
    metrics_by_task = metrics_by_task or {}
    # Tasks added to the export later are carried over (they need this base), checked under the export's lock.
    with staged_export(out_dir, only=[BASE_DIR, *model.tasks]) as staging:
        check_other_tasks_kept(out_dir, model, base=base)
        carried = model.base_mode == "finetune" or with_base
        if carried:
            _write_base(model, staging / BASE_DIR, tokenizer, base, base_model_name)
        for task in model.tasks:
            _write_task(
                model,
                task,
                staging / task,
                base,
                base_model_name,
                metrics_by_task.get(task),
                max_length,
                evaluation,
                run_config=run_config,
                with_base=carried,
                origin=origin,
            )
    names = ([BASE_DIR] if carried else []) + list(model.tasks)
    return {name: out_dir / name for name in names}
