"""What a row's search did, for the report and the dry run: the space, each trial's settings, selection
score and folder, the settings chosen, and what the search cost (the trials' steps and wall time). The
report's table of it: `reporting.search_table`."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..grid import Grid
from ..reporting.rows import FinishedRun
from ..runs import DONE, RESULTS_FILE, run_state, unique_runs
from . import study as studies
from .trials import RowSearch, plan_trial


def search_record(search: RowSearch, grid: Grid, output_dir: Path) -> dict:
    """``{"space", "sampler", "trials_per_row", "seed", "selection", "trials": [{"number", "settings",
    "selection_score", "run_dir", "run_dirs"}], "chosen", "chosen_trial", "cost": {"runs", "steps",
    "seconds"}}``; folders relative to ``output_dir``, scores in points (None for a trial not told yet)."""
    trials, steps, seconds, count = [], 0, 0.0, 0
    for trial in studies.trials_of(search.study):
        runs = search.trial_runs(grid, output_dir, trial)
        folders = [os.path.relpath(run.folder, output_dir) for run in runs]
        trials.append(
            {
                "number": trial.number,
                "settings": dict(trial.params),
                "selection_score": trial.value if trial.state.name == studies.COMPLETE else None,
                "run_dir": folders[0],
                "run_dirs": folders,
            }
        )
        for run in unique_runs(runs):
            if run_state(run) == DONE:
                results = json.loads((run.folder / RESULTS_FILE).read_text(encoding="utf-8"))
                count, steps = count + 1, steps + run.config.max_steps
                seconds += FinishedRun(run.seed, run.folder, run.tasks, results).seconds() or 0.0
    return {
        "space": search.spec.space,
        "sampler": search.spec.sampler,
        "trials_per_row": search.spec.trials,
        "seed": search.spec.seed,
        "selection": search.spec.selection,
        "trials": trials,
        "chosen": search.chosen(),
        "chosen_trial": studies.best(search.study).number if search.chosen() is not None else None,
        "cost": {"runs": count, "steps": steps, "seconds": seconds},
    }


def add_search_records(data: dict, searches: list[RowSearch], grid: Grid, output_dir: Path) -> None:
    """Each searched row of the report's ``data`` gets its ``search`` record."""
    by_row = {search.row.name: search for search in searches}
    for row in data["rows"]:
        if row["name"] in by_row:
            row["search"] = search_record(by_row[row["name"]], grid, output_dir)


def _value(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def describe_searches(searches: list[RowSearch], grid: Grid, output_dir: Path) -> dict:
    """The dry run's view of the searches (printed): each row's trials so far, their state and folder;
    returns ``{row: {"trials", "chosen", ...}}``."""
    out = {}
    for search in searches:
        record = search_record(search, grid, output_dir) if search.study is not None else None
        told = sum(t["selection_score"] is not None for t in record["trials"]) if record else 0
        print(
            f"search of row {search.row.name!r}: {search.spec.trials} trials ({search.spec.sampler} over "
            f"{', '.join(search.spec.space)}), {told} done; runs in {Path(output_dir) / 'search' / 'runs'}"
        )
        trials = record["trials"] if record else []
        for trial in trials:
            state = "done" if trial["selection_score"] is not None else "to train (or resume)"
            folder = Path(output_dir) / trial["run_dir"]
            print(f"  trial {trial['number']} {_settings(trial['settings'])}: {state}  {folder}")
        left = search.spec.trials - len(trials)
        if left and search.spec.grid_form and left == len(search.spec.combinations()):
            for settings in search.spec.combinations():  # every candidate is tried: their runs are known
                folder = plan_trial(grid, search.row, search.spec, settings, output_dir)[0].folder
                print(f"  candidate {_settings(settings)}: to train  {folder}")
        elif left:
            how = "the grid's candidates" if search.spec.grid_form else "drawn as the search goes"
            print(f"  {left} trials not asked yet ({how})")
        out[search.row.name] = {"trials": trials, "chosen": search.chosen() if search.study is not None else None}
    return out


def _settings(settings: dict) -> str:
    return " ".join(f"{name}={_value(value)}" for name, value in settings.items())
