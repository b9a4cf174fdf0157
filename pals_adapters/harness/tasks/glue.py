"""The GLUE tasks as `TaskSpec`s, and `get_task`: a task by name."""

from __future__ import annotations

from typing import Any

from ...errors import UnknownNameError
from .spec import GLUE_SUBMISSION_NAMES, TaskSpec  # noqa: F401  (public here too)

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
