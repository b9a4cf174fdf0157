"""The values of a manifest, checked for type and range as it is read, each refusal naming the field and the
file. Exports are downloaded and shared: a manifest is input like any other, and a value it gets wrong must
stop the load with that name, not surface later as a traceback, a default put in its place, or an option
the user never gave."""

from __future__ import annotations

import math
from pathlib import Path

from safetensors import safe_open
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from ...errors import IntegrityError
from ..methods.accounting import count_method_parameters
from ..methods.peft_lora import SAVED_HEAD_PREFIX

MANIFEST_NAME = "manifest.json"  # `manifest.MANIFEST` (that module imports this one)

# The dtypes a base's weights load in (``from_pretrained(dtype=...)``); float8 and integer types hold no model.
BASE_DTYPES = ("float32", "bfloat16", "float16", "float64")


def _found(value) -> str:
    return f"found {type(value).__name__} {value!r}"


def _bad(path: Path, name: str, problem: str):
    raise IntegrityError(f"{path}: field {name!r} {problem}")


def _is_whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_format_version(path: Path, data: dict) -> int:
    """The manifest's format version: a whole number (``"3"``, a string, is refused as such)."""
    if "format_version" not in data:
        _bad(path, "format_version", "is missing")
    version = data["format_version"]
    if not _is_whole(version) or version < 1:
        _bad(path, "format_version", f"must be a whole number >= 1, {_found(version)}")
    return version


def check_dtype(path: Path, name: str, value) -> None:
    if value not in BASE_DTYPES:
        _bad(path, name, f"must be one of {', '.join(BASE_DTYPES)} (the dtypes a base loads in), {_found(value)}")


def _optional_whole(path: Path, name: str, value, minimum: int = 1) -> None:
    if value is not None and (not _is_whole(value) or value < minimum):
        _bad(path, name, f"must be a whole number >= {minimum} or null, {_found(value)}")


def _optional_text(path: Path, name: str, value) -> None:
    if value is not None and not isinstance(value, str):
        _bad(path, name, f"must be a string or null, {_found(value)}")


def check_task_fields(path: Path, data: dict) -> None:
    """The values of a task manifest that `read_task_manifest`'s structural checks leave: lengths, sizes,
    dtypes and the evaluation record."""
    check_dtype(path, "base_dtype", data.get("base_dtype"))
    _optional_whole(path, "max_length", data.get("max_length"))
    _optional_whole(path, "num_parameters", data.get("num_parameters"), minimum=0)
    for name in ("base_model_name", "base_path", "attn_implementation", "producer"):
        _optional_text(path, name, data.get(name))
    metrics = data.get("metrics")
    if metrics is not None and not isinstance(metrics, dict):
        _bad(path, "metrics", f"must be an object of numbers or null, {_found(metrics)}")
    evaluation = data.get("evaluation") or {}
    for name in ("max_eval_examples", "eval_batch_size"):
        _optional_whole(path, f"evaluation.{name}", evaluation.get(name))
    for name in ("glue_dir", "glue_dir_from_export", "data_source"):
        _optional_text(path, f"evaluation.{name}", evaluation.get(name))
    overrides = data["method"].get("overrides") or {}
    for name, value in overrides.items():
        if _is_whole(value) and value < 0:
            _bad(path, f"method.overrides.{name}", f"must not be negative, {_found(value)}")


def stored_elements(path: Path, skipped: tuple[str, ...] = ()) -> int:
    """How many numbers a safetensors file holds, from its header alone (nothing is read into memory), but for
    the tensors whose names start with one of ``skipped``."""
    with safe_open(str(path), "pt") as handle:
        names = [name for name in handle.keys() if not name.startswith(skipped)]
        return sum(math.prod(handle.get_slice(name).get_shape()) for name in names)


def check_task_size(folder: Path, manifest, method, weights: Path) -> None:
    """The task weights that the manifest's method and base config imply (counted on the meta device, nothing
    allocated) must be in its weights file: a size setting changed in the manifest (a hidden_size_aug of ten
    million) is refused here, before a model of that size is built."""
    if weights.suffix != ".safetensors":
        return  # a pickle file the caller allowed: its header cannot be read without unpickling it
    model_type = manifest.base_config.get("model_type")
    if model_type not in CONFIG_MAPPING:
        found = _found(model_type)
        _bad(folder / MANIFEST_NAME, "base_config.model_type", f"is no model type transformers knows, {found}")
    config = CONFIG_MAPPING[model_type].from_dict(manifest.base_config)
    implied = count_method_parameters(method.spec, config, n_tasks=1).per_task
    stored = stored_elements(weights, skipped=(SAVED_HEAD_PREFIX,))  # a PEFT task's head, saved for PEFT
    if implied != stored:
        _bad(
            folder / MANIFEST_NAME,
            "method",
            f"{method.spec!r} says the task has {implied:,} weights on its base config, but {weights.name} holds "
            f"{stored:,}: the weights file does not match method {method.spec!r} (a setting in the manifest changed?)",
        )
