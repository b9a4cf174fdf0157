"""A row's finished runs as the report reads them: scores per seed (points, 0-100), parameters as a
multiple of the base, wall time and examples per second (summed over a resumed run's segments), the
classes predicted and dev curves."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class FinishedRun:
    """One finished run of a row: its seed, folder, tasks and recorded results."""

    seed: int
    folder: Path
    tasks: list[str]
    results: dict

    def scores(self) -> dict[str, float]:
        return {task: 100 * self.results["metrics"][f"{task}_score"] for task in self.tasks}

    @property
    def resumed(self) -> bool:
        return len(self.results.get("segments", [])) > 1

    def seconds(self) -> float | None:
        """The run's wall time: its segments' (a resumed run's earlier ones up to the checkpoint it went on from)."""
        segments = self.results.get("segments")
        if segments is None:  # a run recorded before runs kept their segments: one segment
            return self.results.get("wall_seconds")
        earlier = [segment["train_seconds"] for segment in segments[:-1]]
        return None if None in earlier else sum(earlier) + segments[-1]["wall_seconds"]

    def examples_per_second(self) -> float | None:
        """Training examples per second over the whole run (all its segments)."""
        segments = self.results.get("segments")
        if segments is None:
            return _examples_per_second(self.results)
        seconds = [segment["train_seconds"] for segment in segments]
        if None in seconds or not sum(seconds):
            return None
        return segments[-1]["to_step"] * self.results["config"]["batch_size"] / sum(seconds)

    def one_class_tasks(self) -> list[str]:
        """The tasks whose dev predictions are all one class (``train``'s "class ... is never predicted" for
        every other class)."""
        return [
            task
            for task, splits in self.results.get("per_class", {}).items()
            if task in self.tasks
            and any(len(report["labels"]) - len(report["never_predicted"]) <= 1 for report in splits.values())
        ]


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
    budget: dict = field(default_factory=dict)  # {"steps", "examples": {task: n}, "batch_size"} (`plan_runs`)

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
            if (seconds := run.seconds()) is None:
                return None
            totals[run.seed] = totals.get(run.seed, 0.0) + seconds
        return statistics.fmean(totals.values()) if totals else None

    def examples_per_second(self) -> float | None:
        """Mean over runs of their training examples per second (each over all its segments)."""
        rates = [rate for run in self.runs if (rate := run.examples_per_second()) is not None]
        return statistics.fmean(rates) if rates else None

    @property
    def resumed(self) -> bool:
        return any(run.resumed for run in self.runs)

    def one_class_seeds(self) -> dict[str, list[int]]:
        """``{task: [seeds]}``: the seeds whose run predicts one class only on the task."""
        out: dict[str, list[int]] = {}
        for run in self.runs:
            for task in run.one_class_tasks():
                out.setdefault(task, []).append(run.seed)
        return {task: sorted(seeds) for task, seeds in out.items()}

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
