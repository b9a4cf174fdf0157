"""Reading and writing weight files strictly: safetensors with the task named in their header,
and exact key/shape checks before anything is loaded into a model."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save
from torch import nn

from ...errors import AdapterLoadError, IntegrityError
from ...errors import config_differences as differences


def json_default(value: Any) -> Any:
    """JSON for the values that settings and metrics carry (sets, numpy / torch scalars)."""
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def save_tensors(path: Path, state_dict: Mapping[str, torch.Tensor], task: str, part: str) -> None:
    """A safetensors file whose header names the task and part (checked on load)."""
    # clone: safetensors refuses tensors that share storage
    tensors = {k: v.detach().cpu().contiguous().clone() for k, v in state_dict.items()}
    _write_safetensors(path, tensors, {"format": "pt", "task": task, "part": part})


def _write_safetensors(path: Path, tensors: Mapping[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """safetensors bytes whose header has its keys sorted: the same weights give the same file.

    safetensors writes the header's metadata in a hash order that changes between processes, so two
    exports of one checkpoint would differ in bytes. The sorted header has the same length and the
    same data offsets, so the file stays valid for every reader."""
    data = bytearray(save(dict(tensors), metadata=metadata))
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + size])
    canonical = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    if len(canonical) <= size:  # pad as the format allows (trailing spaces)
        data[8 : 8 + size] = canonical.ljust(size, b" ")
    Path(path).write_bytes(bytes(data))


def tag_with_task(path: Path, task: str) -> None:
    """Adds the task to the header of a safetensors file another library wrote."""
    with safe_open(str(path), "pt") as handle:
        metadata = dict(handle.metadata() or {})
    _write_safetensors(path, load_file(str(path)), {**metadata, "task": task})


def weights_task(path: Path) -> str | None:
    """The task recorded in a safetensors header, or None when there is none (or it cannot be read)."""
    try:
        with safe_open(str(path), "pt") as handle:
            return (handle.metadata() or {}).get("task")
    except Exception:  # unreadable files are reported by the sha256 check
        return None


def read_tensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        if path.suffix == ".safetensors":
            return load_file(str(path))
        return torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as err:
        raise IntegrityError(f"{path} cannot be read as weights: {err}") from err


def check_keys(path: Path, state: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor]) -> None:
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    shapes = sorted(k for k in set(state) & set(expected) if tuple(state[k].shape) != tuple(expected[k].shape))
    problems = []
    for label, keys in (("missing", missing), ("unexpected", unexpected), ("wrong shape", shapes)):
        if keys:
            more = f" (+{len(keys) - 4} more)" if len(keys) > 4 else ""
            problems.append(f"{label}: {', '.join(keys[:4])}{more}")
    if problems:
        raise AdapterLoadError(f"{path} does not match the model; nothing was loaded from it. " + "; ".join(problems))


def load_module(module: nn.Module, path: Path) -> None:
    """Loads a file written by `save_tensors` into ``module``, every key and shape checked first."""
    state = read_tensors(path)
    check_keys(path, state, module.state_dict())
    module.load_state_dict(state, strict=True)


def _normalised(value):
    return json.loads(json.dumps(value, sort_keys=True, default=json_default))


def saved_config_differences(saved: dict, live: dict, ignored=()) -> list[str]:
    """The settings that differ between a saved config and the live one, as readable lines."""
    return differences(
        saved, live, lambda key, a, b: f"{key}: file {a!r} vs method {b!r}", ignored=ignored, prepare=_comparable
    )


def _comparable(a, b) -> tuple:
    a, b = _normalised(a), _normalised(b)
    if isinstance(a, list) and isinstance(b, list) and all(isinstance(x, str) for x in a + b):
        a, b = sorted(a), sorted(b)  # PEFT's target_modules is a set
    return a, b


@contextlib.contextmanager
def quiet(logger_name: str) -> Iterator[None]:
    """Silences a library logger's warnings for an intended action (e.g. overwriting a fresh adapter)."""
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
