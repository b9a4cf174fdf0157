"""The typed manifests of an export folder: what it holds, where it came from, the sha256 of each file.

Every reader (loading, the CLI) goes through `read_task_manifest` / `read_base_manifest`; nothing
reads a manifest by string key elsewhere. A manifest is written last: a folder without one is an
export that did not finish.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

from ...errors import IntegrityError
from ..methods.method import BASE_MODES, current_name
from ..methods.model import POOLINGS
from ..methods.weights import json_default
from .manifest_fields import check_dtype, check_format_version, check_task_fields

# 2: the base's config and tokenizer are part of its identity; evaluation settings.
# 3: the tokenizer recorded by what decides the token ids, a task's pooling and its data files. A
# reader of 2 would misread those, so it is told to upgrade; this one still reads 2.
FORMAT_VERSION = 3
OLDEST_TASK_FORMAT = 2  # before it, a task's base cannot be checked
MANIFEST = "manifest.json"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class MethodRecord:
    """The method a task was trained with: its name, backend and settings."""

    name: str
    kind: str
    overrides: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EvaluationRecord:
    """How the run scored the task at its end; `pals-bench evaluate` repeats it unless told otherwise."""

    max_eval_examples: int | None = None
    eval_batch_size: int | None = None
    glue_dir: str | None = None  # by its name (see `library_heads.data_source_name`)
    glue_dir_from_export: str | None = None  # the GLUE folder relative to the task folder, as user data is
    data_source: str | None = None
    examples_scored: dict[str, dict[str, int]] | None = None  # task -> dev split -> examples scored
    step: int | None = None  # the training step the metrics were measured at (a checkpoint's); None: the run's end


@dataclass(frozen=True)
class BaseManifest:
    """``<export>/base/manifest.json``: a fine-tuned shared base, as a plain transformers folder."""

    contents: ClassVar[str] = "base"

    fingerprint: str
    dtype: str
    files: dict[str, str]
    base_model_name: str | None = None
    attn_implementation: str | None = None
    tokenizer_files: dict[str, str] | None = None  # see fingerprint.tokenizer_fingerprint
    format_version: int = FORMAT_VERSION


@dataclass(frozen=True)
class TaskManifest:
    """``<export>/<task>/manifest.json``: one task's own files and what they need to load."""

    contents: ClassVar[str] = "task"

    task: str
    task_spec: dict[str, Any]
    method: MethodRecord
    base_mode: str
    base_fingerprint: str  # of the base weights
    base_dtype: str
    files: dict[str, str]
    base_config: dict[str, Any]  # the base's model config: with the weights and tokenizer, what the base is
    base_model_name: str | None = None
    attn_implementation: str | None = None
    base_path: str | None = None  # relative to the task folder; None for a frozen (unchanged) base
    metrics: dict[str, float] | None = None
    max_length: int | None = None  # tokens per example in training: evaluate / predict use the same
    tokenizer_files: dict[str, str] | None = None  # the tokenizer the task was trained with
    evaluation: EvaluationRecord | None = None
    # a user task's files: where they were seen from this folder, and their sha256 (`data.data_record`)
    task_data: dict[str, Any] | None = None
    # a dataset-backed task's dataset: source, resolved revision, each split's fingerprint (`dataset_record`)
    dataset_source: dict[str, Any] | None = None
    num_parameters: int | None = None
    producer: str | None = None
    # how the head reads the encoder (`model.POOLINGS`); None in exports written before "first_token": "pooler"
    pooling: str | None = None
    format_version: int = FORMAT_VERSION


def write_manifest(folder: Path, manifest: BaseManifest | TaskManifest) -> None:
    data = {"contents": manifest.contents, **asdict(manifest)}
    with open(folder / MANIFEST, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, sort_keys=True, default=json_default)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())  # the manifest marks the folder whole: it must reach the disk


def _load_json(folder: Path) -> dict:
    path = folder / MANIFEST
    if not path.is_file():
        raise IntegrityError(
            f"{path} is missing: {folder} is not a complete export (a write that did not finish leaves none)"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise IntegrityError(f"{path} cannot be read as JSON: {err}") from err
    if not isinstance(data, dict):
        raise IntegrityError(f"{path}: field '(root)' must be a JSON object")
    return data


def manifest_contents(folder: Path) -> str | None:
    """``"task"``, ``"base"``, or None when ``folder`` holds no readable manifest."""
    try:
        return _load_json(folder).get("contents")
    except IntegrityError:
        return None


def _check_common(path: Path, data: dict, contents: str) -> None:
    def bad(name, problem):
        raise IntegrityError(f"{path}: field {name!r} {problem}")

    version = check_format_version(path, data)
    if version > FORMAT_VERSION:
        bad("format_version", f"is {version}; this pals_adapters reads up to {FORMAT_VERSION} (upgrade it)")
    if version < OLDEST_TASK_FORMAT and contents == "task":
        bad(
            "format_version",
            f"is {version}: written before the base's config and tokenizer were recorded, so "
            "the base cannot be checked; re-export the run (pals-bench export RUN_DIR)",
        )
    if data.get("contents") != contents:
        bad("contents", f"is {data.get('contents')!r}, expected {contents!r}")
    files = data.get("files")
    if not isinstance(files, dict) or not files:
        bad("files", "must map file names to sha256 digests")
    for name, digest in files.items():
        # plain names only: a manifest must not point outside its folder
        if not isinstance(name, str) or name in ("", ".", "..", MANIFEST) or re.search(r"[/\\]", name):
            bad("files", f"has an invalid file name {name!r}")
        if not isinstance(digest, str) or not _SHA256.match(digest):
            bad("files", f"has an invalid sha256 for {name!r}")


def _known_fields(cls, data: dict) -> dict:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def read_base_manifest(folder: Path) -> BaseManifest:
    data = _load_json(folder)
    path = folder / MANIFEST
    _check_common(path, data, "base")
    for name in ("fingerprint", "dtype"):
        if not isinstance(data.get(name), str) or not data[name]:
            raise IntegrityError(f"{path}: field {name!r} must be a non-empty str")
    check_dtype(path, "dtype", data["dtype"])
    return BaseManifest(**_known_fields(BaseManifest, data))


def read_task_manifest(folder: Path) -> TaskManifest:
    data = _load_json(folder)
    path = folder / MANIFEST

    def bad(name, problem):
        raise IntegrityError(f"{path}: field {name!r} {problem}")

    _check_common(path, data, "task")
    for name, kind in (
        ("task", str),
        ("task_spec", dict),
        ("method", dict),
        ("base_mode", str),
        ("base_fingerprint", str),
        ("base_dtype", str),
        ("base_config", dict),
    ):
        if not isinstance(data.get(name), kind) or not data[name]:
            bad(name, f"must be a non-empty {kind.__name__}")
    for name, kind in (
        ("tokenizer_files", dict),
        ("evaluation", dict),
        ("max_length", int),
        ("task_data", dict),
        ("dataset_source", dict),
    ):
        if data.get(name) is not None and not isinstance(data[name], kind):
            bad(name, f"must be a {kind.__name__} or null")
    if data["base_mode"] not in BASE_MODES:
        bad("base_mode", f"must be one of {BASE_MODES}")
    if data.get("pooling") is not None and data["pooling"] not in POOLINGS:
        bad("pooling", f"must be one of {POOLINGS} or null")
    if data["base_mode"] == "finetune" and not isinstance(data.get("base_path"), str):
        bad("base_path", "is required for a fine-tuned base")
    method = data["method"]
    if not isinstance(method.get("name"), str) or not isinstance(method.get("overrides", {}), dict):
        bad("method", "must hold 'name' and 'overrides'")
    check_task_fields(path, data)
    # an export written before a method was renamed (top_pals) reads as the method's current name
    record = MethodRecord(current_name(method["name"]), method.get("kind", ""), dict(method.get("overrides") or {}))
    evaluation = data.get("evaluation")
    evaluation = EvaluationRecord(**_known_fields(EvaluationRecord, evaluation)) if evaluation else None
    return TaskManifest(**{**_known_fields(TaskManifest, data), "method": record, "evaluation": evaluation})
