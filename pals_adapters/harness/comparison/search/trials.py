"""The trials of each row's search as runs of the comparison: planned (and checked) with the rest of the
grid, trained round by round (``jobs`` at a time, every row's round together), each scored on its selection
part, and the settings each row chose given to its final runs.

A trial is the row's run(s) at one seed (the search's) with the trial's settings, trained on the training
part of each task's training rows and scored on the selection part (`RunConfig.selection`): a run with its
own folder under ``<output>/search/runs/`` and its own identity, so a finished trial is read, a killed one
resumes, and a trial is never taken for a final run. The final runs train on the full training data."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import re
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ....errors import ConfigError
from .. import budgets
from ..grid import Grid, PlannedRun, Row, plan_runs
from ..runs import DONE, run_state
from . import study as studies
from .space import SearchSpec, read_search

SEARCH_FOLDER = "search"  # in the comparison's output folder: the studies' journals and the trial runs


@dataclass
class RowSearch:
    """One row's search: its spec, where its study is kept, and its study once opened."""

    row: Row
    spec: SearchSpec
    journal: Path
    name: str  # the study's name: the digest of the search and of the runs it tries
    study: object = None
    planned: dict = field(default_factory=dict)  # trial number -> its runs

    def trial_runs(self, grid: Grid, output_dir: Path, trial) -> list[PlannedRun]:
        if trial.number not in self.planned:
            self.planned[trial.number] = plan_trial(grid, self.row, self.spec, trial.params, output_dir, trial.number)
        return self.planned[trial.number]

    @property
    def finished(self) -> bool:
        told = [t for t in studies.trials_of(self.study) if t.state.name == studies.COMPLETE]
        return len(told) >= self.spec.trials

    def chosen(self) -> dict | None:
        """The settings of the trial of the best selection score, once every trial is told."""
        return dict(studies.best(self.study).params) if self.finished else None


def plan_trial(
    grid: Grid, row: Row, spec: SearchSpec, settings: dict, output_dir: Path, number: int | None = None
) -> list[PlannedRun]:
    """The runs of one trial of ``row``: its settings with ``settings``, trained on the training part, scored
    on the selection part, at the search's seed, with no export; checked as compare checks a row's runs."""
    label = f"{row.name}: trial {number}" if number is not None else row.name  # an error names the row
    trial_settings = {**row.settings, **settings, "selection": spec.selection, "selection_seed": spec.seed}
    trial_settings["export"] = False
    trial = Row(label, trial_settings, [spec.seed], own_seeds=True)
    rows, reference = [trial], label
    if row.separate and row.name != grid.reference:  # the reference sets a separate model's budget
        reference_row = grid.row(grid.reference)
        rows.append(dataclasses.replace(reference_row, seeds=[spec.seed], search=None))
        reference = reference_row.name
    sub = Grid(grid.source, grid.shared, [spec.seed], rows, reference, False, grid.separate_budget)
    with _quiet(budgets.logger):  # the row's own runs warn of what its trials share
        return [run for run in plan_runs(sub, Path(output_dir) / SEARCH_FOLDER) if run.row == label]


@contextlib.contextmanager
def _quiet(logger: logging.Logger) -> Iterator[None]:
    before, logger.disabled = logger.disabled, True
    try:
        yield
    finally:
        logger.disabled = before


def plan_searches(grid: Grid, output_dir: Path) -> list[RowSearch]:
    """Every row's search, read and checked (each candidate or range end as a run of the row), and where its
    study is kept; ConfigError naming the row before anything is written or trained."""
    searches = []
    for row in grid.rows:
        spec = read_search(grid, row)
        if spec is None:
            continue
        digests = []
        for settings in spec.corners():
            try:
                digests += [run.digest for run in plan_trial(grid, row, spec, settings, output_dir)]
            except ConfigError as err:
                raise ConfigError(f"{err} (in the search, with {_words(settings)})") from None
        name = hashlib.sha256(json.dumps([spec.record(), digests], sort_keys=True, default=str).encode()).hexdigest()
        slug = re.sub(r"[^A-Za-z0-9_.=]+", "_", row.name).strip("_") or "row"
        journal = Path(output_dir) / SEARCH_FOLDER / f"{slug}-{name[:12]}.journal"
        searches.append(RowSearch(row, spec, journal, name[:12]))
    return searches


def _words(settings: dict) -> str:
    return ", ".join(f"{name}={value!r}" for name, value in settings.items())


def read_studies(searches: list[RowSearch]) -> None:
    """Each search's study where its journal exists (nothing written): a dry run's or a report's view."""
    for search in searches:
        search.study = studies.open_study(search.journal, search.name, create=False)


def selection_score(runs: list[PlannedRun]) -> float:
    """The trial's score: the mean over tasks of each task's score on its selection part, in points."""
    scores = {}
    for run in runs:
        metrics = json.loads((run.folder / "results.json").read_text(encoding="utf-8"))["metrics"]
        scores.update({task: 100 * metrics[f"{task}_score"] for task in run.tasks})
    return statistics.fmean(scores.values())


def tell_finished(search: RowSearch, grid: Grid, output_dir: Path) -> None:
    """Tells the study the score of each waiting trial whose runs are done (by this command or an earlier)."""
    for trial in studies.waiting(search.study):
        runs = search.trial_runs(grid, output_dir, trial)
        if all(run_state(run) == DONE for run in runs):
            studies.tell(search.study, trial.number, selection_score(runs))


def run_searches(searches: list[RowSearch], grid: Grid, output_dir: Path, train: Callable) -> None:
    """Every row's search to its end: round after round, the trials of every row trained together by
    ``train`` (compare's launcher, given the round's runs), each told its selection score. Trials already done
    are read, not trained again."""
    for search in searches:
        search.study = studies.open_study(search.journal, search.name, create=True)
    while True:
        todo = []
        for search in searches:
            tell_finished(search, grid, output_dir)
            studies.ask_round(search.study, search.spec, search.journal)
            for trial in studies.waiting(search.study):
                todo += search.trial_runs(grid, output_dir, trial)
        if not todo:
            return
        train(todo)  # trials are runs: the same launcher as the rest


def with_choices(grid: Grid, searches: list[RowSearch]) -> Grid:
    """The grid with each row whose search is finished set to the settings it chose (a copy)."""
    chosen = {search.row.name: search.chosen() for search in searches}
    rows = [
        dataclasses.replace(row, settings={**row.settings, **chosen[row.name]}) if chosen.get(row.name) else row
        for row in grid.rows
    ]
    return dataclasses.replace(grid, rows=rows, budgets={})


def unfinished(searches: list[RowSearch]) -> list[RowSearch]:
    return [search for search in searches if search.study is None or not search.finished]


def with_searched_settings(grid: Grid, output_dir: Path, row: str) -> Grid:
    """The grid with the settings each finished search chose (nothing trained or written): the grid whose runs
    are the comparison's; ConfigError when ``row``'s search is not finished."""
    searches = plan_searches(grid, output_dir)
    read_studies(searches)
    for search in unfinished(searches):
        if search.row.name == row:
            raise ConfigError(
                f"row {row!r}: its search is not finished, so its runs are not known yet; run pals-bench compare "
                "to finish it"
            )
    return with_choices(grid, searches)
