"""What a loaded split of any task is made of, and the checks each of its rows goes through, whatever the
task reads (files, a `datasets` dataset): the loaded schema (`features_for`), label parsing, row ids,
and the report of rows that ``skip_bad_rows`` left out (`SkippedRows`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import datasets

from .readers import label_text
from .spec import TaskSpec

SHOWN_BAD_ROWS = 5  # the first malformed rows named in a report (all are counted)


def features_for(spec: TaskSpec, labelled: bool = True, with_ids: bool = False) -> datasets.Features:
    """The ``datasets.Features`` of a loaded split of ``spec`` (``with_ids``: the ``id`` column)."""
    feats = {"text_a": datasets.Value("string"), "text_b": datasets.Value("string")}
    if labelled:
        feats["label"] = datasets.Value("float64" if spec.is_regression else "int64")
    feats["idx"] = datasets.Value("int64")
    if with_ids:
        feats["id"] = datasets.Value("string")
    return datasets.Features(feats)


@dataclass(frozen=True)
class SkippedRows:
    """The malformed rows that a task with ``skip_bad_rows`` left out of one split: how many, and the
    first few (position in the file, what is wrong)."""

    task: str
    split: str
    file: str
    count: int
    unit: str  # "line", or "item" for a JSON array
    first: tuple[tuple[int, str], ...]

    def describe(self) -> str:
        shown = "; ".join(f"{self.unit} {pos}: {problem}" for pos, problem in self.first)
        more = f"; and {self.count - len(self.first)} more" if self.count > len(self.first) else ""
        return (
            f"task {self.task!r} {self.split}: skipped {self.count} malformed row{'s' * (self.count != 1)} of "
            f"{self.file} (skip_bad_rows): {shown}{more}"
        )

    def as_json(self) -> dict:
        return {
            "file": self.file,
            "count": self.count,
            "first": [{self.unit: pos, "problem": problem} for pos, problem in self.first],
        }


def is_test_split(split: str) -> bool:
    """Test splits may be unlabelled (GLUE's are)."""
    return split.startswith("test")


class LabelParser:
    """Turns raw label values into int indices or checked floats."""

    def __init__(self, spec: TaskSpec):
        self.spec = spec
        self.index = {label: i for i, label in enumerate(spec.labels)}

    def __call__(self, value: Any) -> int | float:
        spec = self.spec
        if not spec.is_regression:
            text = label_text(value)  # 1, 1.0 and "1.0" are one class (ValueError for NaN, lists ...)
            if text not in self.index:
                raise ValueError(
                    f"label {text!r} in column {spec.label_column!r} is not one of the task's labels "
                    f"{list(spec.labels)}; fix the row or the task's label set"
                )
            return self.index[text]
        if isinstance(value, bool):
            raise ValueError(f"regression label {value!r} in column {spec.label_column!r} is not a number")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(
                f"regression label {value!r} in column {spec.label_column!r} is not a number; write a decimal like 3.5"
            ) from None
        if not math.isfinite(number):
            raise ValueError(
                f"regression label {value!r} in column {spec.label_column!r} is not finite; NaN/inf are not allowed"
            )
        if spec.label_range and not spec.label_range[0] <= number <= spec.label_range[1]:
            low, high = spec.label_range
            raise ValueError(
                f"regression label {number} in column {spec.label_column!r} is outside "
                f"the task's label_range [{low}, {high}]"
            )
        return number


def row_id(value: Any, column: str) -> str:
    """A row id as text: a string or a whole number (JSON), never empty."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise ValueError(f"id in column {column!r} must be a string or a whole number, found {value!r}")
    if not value.strip():
        raise ValueError(f"empty id in column {column!r}; every row needs its id")
    return value
