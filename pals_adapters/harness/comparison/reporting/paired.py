"""Each row against the reference row: reference minus row, seed by seed with a Student-t interval where
two or more seeds are common, else a paired bootstrap over the dev examples of one run of each."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ...scoring.report import DEV_PREDICTIONS_FILE
from ...tasks.spec import TaskSpec
from .rows import RowResult
from .stats import bootstrap_interval, t_interval


def paired_differences(rows: list[RowResult], reference: str, specs: dict[str, TaskSpec]) -> tuple[dict, dict]:
    """``({row: {task|"average": interval}}, {row: why it has none})`` for every row but the reference."""
    by_name = {row.name: row for row in rows}
    ref = by_name.get(reference)
    paired, notes = {}, {}
    if ref is None or not ref.runs:
        return paired, {row.name: f"the reference row {reference!r} has no finished seed" for row in rows}
    ref_scores = ref.seed_scores()
    for row in rows:
        if row.name == reference or not row.runs:
            continue
        scores = row.seed_scores()
        common = sorted(set(ref_scores) & set(scores))
        keys = [*row.tasks, "average"]
        if len(common) >= 2:
            paired[row.name] = {k: t_interval([ref_scores[s][k] - scores[s][k] for s in common]) for k in keys}
            continue
        seed_ref, seed_row = (common[0], common[0]) if common else (ref.seeds[0], row.seeds[0])
        ref_predictions, row_predictions = dev_predictions(ref, seed_ref), dev_predictions(row, seed_row)
        if ref_predictions is None or row_predictions is None:
            notes[row.name] = f"fewer than two common seeds, and its runs keep no {DEV_PREDICTIONS_FILE}"
            continue
        problem = _unpaired(ref_predictions, row_predictions, row.tasks)
        if problem is not None:
            notes[row.name] = f"fewer than two common seeds, and {problem}"
            continue
        paired[row.name] = bootstrap_interval(row.tasks, specs, ref_predictions, row_predictions)
    return paired, notes


def _unpaired(reference: dict, other: dict, tasks: list[str]) -> str | None:
    """Why the dev predictions of two runs cannot be paired example by example, or None."""
    for task in tasks:
        (_, ref_labels), (_, labels) = reference[task], other[task]
        if len(ref_labels) != len(labels) or not np.array_equal(ref_labels, labels):
            return f"its runs and the reference's were scored on different {task} dev examples"
        if len(labels) < 2:
            return f"a bootstrap needs two or more {task} dev examples"
    return None


def dev_predictions(row: RowResult, seed: int) -> dict | None:
    """``{task: (predictions, labels)}`` of the first dev split of each task, from the seed's runs' files."""
    out: dict = {}
    for run in (r for r in row.runs if r.seed == seed):
        path = Path(run.folder) / DEV_PREDICTIONS_FILE
        if not path.is_file():
            return None
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        for task in run.tasks:
            split = next((line["split"] for line in lines if line["task"] == task), None)
            if split is None:
                return None
            mine = sorted((line for line in lines if line["task"] == task and line["split"] == split), key=_row)
            out[task] = (np.array([line["prediction"] for line in mine]), np.array([line["label"] for line in mine]))
    return out if set(out) == set(row.tasks) else None


def _row(line: dict) -> int:
    return line["row"]
