"""Per-task export of a multi-task run, and loading one task back with every file checked.

Layout written by `export_run`::

    <out_dir>/base/      the fine-tuned shared base (only with base_mode "finetune"): a plain
                         transformers model folder (safetensors) + manifest.json
    <out_dir>/<task>/    the task's native files (adapters: adapter_config.json + adapter.safetensors;
                         PEFT: adapter_config.json + adapter_model.safetensors; top: top.safetensors),
                         head.safetensors and manifest.json (written last)

Each folder is written into a hidden temporary sibling and moved into place with ``os.replace``,
so a crash leaves either the previous folder or none, never a half-written one that loads.
"""

import contextlib
import copy
import dataclasses
import hashlib
import json
import logging
import os
import re
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple, Union

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoModel, PreTrainedModel

from .errors import AdapterLoadError, ConfigError, IntegrityError
from .methods import BASE_MODES, get_method
from .multitask import MultiTaskModel
from .tasks import TaskSpec

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
BASE_DIR = "base"
# Extensions whose loading unpickles (arbitrary code execution on a malicious file).
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")

ADAPTER_CONFIG = "adapter_config.json"  # same name in `adapters` and PEFT
# (safetensors name, pickle name) of each part, as `adapters` / PEFT / this module write them.
WEIGHT_FILES = {
    "adapters": ("adapter.safetensors", "pytorch_adapter.bin"),
    "peft": ("adapter_model.safetensors", "adapter_model.bin"),
    "top": ("top.safetensors", "top.bin"),
    "head": ("head.safetensors", "head.bin"),
}

_PEFT_PREFIX = "base_model.model."
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# PEFT config fields that legitimately differ between the live adapter and its saved copy.
_PEFT_CONFIG_IGNORED = {"inference_mode", "base_model_name_or_path", "revision", "peft_version", "auto_mapping"}

PathLike = Union[str, os.PathLike]


# --------------------------------------------------------------------------- base weights and fingerprints


def _backbone(model: nn.Module) -> PreTrainedModel:
    """The transformers encoder inside a MultiTaskModel, PeftModel, AutoAdapterModel or plain model."""
    if isinstance(model, MultiTaskModel):
        return model.backbone
    if hasattr(model, "get_base_model"):  # PeftModel
        model = model.get_base_model()
    if not isinstance(model, PreTrainedModel):
        raise ConfigError(f"expected a transformers model or MultiTaskModel, got {type(model).__name__}")
    return model.base_model  # AutoAdapterModel / *ForSequenceClassification -> the encoder itself


def _plain_class(backbone: PreTrainedModel) -> type:
    # adapters.init swaps the instance's class for a subclass; the transformers class is in its MRO.
    for cls in type(backbone).__mro__:
        if cls.__module__.startswith("transformers.") and issubclass(cls, PreTrainedModel):
            return cls
    raise ConfigError(f"{type(backbone).__name__} is not a transformers model class")


def _clean_config(backbone: PreTrainedModel):
    config = copy.deepcopy(backbone.config)
    if hasattr(config, "adapters"):  # `adapters` may record its setup on the config
        delattr(config, "adapters")
    return config


_REFERENCE_KEYS: Dict[Tuple[type, str], frozenset] = {}


def _reference_keys(backbone: PreTrainedModel) -> frozenset:
    """State-dict names of a plain model of this class and config (built on the meta device: no memory)."""
    cls, config = _plain_class(backbone), _clean_config(backbone)
    key = (cls, config.to_json_string())
    if key not in _REFERENCE_KEYS:
        with torch.device("meta"):
            _REFERENCE_KEYS[key] = frozenset(cls(config).state_dict())
    return _REFERENCE_KEYS[key]


def _plain_name(name: str) -> str:
    if name.startswith(_PEFT_PREFIX):
        name = name[len(_PEFT_PREFIX):]
    return name.replace(".base_layer.", ".")


def base_state_dict(model: nn.Module) -> Dict[str, torch.Tensor]:
    """The shared base weights under plain transformers names (as ``AutoModel.from_pretrained`` names them).

    Adapter, LoRA and PAL weights, PEFT prefixes and per-task tops and heads are left out. The tensors
    share storage with the model: clone before changing them.
    """
    backbone = _backbone(model)
    expected = _reference_keys(backbone)
    out: Dict[str, torch.Tensor] = {}
    for name, tensor in backbone.state_dict().items():
        plain = _plain_name(name)
        if plain not in expected:
            continue  # an adapter / LoRA / PAL weight, or an alias such as adapters' prompt_tuning embeddings
        if plain in out:
            raise ConfigError(f"two weights of {type(backbone).__name__} map to the base name {plain!r}")
        out[plain] = tensor
    if not out:
        raise ConfigError(f"no base weights found in {type(backbone).__name__}")
    return out


def _tensor_bytes(tensor: torch.Tensor) -> memoryview:
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy())  # a byte view works for every dtype (bf16 too)


def fingerprint(state_dict: Mapping[str, torch.Tensor]) -> str:
    """sha256 over the sorted names, dtypes, shapes and raw bytes of the tensors (hex digest)."""
    digest = hashlib.sha256()
    for name in sorted(state_dict):
        tensor = state_dict[name]
        # length-prefixed fields: no two different state dicts can produce the same byte stream
        for field in (name, str(tensor.dtype), repr(tuple(tensor.shape))):
            encoded = field.encode()
            digest.update(struct.pack("<Q", len(encoded)) + encoded)
        data = _tensor_bytes(tensor)
        digest.update(struct.pack("<Q", data.nbytes))
        digest.update(data)
    return digest.hexdigest()


def fingerprint_model(model: nn.Module) -> str:
    """`fingerprint` of the base weights of an encoder (plain, adapters-wrapped, PEFT) or a MultiTaskModel."""
    return fingerprint(base_state_dict(model))


# --------------------------------------------------------------------------- writing


def _check_task_name(task: str) -> None:
    # the task name becomes a folder name next to base/ and the temporary folders
    if not isinstance(task, str) or not task or task == BASE_DIR or task.startswith(".") or re.search(r"[/\\]", task):
        raise ConfigError(
            f"task name {task!r} cannot be an export folder name (not '{BASE_DIR}', no '/', no leading '.')"
        )


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _hash_files(folder: Path) -> Dict[str, str]:
    files = {}
    for path in sorted(folder.iterdir()):
        if path.name == MANIFEST:
            continue
        if not path.is_file():
            raise ConfigError(f"unexpected non-file {path} in an export folder")
        files[path.name] = _sha256_file(path)
    return files


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if hasattr(value, "item"):  # numpy / torch scalars in metrics
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _write_json(path: Path, data: dict) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, sort_keys=True, default=_json_default)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())  # the manifest marks the folder whole: it must reach the disk


def _replace_dir(tmp: Path, target: Path) -> None:
    # os.replace cannot replace a non-empty folder: move the old one aside first, then swap.
    old = None
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
        os.rmdir(old)
        os.replace(target, old)
    try:
        os.replace(tmp, target)
    except BaseException:
        if old is not None:
            os.replace(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def _atomic_dir(target: Path):
    """Yields a hidden temporary sibling of ``target``; on success it becomes ``target``, else it is removed."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; the export is meant to be shared
        yield tmp
        _replace_dir(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _save_tensors(path: Path, state_dict: Mapping[str, torch.Tensor], task: str, part: str) -> None:
    # clone: safetensors refuses tensors that share storage; the metadata names the task for load checks
    tensors = {k: v.detach().cpu().contiguous().clone() for k, v in state_dict.items()}
    save_file(tensors, str(path), metadata={"format": "pt", "task": task, "part": part})


def _save_peft(model: MultiTaskModel, task: str, folder: Path, base_model_name: Optional[str]) -> None:
    scratch = folder / ".peft"
    # save_embedding_layers=False: the base (embeddings included) is exported and fingerprinted on its own;
    # PEFT's "auto" would also query the Hub about the base's vocabulary
    model.encoder.save_pretrained(
        str(scratch), selected_adapters=[task], safe_serialization=True, save_embedding_layers=False
    )
    source = scratch / task if (scratch / task).is_dir() else scratch  # PEFT nests non-"default" adapters
    weights = WEIGHT_FILES["peft"][0]
    for name in (ADAPTER_CONFIG, weights):
        os.replace(source / name, folder / name)
    shutil.rmtree(scratch)
    # tag the weights with the task (PEFT ignores extra metadata) so that load_task can spot a mix-up
    with safe_open(str(folder / weights), "pt") as handle:
        metadata = dict(handle.metadata() or {})
    save_file(load_file(str(folder / weights)), str(folder / weights), metadata={**metadata, "task": task})
    config = json.loads((folder / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    # for AutoPeftModel: the hub base only fits a frozen run; a fine-tuned base lives in ../base
    config["base_model_name_or_path"] = base_model_name
    (folder / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True), encoding="utf-8")


def _dtype_name(state_dict: Mapping[str, torch.Tensor]) -> str:
    floats = [t.dtype for t in state_dict.values() if t.is_floating_point()]
    return str(floats[0] if floats else torch.float32).replace("torch.", "")


def _spec_json(spec: TaskSpec) -> dict:
    data = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
    data["num_text_columns"] = len(spec.text_columns)
    return data


def _check_exportable(model: MultiTaskModel, task: Optional[str] = None) -> None:
    if not isinstance(model, MultiTaskModel):
        raise ConfigError(f"expected a MultiTaskModel, got {type(model).__name__}")
    if task is not None and task not in model.tasks:
        raise ConfigError(f"task {task!r} is not part of this model; its tasks are {list(model.tasks)}")
    try:
        json.dumps(model.method.overrides, default=_json_default)
    except TypeError as err:
        raise ConfigError(f"method overrides {model.method.overrides} cannot be written to JSON: {err}") from err


def _read_base_manifest(base_dir: Path) -> Optional[dict]:
    try:
        return json.loads((base_dir / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def export_base(
    model: MultiTaskModel, out_dir: PathLike, tokenizer=None, *, base_model_name: Optional[str] = None
) -> Path:
    """Writes the shared (fine-tuned) base once to ``<out_dir>/base/`` as a plain transformers model folder."""
    backbone = _backbone(model)
    state = base_state_dict(model)
    plain = _plain_class(backbone).from_pretrained(
        None, config=_clean_config(backbone), state_dict=state, dtype=_dtype_of(state)
    )
    target = Path(out_dir) / BASE_DIR
    with _atomic_dir(target) as tmp:
        plain.save_pretrained(str(tmp), safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(str(tmp))
        manifest = {
            "format_version": FORMAT_VERSION,
            "contents": "base",
            "base_model_name": base_model_name,
            "fingerprint": fingerprint(state),
            "dtype": _dtype_name(state),
            "attn_implementation": backbone.config._attn_implementation,
            "files": _hash_files(tmp),
        }
        _write_json(tmp / MANIFEST, manifest)
    return target


def _export_task(model, task, out_dir: Path, base_model_name: str, metrics, base_fp: str, dtype: str) -> Path:
    kind = model.method.kind
    frozen = model.base_mode == "frozen"
    with _atomic_dir(out_dir / task) as tmp:
        if kind == "adapters":
            model.encoder.save_adapter(str(tmp), task)  # adapters-native: plain load_adapter(dir) works
        elif kind == "peft":
            _save_peft(model, task, tmp, base_model_name if frozen else None)
        elif kind == "top":
            _save_tensors(tmp / WEIGHT_FILES["top"][0], model.tops[task].state_dict(), task, "top")
        _save_tensors(tmp / WEIGHT_FILES["head"][0], model.heads[task].state_dict(), task, "head")
        manifest = {
            "format_version": FORMAT_VERSION,
            "contents": "task",
            "producer": _producer(),
            "task": task,
            "task_spec": _spec_json(model.tasks[task]),
            "method": {"name": model.method.name, "kind": kind, "overrides": model.method.overrides},
            "base_mode": model.base_mode,
            "base_model_name": base_model_name,
            "base_fingerprint": base_fp,
            "base_dtype": dtype,
            "attn_implementation": model.backbone.config._attn_implementation,
            "base_path": None if frozen else f"../{BASE_DIR}",
            "metrics": metrics,
            "num_parameters": sum(p.numel() for _, p in model.task_parameters(task)),
            "files": _hash_files(tmp),
        }
        _write_json(tmp / MANIFEST, manifest)  # last: a folder without it never loads
    return out_dir / task


def _producer() -> str:
    import pals_adapters  # late: this module may be imported while the package initialises

    return f"pals_adapters {getattr(pals_adapters, '__version__', 'unknown')}"


def _ensure_base(model, out_dir: Path, base_fp: str, base_model_name: str) -> None:
    existing = _read_base_manifest(out_dir / BASE_DIR)
    if existing is None or existing.get("fingerprint") != base_fp:
        export_base(model, out_dir, base_model_name=base_model_name)


def export_task(
    model: MultiTaskModel, task: str, out_dir: PathLike, *, base_model_name: str, metrics: Optional[dict] = None
) -> Path:
    """Writes ``<out_dir>/<task>/`` (native adapter files, head, manifest). For a fine-tuned base it also
    writes ``<out_dir>/base/`` unless a base with the same fingerprint is already there."""
    _check_exportable(model, task)
    _check_task_name(task)
    out_dir = Path(out_dir)
    state = base_state_dict(model)
    base_fp = fingerprint(state)
    if model.base_mode == "finetune":
        _ensure_base(model, out_dir, base_fp, base_model_name)
    return _export_task(model, task, out_dir, base_model_name, metrics, base_fp, _dtype_name(state))


def export_run(
    model: MultiTaskModel,
    out_dir: PathLike,
    *,
    base_model_name: str,
    metrics_by_task: Optional[Dict[str, dict]] = None,
    tokenizer=None,
) -> Dict[str, Path]:
    """`export_base` (fine-tuned runs only) and `export_task` for every task; returns ``{name: folder}``."""
    _check_exportable(model)
    for task in model.tasks:
        _check_task_name(task)
    out_dir = Path(out_dir)
    state = base_state_dict(model)
    base_fp, dtype = fingerprint(state), _dtype_name(state)  # hashed once for all tasks
    paths: Dict[str, Path] = {}
    if model.base_mode == "finetune":
        paths[BASE_DIR] = export_base(model, out_dir, tokenizer, base_model_name=base_model_name)
    metrics_by_task = metrics_by_task or {}
    for task in model.tasks:
        paths[task] = _export_task(model, task, out_dir, base_model_name, metrics_by_task.get(task), base_fp, dtype)
    return paths


# --------------------------------------------------------------------------- reading and checking


def _read_manifest(folder: Path, contents: str) -> dict:
    path = folder / MANIFEST
    if not path.is_file():
        raise IntegrityError(
            f"{path} is missing: {folder} is not a complete export (a write that did not finish leaves none)"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise IntegrityError(f"{path} cannot be read as JSON: {err}") from err

    def bad(field, problem):
        raise IntegrityError(f"{path}: field {field!r} {problem}")

    if not isinstance(manifest, dict):
        bad("(root)", "must be a JSON object")
    version = manifest.get("format_version")
    if not isinstance(version, int):
        bad("format_version", "is missing")
    if version > FORMAT_VERSION:
        bad("format_version", f"is {version}; this pals_adapters reads up to {FORMAT_VERSION} (upgrade it)")
    if manifest.get("contents") != contents:
        bad("contents", f"is {manifest.get('contents')!r}, expected {contents!r}")
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        bad("files", "must map file names to sha256 digests")
    for name, digest in files.items():
        # plain names only: a manifest must not point outside its folder
        if not isinstance(name, str) or name in ("", ".", "..", MANIFEST) or re.search(r"[/\\]", name):
            bad("files", f"has an invalid file name {name!r}")
        if not isinstance(digest, str) or not _SHA256.match(digest):
            bad("files", f"has an invalid sha256 for {name!r}")
    if contents == "task":
        for field, kind in (("task", str), ("task_spec", dict), ("method", dict), ("base_mode", str),
                            ("base_fingerprint", str), ("base_dtype", str)):
            if not isinstance(manifest.get(field), kind) or not manifest[field]:
                bad(field, f"must be a non-empty {kind.__name__}")
        if manifest["base_mode"] not in BASE_MODES:
            bad("base_mode", f"must be one of {BASE_MODES}")
        if manifest["base_mode"] == "finetune" and not isinstance(manifest.get("base_path"), str):
            bad("base_path", "is required for a fine-tuned base")
        method = manifest["method"]
        if not isinstance(method.get("name"), str) or not isinstance(method.get("overrides", {}), dict):
            bad("method", "must hold 'name' and 'overrides'")
        if not isinstance(getattr(torch, manifest["base_dtype"], None), torch.dtype):
            bad("base_dtype", f"{manifest['base_dtype']!r} is not a torch dtype")
    return manifest


def _refuse_pickle(folder: Path, files: Mapping[str, str], allow_pickle: bool) -> None:
    if allow_pickle:
        return
    present = {p.name for p in folder.iterdir() if p.is_file()}
    pickled = sorted(n for n in present | set(files) if n.lower().endswith(PICKLE_SUFFIXES))
    if pickled:
        raise IntegrityError(
            f"{folder / pickled[0]}: pickle weight file refused (loading it can run arbitrary code); "
            "re-export with safetensors, or pass allow_pickle=True if you trust its source"
        )


def _verify_files(folder: Path, files: Mapping[str, str]) -> None:
    for name, expected in sorted(files.items()):
        path = folder / name
        if not path.is_file():
            raise IntegrityError(f"{path} is listed in {MANIFEST} but missing")
        actual = _sha256_file(path)
        if actual != expected:
            raise IntegrityError(
                f"{path} is corrupted or truncated ({path.stat().st_size} bytes): its sha256 is {actual}, "
                f"{MANIFEST} expects {expected}"
            )


def _weights_task(path: Path) -> Optional[str]:
    """The task recorded in a safetensors header, or None when there is none (or it cannot be read)."""
    try:
        with safe_open(str(path), "pt") as handle:
            return (handle.metadata() or {}).get("task")
    except Exception:  # unreadable files are reported by the sha256 check
        return None


def _check_identity(folder: Path, manifest: dict) -> None:
    """Every file that names its task must name the manifest's task (catches files copied between tasks)."""
    task = manifest["task"]
    for name in manifest["files"]:
        path = folder / name
        if not path.is_file():
            continue
        found = None
        if name == ADAPTER_CONFIG:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                found = json.loads(path.read_text(encoding="utf-8")).get("name")
        elif name.endswith(".safetensors"):
            found = _weights_task(path)
        if found is not None and found != task:
            raise IntegrityError(
                f"{path} belongs to task {found!r}, but {folder / MANIFEST} is for task {task!r}: "
                "the folder mixes files of two tasks; re-export it"
            )


def _read_tensors(path: Path) -> Dict[str, torch.Tensor]:
    try:
        if path.suffix == ".safetensors":
            return load_file(str(path))
        return torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as err:
        raise IntegrityError(f"{path} cannot be read as weights: {err}") from err


def _weights_file(folder: Path, manifest: dict, part: str) -> Path:
    for name in WEIGHT_FILES[part]:  # safetensors first
        if name in manifest["files"]:
            return folder / name
    raise IntegrityError(
        f"{folder / MANIFEST} lists no {' or '.join(WEIGHT_FILES[part])} for the task's {part} weights"
    )


def _spec_from_manifest(manifest: dict, where: Path) -> TaskSpec:
    fields = {f.name for f in dataclasses.fields(TaskSpec)}
    data = {k: v for k, v in manifest["task_spec"].items() if k in fields}
    try:
        spec = TaskSpec(**data)
    except (TypeError, ConfigError) as err:
        raise IntegrityError(f"{where / MANIFEST}: task_spec is not valid: {err}") from err
    if spec.name != manifest["task"]:
        raise IntegrityError(
            f"{where / MANIFEST}: task_spec is for {spec.name!r}, the manifest for {manifest['task']!r}"
        )
    return spec


def _method_from_manifest(manifest: dict, where: Path):
    info = manifest["method"]
    try:
        method = dataclasses.replace(get_method(info["name"]), overrides=dict(info.get("overrides") or {}))
    except ConfigError as err:
        raise AdapterLoadError(f"{where / MANIFEST}: method {info['name']!r} is not known here: {err}") from err
    if info.get("kind", method.kind) != method.kind:
        raise AdapterLoadError(
            f"{where / MANIFEST}: method {method.name!r} was of kind {info['kind']!r}, here it is {method.kind!r}"
        )
    return method


def _from_pretrained(source: str, manifest: dict, allow_pickle: bool) -> PreTrainedModel:
    kwargs = {"dtype": getattr(torch, manifest["base_dtype"])}
    if manifest.get("attn_implementation") in ("eager", "sdpa"):
        kwargs["attn_implementation"] = manifest["attn_implementation"]  # same kernels -> same predictions
    if not allow_pickle:
        kwargs["use_safetensors"] = True
    try:
        return AutoModel.from_pretrained(source, **kwargs)
    except (OSError, ValueError) as err:
        raise AdapterLoadError(f"cannot load the base model {source!r}: {err}") from err


def _load_base(folder: Path, manifest: dict, base, allow_pickle: bool) -> Tuple[PreTrainedModel, str]:
    """Builds a fresh plain encoder; never changes a model passed in."""
    if isinstance(base, nn.Module):
        backbone = _backbone(base)
        state = {k: v.detach().clone() for k, v in base_state_dict(backbone).items()}
        model = _plain_class(backbone).from_pretrained(
            None, config=_clean_config(backbone), state_dict=state, dtype=_dtype_of(state)
        )
        model.config._name_or_path = backbone.config._name_or_path  # not "None" (PEFT would look that up)
        return model, f"the {type(base).__name__} passed as base"
    if base is None:
        if manifest["base_mode"] == "finetune":
            base = (folder / manifest["base_path"]).resolve()
            if not base.is_dir():
                raise AdapterLoadError(
                    f"{folder} was trained with a fine-tuned base, expected at {base} (export_base / export_run "
                    "write it); copy it there or pass base="
                )
        else:
            base = manifest.get("base_model_name")
            if not base:
                raise AdapterLoadError(f"{folder / MANIFEST} names no base model; pass base=")
    source = Path(base)
    base_manifest = _read_base_manifest(source) if source.is_dir() else None
    if base_manifest is not None and base_manifest.get("contents") == "base":
        # an exported base: check its files before reading any of them
        checked = _read_manifest(source, "base")
        _refuse_pickle(source, checked["files"], allow_pickle)
        _verify_files(source, checked["files"])
    return _from_pretrained(str(base), manifest, allow_pickle), str(base)


def _dtype_of(state: Mapping[str, torch.Tensor]) -> torch.dtype:
    return getattr(torch, _dtype_name(state))


@contextlib.contextmanager
def _quiet(logger_name: str):
    # `adapters` warns "Overwriting existing adapter" on the intended overwrite of the fresh adapter
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _normalised(value):
    return json.loads(json.dumps(value, sort_keys=True, default=_json_default))


def _config_differences(saved: dict, live: dict, ignored=()) -> list:
    diffs = []
    for key in sorted(set(saved) & set(live)):
        if key in ignored:
            continue
        a, b = _normalised(saved[key]), _normalised(live[key])
        if isinstance(a, list) and isinstance(b, list) and all(isinstance(x, str) for x in a + b):
            a, b = sorted(a), sorted(b)  # PEFT's target_modules is a set
        if a != b:
            diffs.append(f"{key}: file {a!r} vs method {b!r}")
    return diffs


def _load_adapters(model: MultiTaskModel, folder: Path, manifest: dict) -> None:
    from adapters import AdapterConfig

    task = manifest["task"]
    path = folder / ADAPTER_CONFIG
    try:
        saved = AdapterConfig.load(json.loads(path.read_text(encoding="utf-8"))["config"]).to_dict()
    except (ValueError, KeyError, TypeError) as err:
        raise IntegrityError(f"{path} is not an adapters config: {err}") from err
    live = model.encoder.adapters_config.get(task).to_dict()
    diffs = _config_differences(saved, live)
    if diffs:
        raise AdapterLoadError(f"{path} does not match method {model.method.name!r} of {MANIFEST}: {'; '.join(diffs)}")
    weights = _weights_file(folder, manifest, "adapters")
    info: Dict[str, list] = {}
    try:
        with _quiet("adapters.loading"):
            model.encoder.load_adapter(
                str(folder), load_as=task, use_safetensors=weights.suffix == ".safetensors", loading_info=info,
                allow_pickle=weights.suffix != ".safetensors",  # load_task refused pickle unless allowed
            )
    except RuntimeError as err:  # torch: size mismatch
        raise AdapterLoadError(f"{weights} does not fit the model: {err}") from err
    problems = [f"{label}: {sorted(keys)[:4]}" for label, keys in
                (("missing", info.get("missing_keys", [])), ("unexpected", info.get("unexpected_keys", []))) if keys]
    if problems:
        raise AdapterLoadError(f"{weights} does not match adapter {task!r}: " + "; ".join(problems))


def _load_peft(model: MultiTaskModel, folder: Path, manifest: dict) -> None:
    from peft import set_peft_model_state_dict

    task = manifest["task"]
    path = folder / ADAPTER_CONFIG
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:
        raise IntegrityError(f"{path} is not a PEFT config: {err}") from err
    live = model.encoder.peft_config[task].to_dict()
    diffs = _config_differences(saved, live, _PEFT_CONFIG_IGNORED)
    if diffs:
        raise AdapterLoadError(f"{path} does not match method {model.method.name!r} of {MANIFEST}: {'; '.join(diffs)}")
    weights = _weights_file(folder, manifest, "peft")
    state = _read_tensors(weights)
    try:
        result = set_peft_model_state_dict(model.encoder, state, adapter_name=task)
    except RuntimeError as err:  # torch: size mismatch
        raise AdapterLoadError(f"{weights} does not fit the model: {err}") from err
    # PEFT loads non-strictly; every LoRA weight of this task must come from the file, and nothing else
    missing = [k for k in result.missing_keys if re.search(rf"\.lora_\w+\.{re.escape(task)}\.", k)]
    problems = [f"{label}: {sorted(keys)[:4]}" for label, keys in
                (("missing", missing), ("unexpected", result.unexpected_keys)) if keys]
    if problems:
        raise AdapterLoadError(f"{weights} does not match PEFT adapter {task!r}: " + "; ".join(problems))


def _check_keys(path: Path, state: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor]) -> None:
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    shapes = sorted(k for k in set(state) & set(expected) if tuple(state[k].shape) != tuple(expected[k].shape))
    problems = []
    for label, keys in (("missing", missing), ("unexpected", unexpected), ("wrong shape", shapes)):
        if keys:
            problems.append(f"{label}: {', '.join(keys[:4])}" + (f" (+{len(keys) - 4} more)" if len(keys) > 4 else ""))
    if problems:
        raise AdapterLoadError(f"{path} does not match the model; nothing was loaded from it. " + "; ".join(problems))


def _load_module(module: nn.Module, path: Path) -> None:
    state = _read_tensors(path)
    _check_keys(path, state, module.state_dict())
    module.load_state_dict(state, strict=True)


def load_task(export_dir: PathLike, base=None, *, allow_pickle: bool = False) -> MultiTaskModel:
    """Loads one exported task as a single-task `MultiTaskModel` (in eval mode), after checking every file.

    ``base``: a model name or folder, or a loaded transformers model (copied, never changed); by default
    the exported base for fine-tuned runs, else the manifest's base model name. Its fingerprint must be
    the one recorded at export. Pickle files (``.bin``) are refused unless ``allow_pickle=True``.
    """
    folder = Path(export_dir)
    manifest = _read_manifest(folder, "task")
    files = manifest["files"]
    _refuse_pickle(folder, files, allow_pickle)
    _check_identity(folder, manifest)
    _verify_files(folder, files)
    task = manifest["task"]
    spec = _spec_from_manifest(manifest, folder)
    method = _method_from_manifest(manifest, folder)

    encoder, source = _load_base(folder, manifest, base, allow_pickle)
    got, expected = fingerprint_model(encoder), manifest["base_fingerprint"]
    if got != expected:
        if manifest["base_mode"] == "finetune":
            wanted = f"the fine-tuned base exported with it ({manifest['base_path']} next to the task folder)"
        else:
            wanted = f"the unchanged pretrained base {manifest.get('base_model_name')!r}"
        raise AdapterLoadError(
            f"the base from {source} has fingerprint {got}, but {folder} was trained on a base with fingerprint "
            f"{expected}: load it with {wanted}"
        )
    if getattr(encoder, "pooler", None) is None:
        raise AdapterLoadError(f"the base from {source} has no pooler; the task head reads the pooled output")

    model = MultiTaskModel(encoder, {task: spec}, method, manifest["base_mode"])
    kind = method.kind
    if kind == "adapters":
        _load_adapters(model, folder, manifest)
    elif kind == "peft":
        _load_peft(model, folder, manifest)
    elif kind == "top":
        _load_module(model.tops[task], _weights_file(folder, manifest, "top"))
    _load_module(model.heads[task], _weights_file(folder, manifest, "head"))
    return model.eval()
