"""Task specifications: the GLUE registry and user-defined tasks."""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError, UnknownNameError
from .readers import label_text, read_column

CLASSIFICATION_METRICS = ("accuracy", "f1", "matthews")
REGRESSION_METRICS = ("pearson", "spearman")
FILE_FORMATS = ("tsv", "csv", "jsonl")
_EXTENSION_FORMATS = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}


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

_STD = {"train": "train.tsv", "validation": "dev.tsv", "test": "test.tsv"}
_BINARY = ("0", "1")
_NLI2 = ("entailment", "not_entailment")


def _glue(
    name: str,
    folder: str,
    text: tuple[str, ...],
    label: str,
    labels: tuple[str, ...],
    metrics: tuple[str, ...],
    hub_columns: tuple[str, ...],
    **extra: Any,
) -> TaskSpec:
    extra.setdefault("splits", dict(_STD))
    return TaskSpec(
        name=name,
        text_columns=text,
        label_column=label,
        is_regression=not labels,
        labels=labels,
        metrics=metrics,
        glue_folder=folder,
        hub=("nyu-mll/glue", name),
        hub_columns=hub_columns,
        **extra,
    )


GLUE_TASKS: dict[str, TaskSpec] = {
    "cola": _glue(
        "cola",
        "CoLA",
        ("sentence",),
        "label",
        _BINARY,
        ("matthews",),
        ("sentence",),
        has_header={"train": False, "validation": False, "test": True},
        column_positions={"source": 0, "label": 1, "original_label": 2, "sentence": 3},
    ),
    "sst2": _glue("sst2", "SST-2", ("sentence",), "label", _BINARY, ("accuracy",), ("sentence",)),
    "mrpc": _glue(
        "mrpc", "MRPC", ("#1 String", "#2 String"), "Quality", _BINARY, ("accuracy", "f1"), ("sentence1", "sentence2")
    ),
    "stsb": _glue(
        "stsb",
        "STS-B",
        ("sentence1", "sentence2"),
        "score",
        (),
        ("pearson", "spearman"),
        ("sentence1", "sentence2"),
        label_range=(0.0, 5.0),
    ),
    "qqp": _glue(
        "qqp",
        "QQP",
        ("question1", "question2"),
        "is_duplicate",
        _BINARY,
        ("accuracy", "f1"),
        ("question1", "question2"),
    ),
    "mnli": _glue(
        "mnli",
        "MNLI",
        ("sentence1", "sentence2"),
        "gold_label",
        ("contradiction", "entailment", "neutral"),
        ("accuracy",),
        ("premise", "hypothesis"),
        hub_labels=("entailment", "neutral", "contradiction"),
        splits={
            "train": "train.tsv",
            "validation_matched": "dev_matched.tsv",
            "validation_mismatched": "dev_mismatched.tsv",
            "test_matched": "test_matched.tsv",
            "test_mismatched": "test_mismatched.tsv",
        },
    ),
    "qnli": _glue("qnli", "QNLI", ("question", "sentence"), "label", _NLI2, ("accuracy",), ("question", "sentence")),
    "rte": _glue("rte", "RTE", ("sentence1", "sentence2"), "label", _NLI2, ("accuracy",), ("sentence1", "sentence2")),
    "wnli": _glue(
        "wnli", "WNLI", ("sentence1", "sentence2"), "label", _BINARY, ("accuracy",), ("sentence1", "sentence2")
    ),
}


# The file names the GLUE server expects in a submission.
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


def _normalise(name: str) -> str:
    return name.strip().lower().replace("-", "").replace("_", "")


def get_task(name: str | TaskSpec) -> TaskSpec:
    """GLUE task by name, case-insensitive; "sst-2", "SST-2", "sts-b" work. A TaskSpec is returned as is."""
    if isinstance(name, TaskSpec):
        return name
    if isinstance(name, str) and _normalise(name) in GLUE_TASKS:
        return GLUE_TASKS[_normalise(name)]
    raise UnknownNameError("task", name, GLUE_TASKS)


# --------------------------------------------------------------------------- user tasks

_USER_KEYS = (
    "name",
    "train",
    "validation",
    "test",
    "text_columns",
    "label_column",
    "type",
    "labels",
    "metric",
    "metrics",
    "format",
    "label_range",
    "id_column",
    "skip_bad_rows",
)


def custom_task(
    name: str,
    *,
    train: str | os.PathLike | None = None,
    validation: str | os.PathLike | None = None,
    test: str | os.PathLike | None = None,
    text_columns: str | list[str] | tuple[str, ...] = ("text",),
    label_column: str = "label",
    type: str = "classification",
    labels: list[str] | tuple[str, ...] | None = None,
    metrics: str | list[str] | tuple[str, ...] | None = None,
    format: str | None = None,
    label_range: tuple[float, float] | None = None,
    id_column: str | None = None,
    skip_bad_rows: bool = False,
    base_dir: str | os.PathLike | None = None,
) -> TaskSpec:
    """Build a user task from files (relative paths resolve against ``base_dir``, default cwd).

    ``labels`` default to the sorted distinct labels of the train file (numeric
    order when all are integers); ``metrics`` default to accuracy or pearson+spearman;
    ``format`` defaults to the files' extension (.csv, .tsv, .jsonl/.json).
    ``id_column``: a column of row ids, kept by loading (as ``id``) and written in predictions.
    ``skip_bad_rows``: skip the rows that cannot be read (each one counted and reported with its
    line) instead of refusing the file; a classification task then needs ``labels``, since a
    malformed row could otherwise add a class.

    Relative file paths are kept relative to ``base_dir`` (``data_dir``), so the task of a data folder
    that moved is the same task with another ``data_dir``; absolute ones stay as given.
    """
    check_task_name(name)  # before any file is read
    if type not in ("classification", "regression"):
        raise ConfigError(f"task {name!r}: type must be 'classification' or 'regression', got {type!r}")
    base = _absolute(Path(base_dir) if base_dir is not None else Path.cwd())
    files = {s: f for s, f in (("train", train), ("validation", validation), ("test", test)) if f is not None}
    if not files:
        raise ConfigError(f"task {name!r}: give at least one of train, validation, test")
    if not isinstance(skip_bad_rows, bool):
        raise ConfigError(f"task {name!r}: skip_bad_rows must be true or false, got {skip_bad_rows!r}")
    if skip_bad_rows and labels is None and type != "regression":
        raise ConfigError(
            f"task {name!r}: skip_bad_rows needs `labels` (list the classes): a malformed row's label could "
            "otherwise become a class of its own"
        )
    splits = {s: _relative_to(base, f) for s, f in files.items()}
    if format is None:
        formats = {_EXTENSION_FORMATS.get(Path(f).suffix.lower()) for f in splits.values()}
        if None in formats or len(formats) != 1:
            raise ConfigError(
                f"task {name!r}: cannot infer format from file names {sorted(files.values())}; "
                f"set format to one of {', '.join(FILE_FORMATS)}"
            )
        format = formats.pop()
    regression = type == "regression"
    if metrics is None:
        metrics = REGRESSION_METRICS if regression else ("accuracy",)
    if labels is None and not regression:
        train_file = base / splits["train"] if "train" in splits else None
        labels = _infer_labels(name, train_file, text_columns, label_column, format)
    labels = tuple(labels) if labels is not None else ()
    return TaskSpec(
        name=name,
        text_columns=text_columns,
        label_column=label_column,
        is_regression=regression,
        labels=labels,
        metrics=metrics,
        splits=splits,
        file_format=format,
        data_dir=str(base),
        label_range=label_range,
        id_column=id_column,
        skip_bad_rows=skip_bad_rows,
    )


def _absolute(path: Path) -> Path:
    # absolute and normalised, links kept as written (a linked file stays where the link points)
    return Path(os.path.normpath(os.path.abspath(path)))


def _relative_to(base: Path, file: str | os.PathLike) -> str:
    """``file`` as the task file writes it: a path relative to ``base`` (the task file's folder) stays relative,
    in / form, so that it moves with the folder; an absolute path stays absolute."""
    if Path(file).is_absolute():
        return str(_absolute(Path(file)))
    return Path(os.path.normpath(file)).as_posix()


def split_files(spec: TaskSpec) -> dict[str, str]:
    """The absolute file of each split of a user task ({} for GLUE tasks): where the task's data is,
    however its folder and files are written (an older record wrote absolute files)."""
    if spec.data_dir is None:
        return {}
    return {split: str(_absolute(Path(spec.data_dir) / file)) for split, file in spec.splits.items()}


def with_data_dir(spec: TaskSpec, data_dir: str | os.PathLike) -> TaskSpec:
    """The same user task with its folder elsewhere (the data folder moved): the files the task file named
    relative to it move with it (absolute ones stay)."""
    if spec.data_dir is None:
        raise ConfigError(f"task {spec.name!r} is a GLUE task: its files are found through glue_dir")
    return replace(spec, data_dir=str(_absolute(Path(data_dir))))


def comparable_spec(data: dict[str, Any]) -> dict[str, Any]:
    """A recorded spec (`spec_to_json`) in the form that compares records made at different times: the
    defaults of fields added since filled in, and the files as absolute paths (whichever way written)."""
    try:
        spec = spec_from_json(data)
    except ConfigError:
        return dict(data)
    out = spec_to_json(spec)
    out["splits"] = split_files(spec) or out["splits"]
    out.pop("data_dir", None)
    return out


def _infer_labels(name: str, train: Path | None, text_columns: Any, label_column: str, fmt: str) -> tuple[str, ...]:
    if train is None:
        raise ConfigError(f"task {name!r}: labels are required when there is no train file to infer them from")

    text_columns = (text_columns,) if isinstance(text_columns, str) else tuple(text_columns)
    values = sorted(set(read_column(train, label_column, fmt, also_required=text_columns)))
    if len(values) < 2:
        raise ConfigError(
            f"task {name!r}: train file {train} has fewer than 2 distinct labels {values}; set labels explicitly"
        )
    numbers = [_as_number(v) for v in values]
    if len(values) > 20 and None not in numbers and not all(n.is_integer() for n in numbers):
        examples = ", ".join(values[:3])
        raise ConfigError(
            f"task {name!r}: train file {train} has {len(values)} distinct numeric labels ({examples}, ...); "
            f"if they are scores, declare `type: regression`; if they are classes, list them in `labels`"
        )
    if None not in numbers:  # numeric labels in numeric order (2 before 10)
        values = [v for _, v in sorted(zip(numbers, values))]
    return tuple(values)


def _as_number(label: str) -> float | None:
    try:
        return float(label)
    except ValueError:
        return None


def load_task_specs(path: str | os.PathLike) -> list[TaskSpec]:
    """Read user tasks from a YAML or JSON file: a list, {"tasks": [...]}, or one task mapping."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise ConfigError(f"cannot read task file {path}: {exc}") from None
    if path.suffix.lower() == ".json":
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: not valid JSON: {exc}") from None
    else:
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if isinstance(raw, dict) and "tasks" in raw:
        extra = sorted(set(raw) - {"tasks"})
        if extra:
            raise ConfigError(f"{path}: unknown top-level key {extra[0]!r}; only 'tasks' is allowed")
        raw = raw["tasks"]
    if isinstance(raw, dict):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{path}: expected a list of tasks (or a mapping with 'tasks')")
    specs = []
    for i, entry in enumerate(raw, 1):
        if not isinstance(entry, dict):
            raise ConfigError(f"{path}: task #{i} must be a mapping, got {entry!r}")
        for key in entry:
            if key not in _USER_KEYS:
                raise ConfigError(f"{path}: task #{i}: unknown key {key!r}; valid keys: {', '.join(_USER_KEYS)}")
        if "name" not in entry:
            raise ConfigError(f"{path}: task #{i} has no 'name'")
        if "metric" in entry and "metrics" in entry:
            raise ConfigError(f"{path}: task {entry['name']!r}: give 'metric' or 'metrics', not both")
        kwargs = dict(entry)
        if "metric" in kwargs:
            kwargs["metrics"] = kwargs.pop("metric")
        try:
            specs.append(custom_task(base_dir=path.parent, **kwargs))
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    names = [s.name for s in specs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"{path}: duplicate task name {dup[0]!r}")
    return specs
