"""The ``search:`` of a grid file, read and checked: which settings a row's search chooses and among what
(a list of candidates each, or a range drawn by Optuna's TPE sampler), how many trials, the search's seed
and the fraction of training rows held out to score the trials on. A grid-level ``search:`` applies to every
row (the same search for every method); a row's own ``search:`` adds to it or replaces its entries, and
``search: false`` leaves the row out."""

from __future__ import annotations

import itertools
import math
import typing
from dataclasses import dataclass

from ....errors import ConfigError
from ...run_config import RunConfig
from ..budgets import BUDGET_SETTINGS
from ..grid import NOT_SETTABLE, RUN_FIELDS, SEED_LIMIT, SHARED_ONLY, Grid, Row
from ..naming import NOT_IN_DIGEST

SEARCH_KEYS = ("trials", "seed", "selection")
GRID_ONLY = ("seed", "selection")  # every row's trials train and score on the same split of the data
RANGES = ("log", "uniform")
DEFAULT_SELECTION = 0.1
# What a search may not choose, and why.
NOT_SEARCHABLE = {
    **{name: "compare decides it for every run" for name in NOT_SETTABLE},
    **{name: "every row shares it; set it at the top of the grid file" for name in SHARED_ONLY},
    **{name: "it changes no score" for name in NOT_IN_DIGEST},
    **{
        name: "it sets the training budget, which every row gets alike; set it in the grid (or the row)"
        for name in (*BUDGET_SETTINGS, "batch_size", "max_train_examples")
    },
    "max_eval_examples": "it sets the dev examples every row is scored on; set it at the top of the grid file",
    "method": "it makes the row the method it is; give each method its own row",
    "base": "it makes the row the method it is; give each base its own row",
}
INSTALL = 'pip install "pals-adapters[search]"'


@dataclass
class SearchSpec:
    """One row's search: ``space`` {setting: [candidates] or {"log"|"uniform": [low, high]}}, the number of
    trials, the seed (of the sampler, the trial runs and the selection split) and the selection fraction."""

    space: dict
    trials: int
    seed: int
    selection: float

    @property
    def grid_form(self) -> bool:
        """Every setting a list of candidates: Optuna's grid sampler tries them (``trials`` of them)."""
        return all(isinstance(values, list) for values in self.space.values())

    @property
    def sampler(self) -> str:
        return "grid" if self.grid_form else "tpe"

    def combinations(self) -> list[dict]:
        """Every combination of a grid's candidates, in the order written."""
        names = list(self.space)
        return [dict(zip(names, values)) for values in itertools.product(*(self.space[n] for n in names))]

    def corners(self) -> list[dict]:
        """The settings checked as runs before anything trains: every combination of a grid (each is a trial);
        for ranges, each candidate and each range's two ends in turn, the other settings at their first."""
        if self.grid_form:
            return self.combinations()
        ends = {name: values if isinstance(values, list) else _bounds(values) for name, values in self.space.items()}
        first = {name: values[0] for name, values in ends.items()}
        return [first] + [{**first, name: value} for name, values in ends.items() for value in values[1:]]

    def distributions(self) -> dict:
        """Optuna's distribution of each setting."""
        import optuna.distributions as dist

        out = {}
        for name, values in self.space.items():
            if isinstance(values, list):
                out[name] = dist.CategoricalDistribution(values)
                continue
            (kind, (low, high)) = next(iter(values.items()))
            if _is_int(name):
                out[name] = dist.IntDistribution(int(low), int(high), log=kind == "log")
            else:
                out[name] = dist.FloatDistribution(float(low), float(high), log=kind == "log")
        return out

    def record(self) -> dict:
        return {"space": self.space, "trials": self.trials, "seed": self.seed, "selection": self.selection}


def _bounds(values: dict) -> list:
    return list(next(iter(values.values())))


def _is_int(name: str) -> bool:
    hint = typing.get_type_hints(RunConfig)[name]
    return int in typing.get_args(hint) or hint is int


def _is_number_setting(name: str) -> bool:
    hint = typing.get_type_hints(RunConfig)[name]
    kinds = set(typing.get_args(hint)) or {hint}
    return bool(kinds & {int, float})


def read_search(grid: Grid, row: Row) -> SearchSpec | None:
    """The row's search (the grid's, with the row's own entries), or None when it makes none; ConfigError
    naming the grid file, the row and what to fix."""
    where = f"{grid.source}: search"
    shared = _mapping(grid.search, where, row_level=False) if grid.search is not None else {}
    for key in shared:
        _check_name(key, where)
    if row.search is False or (row.search is None and not set(shared) - set(SEARCH_KEYS)):
        return None  # left out, or a grid-level search that only sets how the searching rows split the data
    here = f"{grid.source}: row {row.name!r}: search"
    own = _mapping(row.search, here, row_level=True) if row.search is not None else {}
    for key in own:
        _check_name(key, here)
        if key in GRID_ONLY:
            raise ConfigError(
                f"{here}: {key!r} is the same for every row (every row's trials are split and seeded alike); set "
                f"it in the grid's search: at the top of the file"
            )
    seed = shared.get("seed", grid.seeds[0])
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < SEED_LIMIT:
        raise ConfigError(f"{where}: seed={seed!r}: give a whole number from 0 to {SEED_LIMIT - 1}")
    selection = shared.get("selection", DEFAULT_SELECTION)
    if isinstance(selection, bool) or not isinstance(selection, (int, float)) or not 0 < selection < 1:
        raise ConfigError(
            f"{where}: selection={selection!r}: the fraction of each task's training rows held out to score the "
            "trials on, above 0 and below 1 (e.g. selection: 0.1)"
        )
    merged = {**shared, **own}
    space = {key: value for key, value in merged.items() if key not in SEARCH_KEYS}
    where = here if row.search is not None else f"{where} (row {row.name!r})"
    if not space:
        raise ConfigError(f"{where}: names no setting to choose; e.g. search: {{adapter_lr: [3.0e-4, 1.0e-3]}}")
    space = {name: _candidates(name, values, where) for name, values in space.items()}
    spec = SearchSpec(space, 0, seed, float(selection))
    spec.trials = _trials(merged.get("trials"), spec, where)
    _require_optuna(where)
    return spec


def _mapping(value, where: str, row_level: bool) -> dict:
    if not isinstance(value, dict) or not value:
        raise ConfigError(
            f"{where}: {value!r}: give the settings to choose and their candidates, e.g. search: {{adapter_lr: "
            "[3.0e-4, 1.0e-3]}, or ranges with a trial count: {adapter_lr: {log: [1.0e-4, 1.0e-2]}, trials: 12}"
            + ("; search: false leaves the row out of the grid's search" if row_level else "")
        )
    return value


def _check_name(key, where: str) -> None:
    if key in SEARCH_KEYS:
        return
    if key not in RUN_FIELDS:
        raise ConfigError(
            f"{where}: unknown setting {key!r}: a search chooses settings of a run (e.g. lr, adapter_lr, "
            f"weight_decay, warmup_ratio) besides {', '.join(SEARCH_KEYS)}"
        )
    if key in NOT_SEARCHABLE:
        raise ConfigError(f"{where}: {key!r} cannot be searched: {NOT_SEARCHABLE[key]}")


def _candidates(name: str, values, where: str):
    if isinstance(values, list):
        if not values:
            raise ConfigError(f"{where}: {name}: an empty list; give one candidate or more, e.g. [3.0e-4, 1.0e-3]")
        if any(not isinstance(v, (str, int, float, bool)) and v is not None for v in values):
            raise ConfigError(f"{where}: {name}={values!r}: each candidate is one value (a number, a word, true/false)")
        if len({repr(v) for v in values}) < len(values):
            raise ConfigError(f"{where}: {name}={values!r}: a candidate is given twice; give each once")
        return list(values)
    if not isinstance(values, dict) or len(values) != 1 or next(iter(values)) not in RANGES:
        raise ConfigError(
            f"{where}: {name}={values!r}: give a list of candidates ([1.0e-4, 1.0e-3]) or one range, "
            f"{{log: [low, high]}} or {{uniform: [low, high]}}"
        )
    kind, bounds = next(iter(values.items()))
    if not _is_number_setting(name):
        raise ConfigError(f"{where}: {name} is not a number: give its candidates as a list, not a range")
    numbers = isinstance(bounds, list) and len(bounds) == 2
    numbers = numbers and all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds)
    if not numbers or not all(math.isfinite(b) for b in bounds) or not bounds[0] < bounds[1]:
        raise ConfigError(f"{where}: {name}: {kind}: {bounds!r}: give [low, high], two numbers with low below high")
    if kind == "log" and bounds[0] <= 0:
        raise ConfigError(f"{where}: {name}: log: {bounds!r}: a log range starts above 0; use uniform: to include 0")
    if _is_int(name) and not all(isinstance(b, int) for b in bounds):
        raise ConfigError(f"{where}: {name} is a whole number: give its range as whole numbers")
    return {kind: list(bounds)}


def _trials(trials, spec: SearchSpec, where: str) -> int:
    if trials is None:
        if spec.grid_form:
            return len(spec.combinations())
        raise ConfigError(f"{where}: a range needs a trial count: add trials: N (every row given the same N)")
    if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
        raise ConfigError(f"{where}: trials={trials!r}: give the number of trial runs, a whole number of 1 or more")
    if spec.grid_form and trials > len(spec.combinations()):
        raise ConfigError(
            f"{where}: trials={trials}: the candidates make only {len(spec.combinations())} combinations; give "
            "trials up to that, or leave trials out to try each"
        )
    return trials


def _require_optuna(where: str) -> None:
    try:
        import optuna  # noqa: F401
    except ImportError:
        raise ConfigError(f"{where}: a search needs Optuna, which is not installed: {INSTALL}") from None
