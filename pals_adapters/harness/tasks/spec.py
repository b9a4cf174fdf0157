"""Task specifications: the GLUE registry and user-defined tasks."""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ...errors import ConfigError, UnknownNameError
from .dataset_source import check_source
from .readers import label_text

CLASSIFICATION_METRICS = ("accuracy", "f1", "matthews")
REGRESSION_METRICS = ("pearson", "spearman")
FILE_FORMATS = ("tsv", "csv", "jsonl")
EXTENSION_FORMATS = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}

# The file stems GLUE's submission server expects, per (task, split).
GLUE_SUBMISSION_NAMES = {
    ("cola", "test"): "CoLA",
    ("sst2", "test"): "SST-2",
    ("mrpc", "test"): "MRPC",
    ("stsb", "test"): "STS-B",
    ("qqp", "test"): "QQP",
    ("mnli", "test_matched"): "MNLI-m",
    ("mnli", "test_mismatched"): "MNLI-mm",
    ("qnli", "test"): "QNLI",
    ("rte", "test"): "RTE",
    ("wnli", "test"): "WNLI",
}


@dataclass(frozen=True)
class TaskSpec:
    """Everything needed to load and score one task.

    ``splits`` maps a split name to a file relative to the task folder
    (``<glue_dir>/<glue_folder>`` for GLUE, ``data_dir`` for user tasks: the folder of
    the task file, so that a moved data folder is the same task with another ``data_dir``).
    ``labels`` are the label strings as they appear in the files; a loaded
    ``label`` is an index into this tuple. ``hub_columns``/``hub_labels``
    describe the Hugging Face hub copy when it differs from the files.
    ``id_column`` names a column of row ids that loading keeps (as ``id``);
    ``skip_bad_rows`` skips malformed rows of the files, counted and reported,
    instead of refusing the file.
    ``dataset`` names a `datasets` dataset instead of files (`dataset_source`); ``splits`` then maps each
    split to the dataset's split or slice, and ``label_subset`` lets ``labels`` keep some of its classes.
    """

    name: str
    text_columns: tuple[str, ...]
    label_column: str | None
    is_regression: bool
    labels: tuple[str, ...]
    metrics: tuple[str, ...]
    splits: dict[str, str] = field(hash=False)
    file_format: str = "tsv"
    has_header: bool | dict[str, bool] = field(default=True, hash=False)
    column_positions: dict[str, int] | None = field(default=None, hash=False)
    data_dir: str | None = None
    glue_folder: str | None = None
    hub: tuple[str, str] | None = None
    hub_columns: tuple[str, ...] | None = None
    hub_labels: tuple[str, ...] | None = None
    label_range: tuple[float, float] | None = None
    id_column: str | None = None
    skip_bad_rows: bool = False
    dataset: dict[str, Any] | None = field(default=None, hash=False)
    label_subset: bool = False

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def num_labels(self) -> int:
        """Output size of the task head: 1 for regression, else the label count."""
        return 1 if self.is_regression else len(self.labels)

    @property
    def is_pair(self) -> bool:
        """True when the task has two text columns (``text_b`` is meaningful)."""
        return len(self.text_columns) == 2

    @property
    def dev_splits(self) -> list[str]:
        """The splits scored during and after training (MNLI has two)."""
        return [s for s in self.splits if s.startswith("validation")]

    @property
    def test_splits(self) -> list[str]:
        """The splits predicted for submission (may be unlabelled)."""
        return [s for s in self.splits if s.startswith("test")]

    def submission_name(self, split: str) -> str:
        """File stem of the split's prediction file: GLUE's own names for GLUE tasks, else task-split."""
        return (
            GLUE_SUBMISSION_NAMES.get((self.name, split), f"{self.name}-{split}")
            if self.glue_folder
            else (f"{self.name}-{split}")
        )

    def header_for(self, split: str) -> bool:
        """Whether the file of ``split`` starts with a header line."""
        if isinstance(self.has_header, bool):
            return self.has_header
        return self.has_header.get(split, True)

    def split_path(self, split: str, glue_dir: str | os.PathLike | None = None) -> Path:
        """Path of the file of ``split`` (GLUE tasks need ``glue_dir``)."""
        if split not in self.splits:
            raise UnknownNameError(f"split of task {self.name!r}", split, self.splits)
        if self.dataset is not None:
            raise ConfigError(f"task {self.name!r} reads a dataset, not files: its {split} is {self.splits[split]!r}")
        if self.data_dir is not None:
            return Path(os.path.normpath(Path(self.data_dir) / self.splits[split]))
        if glue_dir is None:
            raise ConfigError(f"task {self.name!r} needs glue_dir (or env GLUE_DIR) to read local files")
        return Path(glue_dir) / (self.glue_folder or self.name) / self.splits[split]


def spec_to_json(spec: TaskSpec) -> dict[str, Any]:
    """The spec as plain JSON values (labels in their order); `spec_from_json` reads it back."""
    data = {f.name: getattr(spec, f.name) for f in fields(spec)}
    data["num_text_columns"] = len(spec.text_columns)  # for readers of the manifest that are not Python
    return json.loads(json.dumps(data))


def spec_from_json(data: dict[str, Any]) -> TaskSpec:
    """The spec written by `spec_to_json` (ConfigError when it is not a valid spec)."""
    known = {f.name for f in fields(TaskSpec)}
    try:
        return TaskSpec(**{k: v for k, v in data.items() if k in known})
    except TypeError as err:  # a required field is missing
        raise ConfigError(f"not a task spec: {err}") from None


def _set(spec: TaskSpec, name: str, value: Any) -> None:
    object.__setattr__(spec, name, value)


def _str_tuple(spec: TaskSpec, name: str, allow_none: bool = False) -> None:
    value = getattr(spec, name)
    if value is None and allow_none:
        return
    if isinstance(value, str):
        value = (value,)
    try:
        value = tuple(value)
    except TypeError:
        raise ConfigError(f"TaskSpec.{name} must be a sequence of strings, got {value!r}") from None
    if not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"TaskSpec.{name} must contain non-empty strings, got {value!r}")
    if len(set(value)) != len(value):
        raise ConfigError(f"TaskSpec.{name} has duplicates: {value!r}")
    _set(spec, name, value)


# A task name becomes an export folder (next to base/), a module key and a metric prefix.
_TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
RESERVED_NAMES = ("base",)


def check_task_name(name: Any) -> None:
    """Refuses a task name that cannot name an export folder and a model key (ConfigError)."""
    if not isinstance(name, str) or not _TASK_NAME.fullmatch(name) or name.lower() in RESERVED_NAMES:
        raise ConfigError(
            f"task name {name!r}: use letters, digits, '_' and '-', starting with a letter or digit, at most 64 "
            f"characters, not {' or '.join(map(repr, RESERVED_NAMES))} (the name becomes a folder of the export)"
        )


def _validate(spec: TaskSpec) -> None:
    """Normalise sequences to tuples and check every field (ConfigError naming it)."""
    check_task_name(spec.name)
    where = f"task {spec.name!r}: TaskSpec"
    _canonical_labels(spec, where)
    for name in ("text_columns", "labels", "metrics"):
        _str_tuple(spec, name)
    for name in ("hub_columns", "hub_labels"):
        _str_tuple(spec, name, allow_none=True)
    if not 1 <= len(spec.text_columns) <= 2:
        raise ConfigError(f"{where}.text_columns must name 1 or 2 columns, got {spec.text_columns!r}")
    if spec.label_column is not None and (not isinstance(spec.label_column, str) or not spec.label_column):
        raise ConfigError(f"{where}.label_column must be a non-empty string or None")
    if spec.label_column in spec.text_columns:
        raise ConfigError(
            f"{where}.label_column {spec.label_column!r} is also a text column: the label would be "
            "part of the input; name another column"
        )
    if spec.id_column is not None and (not isinstance(spec.id_column, str) or not spec.id_column):
        raise ConfigError(f"{where}.id_column must be a column name (a non-empty string) or None")
    if spec.id_column is not None and spec.id_column in (*spec.text_columns, spec.label_column):
        raise ConfigError(
            f"{where}.id_column {spec.id_column!r} is also the text or label column; name the column that "
            "holds the row ids"
        )
    if spec.dataset is not None:
        check_source(spec.dataset, where + ".dataset")
    if not isinstance(spec.label_subset, bool):
        raise ConfigError(f"{where}.label_subset must be true or false, got {spec.label_subset!r}")
    if spec.label_subset and spec.dataset is None:
        raise ConfigError(f"{where}.label_subset applies to a task of a dataset with a ClassLabel column")
    if not isinstance(spec.skip_bad_rows, bool):
        raise ConfigError(f"{where}.skip_bad_rows must be true or false, got {spec.skip_bad_rows!r}")
    if not isinstance(spec.is_regression, bool):
        raise ConfigError(f"{where}.is_regression must be a bool")
    if spec.is_regression and spec.labels:
        raise ConfigError(f"{where}.labels must be empty for a regression task")
    if not spec.is_regression and len(spec.labels) < 2:
        raise ConfigError(f"{where}.labels must list at least 2 labels for classification, got {spec.labels!r}")
    allowed = REGRESSION_METRICS if spec.is_regression else CLASSIFICATION_METRICS
    if not spec.metrics:
        raise ConfigError(f"{where}.metrics must not be empty")
    for metric in spec.metrics:
        if metric not in allowed:
            kind = "regression" if spec.is_regression else "classification"
            raise ConfigError(f"{where}.metrics: {metric!r} is not a {kind} metric; use one of {', '.join(allowed)}")
    if "f1" in spec.metrics and len(spec.labels) != 2:
        raise ConfigError(f"{where}.metrics: 'f1' needs exactly 2 labels, got {len(spec.labels)}")
    if not isinstance(spec.splits, dict) or not spec.splits:
        raise ConfigError(f"{where}.splits must be a non-empty dict split -> file")
    for split, file in spec.splits.items():
        if not isinstance(split, str) or not split or not isinstance(file, str) or not file:
            raise ConfigError(f"{where}.splits: bad entry {split!r}: {file!r}")
    if spec.file_format not in FILE_FORMATS:
        raise ConfigError(f"{where}.file_format must be one of {', '.join(FILE_FORMATS)}, got {spec.file_format!r}")
    _validate_header(spec, where)
    if spec.data_dir is not None and not isinstance(spec.data_dir, (str, os.PathLike)):
        raise ConfigError(f"{where}.data_dir must be a path or None")
    if spec.data_dir is not None:
        _set(spec, "data_dir", os.fspath(spec.data_dir))
    if spec.hub is not None:
        hub = tuple(spec.hub)
        if len(hub) != 2 or not all(isinstance(h, str) and h for h in hub):
            raise ConfigError(f"{where}.hub must be (dataset_id, config_name), got {spec.hub!r}")
        _set(spec, "hub", hub)
    if spec.hub_columns is not None and len(spec.hub_columns) != len(spec.text_columns):
        raise ConfigError(f"{where}.hub_columns must have as many entries as text_columns")
    if spec.hub_labels is not None and sorted(spec.hub_labels) != sorted(spec.labels):
        raise ConfigError(f"{where}.hub_labels must be a permutation of labels {spec.labels!r}")
    _validate_range(spec, where)


def _canonical_labels(spec: TaskSpec, where: str) -> None:
    # the labels as the data reader writes them (1 and 1.0 are one class), so that every row finds its class
    for name in ("labels", "hub_labels"):
        value = getattr(spec, name)
        if value is None or isinstance(value, str) or not isinstance(value, (list, tuple)):
            continue  # _str_tuple reports what is wrong with it
        booleans = [v for v in value if isinstance(v, bool)]
        if booleans:
            raise ConfigError(
                f"{where}.{name}: {booleans!r} are booleans: YAML reads unquoted yes/no, true/false and on/off as "
                f"booleans, not as the words; quote the labels, e.g. {name}: ['yes', 'no']"
            )
        try:
            labels = tuple(label_text(v) for v in value)
        except ValueError as exc:
            raise ConfigError(f"{where}.{name}: {exc}") from None
        twice = sorted({label for label in labels if labels.count(label) > 1})
        if twice:
            raise ConfigError(
                f"{where}.{name} {list(value)!r} names the label {twice[0]!r} twice (numbers are one "
                "label however written: 1, 1.0, '01'); list each class once"
            )
        _set(spec, name, labels)


def _validate_header(spec: TaskSpec, where: str) -> None:
    if isinstance(spec.has_header, dict):
        unknown = set(spec.has_header) - set(spec.splits)
        if unknown:
            raise ConfigError(f"{where}.has_header names unknown splits {sorted(unknown)}")
        if not all(isinstance(v, bool) for v in spec.has_header.values()):
            raise ConfigError(f"{where}.has_header values must be bools")
    elif not isinstance(spec.has_header, bool):
        raise ConfigError(f"{where}.has_header must be a bool or a dict split -> bool")
    headerless = [s for s in spec.splits if not spec.header_for(s)]
    if headerless and spec.file_format == "jsonl":
        raise ConfigError(f"{where}.has_header must be True for jsonl files")
    if not headerless:
        return
    positions = spec.column_positions
    if not isinstance(positions, dict) or not positions:
        raise ConfigError(f"{where}.column_positions is required for header-less splits {headerless}")
    if not all(isinstance(k, str) and isinstance(v, int) and v >= 0 for k, v in positions.items()):
        raise ConfigError(f"{where}.column_positions must map column names to indices >= 0")
    needed = [*spec.text_columns, *(c for c in (spec.label_column, spec.id_column) if c)]
    missing = [c for c in needed if c not in positions]
    if missing:
        raise ConfigError(f"{where}.column_positions lacks columns {missing}")


def _validate_range(spec: TaskSpec, where: str) -> None:
    if spec.label_range is None:
        return
    if not spec.is_regression:
        raise ConfigError(f"{where}.label_range only applies to regression tasks")
    try:
        low, high = (float(v) for v in spec.label_range)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}.label_range must be (low, high), got {spec.label_range!r}") from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ConfigError(f"{where}.label_range must be finite with low < high, got {spec.label_range!r}")
    _set(spec, "label_range", (low, high))


# --------------------------------------------------------------------------- GLUE
