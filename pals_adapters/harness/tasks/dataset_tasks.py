"""A task of a `datasets` dataset, built from a task file's entry: everything that can be checked without
reading every row is checked here, before any training: the dataset and configuration, the splits, the
columns and their types, and the label set (a ClassLabel column's names, or a plain column's values)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets

from ...errors import ConfigError
from .dataset_source import DEFAULT_SPLITS, describe, normalise_source, open_dataset, select_split
from .readers import label_text

_TEXT_TYPES = ("string", "large_string")


@dataclass(frozen=True)
class DatasetTaskParts:
    """What a task takes from its dataset: the source as recorded, the split of each role, the labels."""

    source: dict
    splits: dict[str, str]
    labels: tuple[str, ...]


def dataset_task_parts(
    name: str,
    dataset: dict,
    splits: dict[str, str] | None,
    base: Path,
    text_columns: tuple[str, ...],
    label_column: str | None,
    regression: bool,
    labels: tuple[str, ...] | None,
    label_subset: bool,
    id_column: str | None,
) -> DatasetTaskParts:
    """Opens the dataset and checks what the task names of it (ConfigError / DataError before any training)."""
    where = f"task {name!r}"
    source = normalise_source(dataset, base, where)
    where = f"task {name!r}: {describe(source)}"
    try:
        loaded = open_dataset(source, base)
    except ConfigError as exc:
        raise ConfigError(f"task {name!r}: {exc}") from None
    splits = _task_splits(splits, loaded, where)
    chosen = {role: select_split(loaded, expression, where) for role, expression in splits.items()}
    for role, data in chosen.items():
        _check_columns(data, role, splits[role], text_columns, label_column, id_column, where)
    labelled = {role: data for role, data in chosen.items() if label_column in data.column_names}
    if regression:
        for role, data in labelled.items():
            kind = data.features[label_column]
            if not (isinstance(kind, datasets.Value) and (kind.dtype.startswith(("int", "uint", "float")))):
                raise ConfigError(
                    f"{where}: split {splits[role]!r}: regression label column {label_column!r} is {kind}, not a number"
                )
        return DatasetTaskParts(source, splits, tuple(labels or ()))  # labels of a regression: TaskSpec refuses
    return DatasetTaskParts(source, splits, _task_labels(labelled, label_column, labels, label_subset, where))


def _task_splits(splits: Any, loaded: datasets.DatasetDict, where: str) -> dict[str, str]:
    if splits is None:
        splits = {role: role for role in DEFAULT_SPLITS if role in loaded}
    if not isinstance(splits, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in splits.items()
    ):
        raise ConfigError(f"{where}: splits must map train / validation / test to the dataset's splits, got {splits!r}")
    roles = [r for r in splits if r != "train" and not r.startswith(("validation", "test"))]
    if roles:
        raise ConfigError(f"{where}: splits: {roles[0]!r} is not train, validation(...) or test(...)")
    if "train" not in splits and not any(r.startswith("validation") for r in splits):
        raise ConfigError(
            f"{where} has neither a train nor a validation split (its splits: {', '.join(loaded)}); name them "
            "in the task's splits, e.g. splits: {train: train, validation: dev}"
        )
    return dict(splits)


def _check_columns(data, role, expression, text_columns, label_column, id_column, where) -> None:
    here = f"{where}: split {expression!r}"
    needed = [*text_columns, *([id_column] if id_column else [])]
    if label_column and not role.startswith("test"):
        needed.append(label_column)  # a test split may be unlabelled
    missing = [c for c in needed if c not in data.column_names]
    if missing:
        raise ConfigError(f"{here}: no column {missing[0]!r}; its columns: {', '.join(data.column_names)}")
    for column in text_columns:
        kind = data.features[column]
        if not (isinstance(kind, datasets.Value) and kind.dtype in _TEXT_TYPES):
            raise ConfigError(f"{here}: text column {column!r} holds {kind}, not text; name a column of strings")


def _task_labels(labelled: dict, column: str, labels, label_subset: bool, where: str) -> tuple[str, ...]:
    kinds = {role: data.features[column] for role, data in labelled.items()}
    class_labels = {role: kind for role, kind in kinds.items() if isinstance(kind, datasets.ClassLabel)}
    if not class_labels:  # plain ints or strings: as a file's labels
        if label_subset:
            raise ConfigError(f"{where}: label_subset applies to a ClassLabel column; {column!r} holds plain values")
        if labels is not None:
            return tuple(labels)
        if "train" not in labelled:
            raise ConfigError(f"{where}: labels are required when there is no labelled train split to infer them from")
        return _inferred_labels(labelled["train"], column, where)
    names = {tuple(kind.names) for kind in class_labels.values()}
    if len(names) > 1 or len(class_labels) != len(kinds):
        raise ConfigError(f"{where}: the splits' label columns {column!r} differ ({sorted(map(str, kinds.values()))})")
    names = names.pop()
    for role, data in labelled.items():
        values = [v for v in data.unique(column) if v != -1]  # -1: no label (the Hub's unlabelled test rows)
        outside = sorted(v for v in values if not 0 <= v < len(names))
        if outside:
            raise ConfigError(
                f"{where}: {role} label column {column!r} holds {outside[0]}, outside its ClassLabel {list(names)} "
                f"(0..{len(names) - 1}, -1 for no label)"
            )
    if labels is None:
        return names
    labels = tuple(labels)
    if label_subset:
        stray = [label for label in labels if label not in names]
        if stray:
            raise ConfigError(
                f"{where}: labels {list(labels)} name {stray[0]!r}, not a class of the dataset {list(names)}"
            )
        return labels
    if labels != names:
        raise ConfigError(
            f"{where}: labels {list(labels)} differ from the dataset's ClassLabel names {list(names)}; leave labels "
            "out to take the dataset's, or add `label_subset: true` to keep only these classes in this order"
        )
    return labels


def _inferred_labels(data: datasets.Dataset, column: str, where: str) -> tuple[str, ...]:
    try:
        values = sorted({label_text(v) for v in data.unique(column)} - {""})
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: label column {column!r}: {exc}") from None
    if len(values) < 2:
        raise ConfigError(f"{where}: the train split has fewer than 2 distinct labels {values}; set labels explicitly")
    numbers = {}
    for value in values:
        try:
            numbers[value] = float(value)
        except ValueError:
            return tuple(values)
    return tuple(sorted(values, key=numbers.__getitem__))  # numeric labels in numeric order (2 before 10)
