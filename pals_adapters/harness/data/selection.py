"""The selection part of a task's training rows: a seeded split of the training split into the rows a run
trains on and the rows it is scored on instead of the dev set. Settings chosen by their score on it (compare's
``search:``) were chosen without looking at dev, so that dev still measures them fairly afterwards."""

from __future__ import annotations

import hashlib
import json

import numpy as np

from ...errors import DataError

SELECTION_SPLIT = "selection"  # the split a run with a selection part is scored on, in place of its dev splits
SPLIT_FILE = "selection_split.json"  # in the run's folder: which training rows were held out


def selection_rows(task: str, n_rows: int, fraction: float, seed: int) -> list[int]:
    """The positions in the training split of the rows held out: ``fraction`` of them rounded (at least one,
    at least one left to train on), drawn without replacement by a numpy generator seeded with ``seed``;
    sorted. The same rows, seed and fraction give the same positions on every machine."""
    if n_rows < 2:
        raise DataError(
            f"task {task!r}: {n_rows} training row(s): a selection part needs two or more (one to train on, one "
            "to score); give the task more training rows"
        )
    count = min(max(1, round(fraction * n_rows)), n_rows - 1)
    chosen = np.random.default_rng(seed).choice(n_rows, size=count, replace=False)
    return sorted(int(i) for i in chosen)


def split_training_rows(task: str, data, fraction: float, seed: int):
    """``(training part, selection part, record)`` of the `datasets.Dataset` ``data`` (a task's training
    split); the record says which rows were held out (`SPLIT_FILE`)."""
    held_out = selection_rows(task, len(data), fraction, seed)
    taken = set(held_out)
    training = [i for i in range(len(data)) if i not in taken]
    record = {
        "fraction": fraction,
        "seed": seed,
        "training_rows": len(training),
        "selection_rows": held_out,
        "sha256": hashlib.sha256(json.dumps(held_out).encode("utf-8")).hexdigest(),
    }
    if "id" in data.column_names:  # a task with an id_column: the rows held out by their ids too
        record["selection_ids"] = [str(i) for i in data.select(held_out)["id"]]
    return data.select(training), data.select(held_out), record
