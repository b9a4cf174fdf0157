"""Writing a run's export: the fine-tuned base once, then every task's own files and manifest.

Layout::

    <out_dir>/base/      the fine-tuned shared base (only with base_mode "finetune"): a plain
                         transformers model folder (safetensors) + manifest.json, and the method's
                         shared modules if it has any (shared_modules.safetensors: CA-MTL)
    <out_dir>/<task>/    the task's native files (as its method backend writes them),
                         head.safetensors and manifest.json (written last)

Each folder is written into a hidden temporary sibling and moved into place with ``os.replace``,
so a crash leaves either the previous folder or none, never a half-written one that loads.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from ... import __version__
from ...errors import ConfigError
from ..model import MultiTaskModel
from ..tasks import TaskSpec
from ..weights import json_default, save_tensors
from .files import BASE_DIR, atomic_dir, check_task_name, hash_files
from .fingerprint import (
    backbone_of,
    base_state_dict,
    clean_config,
    dtype_name,
    dtype_of,
    fingerprint,
    fingerprinted_state,
    plain_class,
    shared_state_dict,
)
from .manifest import BaseManifest, MethodRecord, TaskManifest, manifest_contents, read_base_manifest, write_manifest

PathLike = str | os.PathLike

HEAD_FILE = "head.safetensors"
SHARED_MODULES_FILE = "shared_modules.safetensors"  # in <out_dir>/base: the method's shared modules (CA-MTL)


def _spec_json(spec: TaskSpec) -> dict:
    data = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
    data["num_text_columns"] = len(spec.text_columns)
    return data


def _check_exportable(model: MultiTaskModel, task: str | None = None) -> None:
    if not isinstance(model, MultiTaskModel):
        raise ConfigError(f"expected a MultiTaskModel, got {type(model).__name__}")
    if task is not None and task not in model.tasks:
        raise ConfigError(f"task {task!r} is not part of this model; its tasks are {list(model.tasks)}")
    try:
        json.dumps(model.method.overrides, default=json_default)
    except TypeError as err:
        raise ConfigError(f"method overrides {model.method.overrides} cannot be written to JSON: {err}") from err


def export_base(model: MultiTaskModel, out_dir: PathLike, tokenizer=None, *, base_model_name: str | None = None) -> Path:
    """Writes the shared (fine-tuned) base once to ``<out_dir>/base/`` as a plain transformers model folder."""
    backbone = backbone_of(model)
    state = base_state_dict(model)
    shared = shared_state_dict(model)
    plain = plain_class(backbone).from_pretrained(None, config=clean_config(backbone), state_dict=state, dtype=dtype_of(state))
    target = Path(out_dir) / BASE_DIR
    with atomic_dir(target) as tmp:
        plain.save_pretrained(str(tmp), safe_serialization=True)
        if shared:
            save_tensors(tmp / SHARED_MODULES_FILE, shared, BASE_DIR, "shared_modules")
        if tokenizer is not None:
            tokenizer.save_pretrained(str(tmp))
        manifest = BaseManifest(
            fingerprint=fingerprint(fingerprinted_state(model)),
            dtype=dtype_name(state),
            files=hash_files(tmp),
            base_model_name=base_model_name,
            attn_implementation=backbone.config._attn_implementation,
        )
        write_manifest(tmp, manifest)
    return target


def _export_task(
    model: MultiTaskModel,
    task: str,
    out_dir: Path,
    base_model_name,
    metrics,
    base_fp: str,
    dtype: str,
    max_length,
    base_mode: str | None = None,
) -> Path:
    # base_mode: how the base was made, if not by this model's own training (a task added to an export
    # trains against the export's fine-tuned base with that base frozen; it still needs that base)
    base_mode = base_mode or model.base_mode
    with atomic_dir(out_dir / task) as tmp:
        model.backend.save_task(model, task, tmp, base_model_name)
        save_tensors(tmp / HEAD_FILE, model.heads[task].state_dict(), task, "head")
        manifest = TaskManifest(
            task=task,
            task_spec=_spec_json(model.tasks[task]),
            method=MethodRecord(model.method.name, model.method.kind, dict(model.method.overrides)),
            base_mode=base_mode,
            base_fingerprint=base_fp,
            base_dtype=dtype,
            files=hash_files(tmp),
            base_model_name=base_model_name,
            attn_implementation=model.backbone.config._attn_implementation,
            base_path=None if base_mode == "frozen" else f"../{BASE_DIR}",
            metrics=metrics,
            max_length=max_length,
            num_parameters=sum(p.numel() for _, p in model.task_parameters(task)),
            producer=f"pals_adapters {__version__}",
        )
        write_manifest(tmp, manifest)  # last: a folder without it never loads
    return out_dir / task


def export_added_task(
    model: MultiTaskModel,
    task: str,
    out_dir: PathLike,
    *,
    base_mode: str,
    base_model_name: str | None,
    metrics: dict | None = None,
    max_length: int | None = None,
) -> Path:
    """Writes a task trained later against an export's shared base into that export, next to its tasks.
    The base is not written again: it must be the one already there (same fingerprint)."""
    _check_exportable(model, task)
    check_task_name(task)
    state = base_state_dict(model)
    return _export_task(
        model, task, Path(out_dir), base_model_name, metrics, fingerprint(fingerprinted_state(model)),
        dtype_name(state), max_length, base_mode=base_mode,
    )


def _ensure_base(model: MultiTaskModel, out_dir: Path, base_fp: str, base_model_name: str | None) -> None:
    base_dir = out_dir / BASE_DIR
    if manifest_contents(base_dir) == "base" and read_base_manifest(base_dir).fingerprint == base_fp:
        return
    export_base(model, out_dir, base_model_name=base_model_name)


def export_task(
    model: MultiTaskModel,
    task: str,
    out_dir: PathLike,
    *,
    base_model_name: str,
    metrics: dict | None = None,
    max_length: int | None = None,
) -> Path:
    """Writes ``<out_dir>/<task>/`` (native adapter files, head, manifest). For a fine-tuned base it also
    writes ``<out_dir>/base/`` unless a base with the same fingerprint is already there."""
    _check_exportable(model, task)
    check_task_name(task)
    out_dir = Path(out_dir)
    state = base_state_dict(model)
    base_fp = fingerprint(fingerprinted_state(model))
    if model.base_mode == "finetune":
        _ensure_base(model, out_dir, base_fp, base_model_name)
    return _export_task(model, task, out_dir, base_model_name, metrics, base_fp, dtype_name(state), max_length)


def export_run(
    model: MultiTaskModel,
    out_dir: PathLike,
    *,
    base_model_name: str,
    metrics_by_task: dict[str, dict] | None = None,
    tokenizer=None,
    max_length: int | None = None,
) -> dict[str, Path]:
    """`export_base` (fine-tuned runs only) and `export_task` for every task; returns ``{name: folder}``."""
    _check_exportable(model)
    for task in model.tasks:
        check_task_name(task)
    out_dir = Path(out_dir)
    state = base_state_dict(model)
    base_fp, dtype = fingerprint(fingerprinted_state(model)), dtype_name(state)  # hashed once for all tasks
    paths: dict[str, Path] = {}
    if model.base_mode == "finetune":
        paths[BASE_DIR] = export_base(model, out_dir, tokenizer, base_model_name=base_model_name)
    metrics_by_task = metrics_by_task or {}
    for task in model.tasks:
        paths[task] = _export_task(
            model, task, out_dir, base_model_name, metrics_by_task.get(task), base_fp, dtype, max_length
        )
    return paths
