"""Loading one exported task back, every file checked before any is read into a model."""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

import torch
from torch import nn
from transformers import PreTrainedModel

from ...errors import AdapterLoadError, ConfigError, IntegrityError, PalsError
from ...pretrained import NO_REMOTE_CODE, pretrained_model, pretrained_tokenizer
from ..methods.backend import get_backend
from ..methods.model import MultiTaskModel, pretrained_pooler, resolve_model
from ..methods.registry import get_method
from ..methods.weights import load_module, read_tensors
from ..tasks.file_record import spec_from_shared_json
from ..tasks.spec import TaskSpec
from .files import check_identity, refuse_pickle, verify_files
from .fingerprint import (
    backbone_of,
    base_config,
    base_config_differences,
    base_state_dict,
    clean_config,
    dtype_of,
    fingerprint_model,
    plain_class,
    shared_state_dict,
    tokenizer_differences,
)
from .library_heads import base_location
from .manifest import MANIFEST, TaskManifest, manifest_contents, read_base_manifest, read_task_manifest
from .manifest_fields import check_task_size
from .write import HEAD_FILE, SHARED_MODULES_FILE

PathLike = str | os.PathLike
logger = logging.getLogger(__name__)


def _weights_file(folder: Path, manifest: TaskManifest, names: tuple[str, ...], part: str) -> Path:
    for name in names:  # safetensors first
        if name in manifest.files:
            return folder / name
    raise IntegrityError(f"{folder / MANIFEST} lists no {' or '.join(names)} for the task's {part} weights")


def task_spec_of(manifest: TaskManifest, where: Path) -> TaskSpec:
    """The task as it was trained (labels in their trained order, columns, files), from its manifest."""
    try:
        spec = spec_from_shared_json(manifest.task_spec, where)
    except ConfigError as err:
        raise IntegrityError(f"{where / MANIFEST}: task_spec is not valid: {err}") from err
    if spec.name != manifest.task:
        raise IntegrityError(f"{where / MANIFEST}: task_spec is for {spec.name!r}, the manifest for {manifest.task!r}")
    return spec


def _method_from_manifest(manifest: TaskManifest, where: Path):
    record = manifest.method
    try:
        method = dataclasses.replace(get_method(record.name), overrides=dict(record.overrides))
    except ConfigError as err:
        raise AdapterLoadError(f"{where / MANIFEST}: method {record.name!r} is not known here: {err}") from err
    if record.kind and record.kind != method.kind:
        raise AdapterLoadError(
            f"{where / MANIFEST}: method {method.name!r} was of kind {record.kind!r}, here it is {method.kind!r}"
        )
    return method


# A base recorded by name (a local folder by its path from the task folder: `library_heads.base_location`).
_WHERE_IS_THE_BASE = (
    "\nIf the base is a folder that is not found from here, give its place: --base-model PATH (pals-bench "
    "evaluate / predict) or base=PATH (load_task)"
)


def recorded_base(manifest: TaskManifest, folder: Path) -> str:
    """The base a task's manifest names, where it is on this machine (`base_location`); a local folder recorded
    from the export that is not there (the export moved without it) is refused, saying how to give it."""
    if not manifest.base_model_name:
        raise AdapterLoadError(f"{folder / MANIFEST} names no base model; pass base=")
    location = base_location(manifest.base_model_name, folder)
    if location != manifest.base_model_name and not os.path.isdir(location):
        raise AdapterLoadError(
            f"{folder} needs its base, the local folder {manifest.base_model_name!r} seen from the task folder "
            f"({location}), which is not there: the export moved without it.{_WHERE_IS_THE_BASE}"
        )
    return location


def _from_pretrained(source: str, manifest: TaskManifest, allow_pickle: bool) -> PreTrainedModel:
    kwargs = {"dtype": getattr(torch, manifest.base_dtype)}
    if manifest.attn_implementation in ("eager", "sdpa"):
        kwargs["attn_implementation"] = manifest.attn_implementation  # same kernels -> same predictions
    if not allow_pickle:
        kwargs["use_safetensors"] = True
    try:
        return pretrained_model(source, **kwargs)
    except PalsError:
        raise
    except (OSError, ValueError) as err:
        raise AdapterLoadError(f"cannot load the base model {source!r}: {err}{_WHERE_IS_THE_BASE}") from err


def _load_base(folder: Path, manifest: TaskManifest, base, allow_pickle: bool) -> tuple[PreTrainedModel, str]:
    """Builds a fresh plain encoder; never changes a model passed in."""
    if isinstance(base, nn.Module):
        backbone = backbone_of(base)
        state = {k: v.detach().clone() for k, v in base_state_dict(backbone).items()}
        model = plain_class(backbone).from_pretrained(
            None, config=clean_config(backbone), state_dict=state, dtype=dtype_of(state), **NO_REMOTE_CODE
        )
        model.config._name_or_path = backbone.config._name_or_path  # not "None" (PEFT would look that up)
        return model, f"the {type(base).__name__} passed as base"
    exported_base = base is None and manifest.base_path is not None  # fine-tuned, or a frozen base carried along
    if exported_base:
        base = (folder / manifest.base_path).resolve()
        if not base.is_dir():
            what = "a fine-tuned base" if manifest.base_mode == "finetune" else "its base exported with it"
            raise AdapterLoadError(
                f"{folder} was exported with {what}, expected at {base} (export_base / export_run "
                "write it); copy it there or pass base="
            )
    elif base is None:
        base = resolve_model(recorded_base(manifest, folder))
    source = Path(base)
    if exported_base or (source / MANIFEST).exists():
        _check_exported_base(source, manifest, allow_pickle)
    return _from_pretrained(str(base), manifest, allow_pickle), str(base)


def _check_exported_base(source: Path, manifest: TaskManifest, allow_pickle: bool) -> None:
    """An exported base: its manifest must be there and whole, and its files must match it, before any is read."""
    checked = read_base_manifest(source)  # a missing or unreadable manifest is an IntegrityError
    refuse_pickle(source, checked.files, allow_pickle)
    verify_files(source, checked.files)
    if checked.fingerprint != manifest.base_fingerprint:
        raise AdapterLoadError(
            f"{source} is the base of another export (fingerprint {checked.fingerprint}); the task needs "
            f"{manifest.base_fingerprint}: export the task and its base together (export_run)"
        )


def read_shared_modules(base_dir: Path) -> dict[str, torch.Tensor]:
    """The method's shared modules exported with a base (CA-MTL's conditional modules), or {} when it has none."""
    if SHARED_MODULES_FILE not in read_base_manifest(base_dir).files:
        return {}
    return read_tensors(base_dir / SHARED_MODULES_FILE)


def load_shared_modules(model: MultiTaskModel, base_dir: Path | None) -> None:
    """Loads the shared modules exported with the base in ``base_dir`` (None: a frozen, unexported base)
    into ``model``, as its method's backend takes them (most have none)."""
    state = read_shared_modules(base_dir) if base_dir is not None else {}
    where = str(base_dir / SHARED_MODULES_FILE) if base_dir is not None else "a frozen base"
    model.backend.load_shared_state(model, state, where)


def _shared_state(folder: Path, manifest: TaskManifest, base) -> tuple[dict[str, torch.Tensor], str]:
    """The shared modules that go with the base `_load_base` loaded (its files were checked there)."""
    if isinstance(base, nn.Module):
        state = {k: v.detach().clone() for k, v in shared_state_dict(base).items()}
        return state, f"the {type(base).__name__} passed as base"
    if base is None and manifest.base_path is not None:
        base_dir = (folder / manifest.base_path).resolve()
    elif base is not None and Path(base).is_dir() and manifest_contents(Path(base)) == "base":
        base_dir = Path(base)
    else:
        return {}, f"the base {base or manifest.base_model_name!r} (not an exported base folder)"
    return read_shared_modules(base_dir), str(base_dir / SHARED_MODULES_FILE)


def checked_task_folder(folder: Path, allow_pickle: bool):
    """A task folder's manifest, task and method, after every file passed its checks."""
    manifest = read_task_manifest(folder)
    refuse_pickle(folder, manifest.files, allow_pickle)
    check_identity(folder, manifest)
    verify_files(folder, manifest.files)
    return manifest, task_spec_of(manifest, folder), _method_from_manifest(manifest, folder)


def load_task(export_dir: PathLike, base=None, *, allow_pickle: bool = False) -> MultiTaskModel:
    """Loads one exported task as a single-task `MultiTaskModel` (in eval mode), after checking every file.

    ``base``: a model name or folder, or a loaded transformers model (copied, never changed); by default
    the exported base for fine-tuned runs, else the manifest's base model name. Its fingerprint must be
    the one recorded at export. Pickle files (``.bin``) are refused unless ``allow_pickle=True``.

    The model answers one task; name it in the call::

        model = load_task("runs/main_job/export/rte")
        logits = model(task="rte", input_ids=ids, attention_mask=mask)["logits"]
    """
    folder = Path(export_dir)
    read_task_manifest(folder)  # one task folder: its own manifest, whatever its sub-folders hold
    return load_tasks([folder], base, allow_pickle=allow_pickle)


def task_folders(path: PathLike) -> list[Path]:
    """A task export folder, or every task folder of a run's export folder (sorted by name)."""
    path = Path(path)
    if manifest_contents(path) == "task":
        return [path]
    folders = sorted(p for p in path.iterdir() if manifest_contents(p) == "task") if path.is_dir() else []
    if not folders:
        read_task_manifest(path)  # raises the precise problem: missing, unreadable or not a task
        raise ConfigError(f"{path}: no task manifest.json here or in its sub-folders; point to a task export folder")
    return folders


def load_tasks(exports, base=None, *, allow_pickle: bool = False) -> MultiTaskModel:
    """Loads several exported tasks onto one shared base, as one `MultiTaskModel` (in eval mode).

    ``exports``: task export folders, or a run's export folder (all its tasks). Every task must have
    been trained with the same method, base mode and base (same fingerprint); each file is checked
    as in `load_task`. With an adapters method the model answers batches that mix tasks in one
    forward (``model(task_ids=..., ...)``, or `pals_adapters.harness.serving.MultiTaskPredictor`).
    """
    items = [exports] if isinstance(exports, (str, os.PathLike)) else list(exports)
    folders = [folder for item in items for folder in task_folders(item)]
    checked = [(folder, *checked_task_folder(folder, allow_pickle)) for folder in folders]
    first_folder, first, _, method = checked[0]
    specs = {}
    for folder, manifest, spec, other in checked:
        differences = [
            what
            for what, a, b in (
                ("method", other.spec, method.spec),
                ("base mode", manifest.base_mode, first.base_mode),
                ("base fingerprint", manifest.base_fingerprint, first.base_fingerprint),
                ("pooling", manifest.pooling or "pooler", first.pooling or "pooler"),
            )
            if a != b
        ]
        if differences:
            raise AdapterLoadError(
                f"{folder} and {first_folder} cannot share one model: their {', '.join(differences)} differ"
            )
        if spec.name in specs:
            raise AdapterLoadError(f"task {spec.name!r} is given twice ({folder})")
        specs[spec.name] = spec

    weight_files = get_backend(method.kind).weight_files
    if weight_files is not None:  # sizes checked before anything is built
        for folder, manifest, _, task_method in checked:
            weights = _weights_file(folder, manifest, weight_files, method.kind)
            check_task_size(folder, manifest, task_method, weights)
    encoder, source = _load_base(first_folder, first, base, allow_pickle)
    pooling = first.pooling or "pooler"  # exports before first-token pooling read the pretrained pooler
    if pooling == "pooler" and pretrained_pooler(encoder) is None:
        raise AdapterLoadError(
            f"the base from {source} has no pooler; the head of {first_folder} reads the pretrained pooler"
        )
    model = MultiTaskModel(encoder, specs, method, first.base_mode, pooling=pooling)
    shared, shared_source = _shared_state(first_folder, first, base)
    model.backend.load_shared_state(model, shared, shared_source)
    got, expected = fingerprint_model(model), first.base_fingerprint  # the method's shared modules included
    if got != expected:
        if first.base_path is not None:
            kind = "fine-tuned base" if first.base_mode == "finetune" else "base"
            wanted = f"the {kind} exported with it ({first.base_path} next to the task folder)"
        else:
            wanted = f"the unchanged pretrained base {base_location(first.base_model_name, first_folder)!r}"
        raise AdapterLoadError(
            f"the base from {source} has fingerprint {got}, but {first_folder} was trained on a base with "
            f"fingerprint {expected}: load it with {wanted}"
        )
    differences = base_config_differences(first.base_config, base_config(encoder))
    if differences:
        raise AdapterLoadError(
            f"the base from {source} has another model config than the one {first_folder} was trained on ("
            + "; ".join(differences)
            + "): its outputs would differ; load the task on its own base"
        )

    backend = model.backend
    for folder, manifest, spec, _ in checked:
        if backend.weight_files is not None:
            weights = _weights_file(folder, manifest, backend.weight_files, method.kind)
            backend.load_task(model, spec.name, folder, weights)
        load_module(model.task_head(spec.name), _weights_file(folder, manifest, (HEAD_FILE, "head.bin"), "head"))
    return model.eval()


def load_tokenizer(exports, base: str | None = None):
    """The tokenizer the tasks were trained with: the exported base's (fine-tuned runs), else that of ``base``
    or of the manifest's base model. ``exports``: a task folder, a run's export folder, or a list of them;
    the tokenizer's files must be those that every task's manifest recorded (AdapterLoadError if not)."""
    items = [exports] if isinstance(exports, (str, os.PathLike)) else list(exports)
    folders = [folder for item in items for folder in task_folders(item)]
    folder = folders[0]
    manifest = read_task_manifest(folder)
    if base is not None:
        source = base
    elif manifest.base_path is not None:  # the base exported with the task (fine-tuned, or frozen and carried)
        exported = (folder / manifest.base_path).resolve()
        checked = read_base_manifest(exported)
        verify_files(exported, checked.files)
        if "tokenizer_config.json" in checked.files:  # exported with its tokenizer (every run is)
            source = exported
        else:  # an export written before bases carried their tokenizer: the pretrained model's
            source = resolve_model(base_location(manifest.base_model_name, folder) or "")
    else:
        source = resolve_model(recorded_base(manifest, folder))
    try:
        tokenizer = pretrained_tokenizer(str(source))
    except PalsError:
        raise
    except (OSError, ValueError) as err:
        raise AdapterLoadError(f"cannot load the tokenizer of {source}: {err}{_WHERE_IS_THE_BASE}") from err
    check_tokenizer(tokenizer, folders, source)
    return tokenizer


def check_tokenizer(tokenizer, folders, source) -> None:
    """Refuses a tokenizer whose files differ from those any of the task folders recorded at export
    (every task is checked: tasks added to an export later record the tokenizer they were trained with)."""
    for folder in folders:
        folder = Path(folder)
        recorded = read_task_manifest(folder).tokenizer_files
        if recorded is None:
            logger.warning("%s records no tokenizer: the tokenizer of %s is used unchecked", folder / MANIFEST, source)
            continue
        changed = tokenizer_differences(recorded, tokenizer)
        if changed:
            raise AdapterLoadError(
                f"the tokenizer of {source} differs from the one {folder} was trained with ({', '.join(changed)} "
                "differ): its inputs would differ; use the base the task was trained on"
            )
