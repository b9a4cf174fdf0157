"""The finished runs of each row, read from their ``results.json``: scores per seed (points, 0-100),
parameters as a multiple of the base, wall time, examples per second and dev curves."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from .grid import SEPARATE, Grid, PlannedRun
from .runs import RESULTS_FILE, run_state


@dataclass
class FinishedRun:
    """One finished run of a row: its seed, folder, tasks and recorded results."""

    seed: int
    folder: Path
    tasks: list[str]
    results: dict

    def scores(self) -> dict[str, float]:
        return {task: 100 * self.results["metrics"][f"{task}_score"] for task in self.tasks}


@dataclass
class RowResult:
    """The finished seeds of one row (a seed counts once all of its runs are done)."""

    name: str
    method: str
    base: str
    separate: bool
    tasks: list[str]
    runs: list[FinishedRun]
    missing: list[str] = field(default_factory=list)  # folders of the row's runs not done yet

    @property
    def seeds(self) -> list[int]:
        return sorted({run.seed for run in self.runs})

    def seed_scores(self) -> dict[int, dict[str, float]]:
        """``{seed: {task: points, "average": points}}``: the average is the mean of the task scores."""
        out: dict[int, dict[str, float]] = {}
        for run in self.runs:
            out.setdefault(run.seed, {}).update(run.scores())
        for scores in out.values():
            scores["average"] = statistics.fmean(scores[t] for t in self.tasks)
        return dict(sorted(out.items()))

    def params_x_base(self) -> float:
        """Parameters of the whole system over those of the base: separate models hold one base per task."""
        first = [run for run in self.runs if run.seed == self.seeds[0]]
        shared = first[0].results["parameters"]["shared"]
        per_task = sum(sum(run.results["parameters"]["per_task"].values()) for run in first)
        return (per_task + shared * (len(self.tasks) if self.separate else 1)) / shared

    def seconds_per_seed(self) -> float | None:
        """Mean over seeds of the wall time of a seed's runs (summed: separate models train one by one)."""
        totals: dict[int, float] = {}
        for run in self.runs:
            if run.results.get("wall_seconds") is None:
                return None
            totals[run.seed] = totals.get(run.seed, 0.0) + run.results["wall_seconds"]
        return statistics.fmean(totals.values()) if totals else None

    def examples_per_second(self) -> float | None:
        """Mean over runs of the training examples per second the Trainer logged."""
        rates = [rate for run in self.runs if (rate := _examples_per_second(run.results)) is not None]
        return statistics.fmean(rates) if rates else None

    def curve(self) -> dict[int, float]:
        """Dev average (points) by step, the mean over seeds; empty without eval_steps or for separate models."""
        if self.separate:
            return {}
        by_step: dict[int, list[float]] = {}
        for run in self.runs:
            points = {e["step"]: 100 * e["eval_average"] for e in run.results["log_history"] if "eval_average" in e}
            for step, value in points.items():  # the final evaluation repeats the last periodic one
                by_step.setdefault(step, []).append(value)
        if len(by_step) < 2:
            return {}
        return {step: statistics.fmean(values) for step, values in sorted(by_step.items())}


def _examples_per_second(results: dict) -> float | None:
    for entry in reversed(results.get("log_history", [])):
        if "train_examples_per_second" in entry:
            return entry["train_examples_per_second"]
    return None


def read_results(folder: Path) -> dict:
    return json.loads((folder / RESULTS_FILE).read_text(encoding="utf-8"))


def collect_rows(grid: Grid, planned: list[PlannedRun]) -> list[RowResult]:
    """Every row of the grid with its finished seeds; a seed with a run not done yet is left out, its
    folders listed in ``missing``."""
    rows = []
    for row in grid.rows:
        runs = [run for run in planned if run.row == row.name]
        missing = [run for run in runs if run_state(run) != "done"]
        incomplete_seeds = {run.seed for run in missing}
        finished = [
            FinishedRun(run.seed, run.folder, run.tasks, read_results(run.folder))
            for run in runs
            if run.seed not in incomplete_seeds
        ]
        method = row.settings.get("method", grid.shared.get("method", "pals"))
        base = "finetune" if method == SEPARATE else row.settings.get("base", grid.shared.get("base", "finetune"))
        missing_folders = [str(r.folder) for r in missing]
        rows.append(RowResult(row.name, method, base, method == SEPARATE, grid.tasks, finished, missing_folders))
    return rows
