"""The finished runs of each row, read from their ``results.json`` into the rows the report reads
(`reporting.rows`); a seed with a run not done is left out and named."""

from __future__ import annotations

import json
from pathlib import Path

from .grid import SEPARATE, Grid, PlannedRun
from .reporting.rows import FinishedRun, RowResult
from .runs import RESULTS_FILE, run_state


def read_results(folder: Path) -> dict:
    return json.loads((folder / RESULTS_FILE).read_text(encoding="utf-8"))


def _finished(run: PlannedRun) -> FinishedRun | None:
    """The run's record when it is done and scored every task the grid has now; else None (not done)."""
    if run_state(run) != "done":
        return None
    results = read_results(run.folder)
    if not all(f"{task}_score" in results.get("metrics", {}) for task in run.tasks):
        return None  # trained before a task was added to the task file: not this grid's run
    return FinishedRun(run.seed, run.folder, run.tasks, results)


def collect_rows(grid: Grid, planned: list[PlannedRun]) -> list[RowResult]:
    """Every row of the grid with its finished seeds; a seed with a run not done yet (or whose results lack a
    task of the grid) is left out, its folders listed in ``missing``."""
    rows = []
    for row in grid.rows:
        runs = [run for run in planned if run.row == row.name]
        records = {run.folder: _finished(run) for run in runs}
        missing = [run for run in runs if records[run.folder] is None]
        incomplete_seeds = {run.seed for run in missing}
        finished = [records[run.folder] for run in runs if run.seed not in incomplete_seeds]
        method = row.settings.get("method", grid.shared.get("method", "pals"))
        base = "finetune" if method == SEPARATE else row.settings.get("base", grid.shared.get("base", "finetune"))
        missing_folders = [str(r.folder) for r in missing]
        budget = grid.budgets.get(row.name, {})
        rows.append(
            RowResult(row.name, method, base, method == SEPARATE, grid.tasks, finished, missing_folders, budget)
        )
    return rows
