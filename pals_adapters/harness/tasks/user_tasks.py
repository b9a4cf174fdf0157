"""A user's own tasks: `custom_task` and task files (`load_task_specs`), and where a task's files are."""

from __future__ import annotations

import decimal
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from ...errors import ConfigError
from .dataset_tasks import dataset_task_parts
from .readers import iter_records, read_column
from .spec import (
    EXTENSION_FORMATS,
    FILE_FORMATS,
    REGRESSION_METRICS,
    TaskSpec,
    check_task_name,
    spec_from_json,
    spec_to_json,
)

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
    "dataset",
    "splits",
    "label_subset",
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
    dataset: dict | None = None,
    splits: dict[str, str] | None = None,
    label_subset: bool = False,
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

    ``dataset`` instead of files: ``{path, name, revision, data_dir, data_files}`` as ``datasets.load_dataset``
    takes them (a Hub id, or a folder relative to ``base_dir``) or ``{from_disk: FOLDER}``; ``splits`` maps
    train / validation / test to the dataset's splits or slices (default: those of the three it has). A
    ClassLabel column gives the labels; ``label_subset`` lets ``labels`` keep some of them, in its order.
    """
    check_task_name(name)  # before any file is read
    if type not in ("classification", "regression"):
        raise ConfigError(f"task {name!r}: type must be 'classification' or 'regression', got {type!r}")
    base = _absolute(Path(base_dir) if base_dir is not None else Path.cwd())
    if dataset is not None or splits is not None:
        files = {"train": train, "validation": validation, "test": test, "format": format}
        given = dict(text_columns=text_columns, label_column=label_column, labels=labels, metrics=metrics)
        given.update(label_range=label_range, id_column=id_column, skip_bad_rows=skip_bad_rows)
        return _dataset_task(name, base, dataset, splits, files, type == "regression", label_subset, given)
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
        formats = {EXTENSION_FORMATS.get(Path(f).suffix.lower()) for f in splits.values()}
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


def _dataset_task(name, base, dataset, splits, files, regression, label_subset, given) -> TaskSpec:
    """`custom_task` of a task whose data is a `datasets` dataset (see `dataset_source`); ``files``: the
    file options, which must be left out; ``given``: the options that mean what they mean for files."""
    files = [key for key, value in files.items() if value is not None]
    if dataset is None or files:
        extra = files[0] if files else "splits"
        raise ConfigError(
            f"task {name!r}: give either files (train, validation, test) or a dataset with its splits; "
            f"{'splits needs a dataset' if dataset is None else f'{extra!r} does not go with a dataset'}"
        )
    text_columns = (given["text_columns"],) if isinstance(given["text_columns"], str) else tuple(given["text_columns"])
    labels = given["labels"]
    parts = dataset_task_parts(
        name,
        dataset,
        splits,
        base,
        text_columns,
        given["label_column"],
        regression,
        tuple(labels) if labels is not None else None,
        label_subset,
        given["id_column"],
    )
    metrics = (
        given["metrics"] if given["metrics"] is not None else (REGRESSION_METRICS if regression else ("accuracy",))
    )
    return TaskSpec(
        name=name,
        text_columns=text_columns,
        label_column=given["label_column"],
        is_regression=regression,
        labels=parts.labels,
        metrics=metrics,
        splits=parts.splits,
        data_dir=str(base),
        label_range=given["label_range"],
        id_column=given["id_column"],
        skip_bad_rows=given["skip_bad_rows"],
        dataset=parts.source,
        label_subset=label_subset,
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
    if spec.data_dir is None or spec.dataset is not None:
        return {}
    return {split: str(_absolute(Path(spec.data_dir) / file)) for split, file in spec.splits.items()}


def with_data_dir(spec: TaskSpec, data_dir: str | os.PathLike) -> TaskSpec:
    """The same user task with its folder elsewhere (the data folder moved): the files the task file named
    relative to it move with it (absolute ones stay)."""
    if spec.data_dir is None:
        raise ConfigError(f"task {spec.name!r} is a GLUE task: its files are found through glue_dir")
    return replace(spec, data_dir=str(_absolute(Path(data_dir))))


def task_on_file(spec: TaskSpec, file: str | os.PathLike, split: str) -> TaskSpec:
    """The trained task reading one new file as its ``split`` (``test``: to predict, ``validation``: to score):
    a CSV / TSV / JSON Lines file with a header naming the task's text columns (and its label column to score),
    its ids kept (the task's id column, else a column ``id``). Labels, columns and metrics stay the trained ones."""
    path = _absolute(Path(file))
    fmt = EXTENSION_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ConfigError(f"--file {file}: name the file .csv, .tsv or .jsonl so that its format is known")
    if not path.is_file():
        raise ConfigError(f"--file {file}: no such file")
    columns = iter_records(path, fmt, True, None)[0]
    needed = [
        *spec.text_columns,
        *([spec.label_column] if split.startswith("validation") and spec.label_column else []),
    ]
    missing = [name for name in needed if name not in columns]
    if missing:
        raise ConfigError(
            f"--file {file}: no column {missing[0]!r} (columns found: {', '.join(columns) or 'none'}); task "
            f"{spec.name!r} reads {', '.join(needed)}" + (", and optionally id" if not spec.id_column else "")
        )
    return replace(
        spec,
        splits={split: path.name},
        file_format=fmt,
        has_header=True,
        column_positions=None,
        data_dir=str(path.parent),
        glue_folder=None,
        hub=None,
        hub_columns=None,
        hub_labels=None,
        id_column=spec.id_column if spec.id_column in columns else None,
        skip_bad_rows=False,
        dataset=None,
        label_subset=False,
    )


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
    if len(values) > 20 and None not in numbers and not all(n == n.to_integral_value() for n in numbers):
        examples = ", ".join(values[:3])
        raise ConfigError(
            f"task {name!r}: train file {train} has {len(values)} distinct numeric labels ({examples}, ...); "
            f"if they are scores, declare `type: regression`; if they are classes, list them in `labels`"
        )
    if None not in numbers:  # numeric labels in numeric order (2 before 10)
        values = [v for _, v in sorted(zip(numbers, values))]
    return tuple(values)


def _as_number(label: str) -> decimal.Decimal | None:
    """A numeric label as its exact number (sorting 18-digit ids through a float would tie them)."""
    try:
        number = decimal.Decimal(label)
    except decimal.InvalidOperation:
        return None
    return number if number.is_finite() else None


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
