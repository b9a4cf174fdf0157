"""The grid file of `compare`: what every run shares, the seeds, the rows and the reference row, read
and checked in full (each row's runs through the checks ``train`` makes) before any run folder exists."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from ...errors import ConfigError, PalsError
from ..run_config import RunConfig
from .launch import LAUNCH_KEYS

if TYPE_CHECKING:
    from ..tasks.spec import TaskSpec

RUN_FIELDS = tuple(f.name for f in dataclasses.fields(RunConfig))
# Where a run is or what it continues: compare decides these for every run.
NOT_SETTABLE = ("output_dir", "resume", "overwrite", "seed", "add_to", "replace")
# What all rows share, so that their scores compare: a row may change anything else.
SHARED_ONLY = ("model", "tasks", "task_file", "glue_dir", "data_source")
GRID_KEYS = ("seeds", "rows", "reference", "keep_checkpoints", *LAUNCH_KEYS)
ROW_KEYS = ("name", "seeds")
PATH_FIELDS = ("task_file", "glue_dir", "deepspeed")  # relative to the grid file's folder
SEPARATE = "separate"  # a row of one fine-tuned model per task: the papers' baseline


@dataclass
class Row:
    """One row of the comparison: its name, the settings it changes, its seeds."""

    name: str
    settings: dict
    seeds: list[int]

    @property
    def separate(self) -> bool:
        return self.settings.get("method") == SEPARATE


@dataclass
class Grid:
    """A checked grid: the shared settings, the rows (the reference among them) and the seeds."""

    source: str
    shared: dict
    seeds: list[int]
    rows: list[Row]
    reference: str
    keep_checkpoints: bool = False
    tasks: list[str] = field(default_factory=list)  # resolved by `plan_runs`
    launch: dict = field(default_factory=dict)  # where the runs train (`launch.read_launch` checks it)


@dataclass
class PlannedRun:
    """One harness run of a row: per seed, and per task for a row of separate models."""

    row: str
    seed: int
    config: RunConfig
    folder: Path
    specs: dict[str, TaskSpec]
    digest: str

    @property
    def tasks(self) -> list[str]:
        return list(self.specs)


def read_grid(path: str | Path, overrides: dict | None = None) -> Grid:
    """The grid of the YAML/JSON file ``path``, with ``overrides`` (shared settings, e.g. from the command
    line) replacing the file's; ConfigError naming what to fix."""
    path = Path(path)
    data = _read_mapping(path)
    where = str(path)
    rows_data = data.pop("rows", None)
    seeds = data.pop("seeds", None)
    reference = data.pop("reference", None)
    keep = data.pop("keep_checkpoints", False)
    launch = {key: data.pop(key) for key in LAUNCH_KEYS if key in data}
    for key in PATH_FIELDS:  # a path in the file is read from the file's folder
        if isinstance(data.get(key), str) and not Path(data[key]).is_absolute():
            data[key] = str((path.parent / data[key]).resolve())
    overrides = dict(overrides or {})
    seeds = overrides.pop("seeds", seeds)
    _check_keys(data, (*RUN_FIELDS, *GRID_KEYS), f"{where}", NOT_SETTABLE)
    _check_keys(overrides, RUN_FIELDS, "the command line", NOT_SETTABLE)
    shared = {**data, **overrides}
    if not isinstance(keep, bool):
        raise ConfigError(f"{where}: keep_checkpoints={keep!r}: expected true or false")
    seeds = _check_seeds(seeds, where)
    rows = _read_rows(rows_data, seeds, where)
    names = [row.name for row in rows]
    if reference is None:
        raise ConfigError(f"{where}: no 'reference': name the row every other row is compared with ({names})")
    if reference not in names:
        raise ConfigError(f"{where}: reference {reference!r} is no row; choose one of {names}")
    return Grid(where, shared, seeds, rows, reference, keep, launch=launch)


def _read_mapping(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the grid file ({err.strerror})") from None
    except (yaml.YAMLError, json.JSONDecodeError) as err:
        raise ConfigError(f"{path}: not valid YAML/JSON ({err}); fix the file") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping (shared settings, seeds, rows, reference)")
    return data


def _check_keys(values: dict, valid: tuple, where: str, refused: tuple = ()) -> None:
    for key in values:
        if key in refused:
            what = "use seeds: [...]" if key == "seed" else "compare decides it for every run"
            raise ConfigError(f"{where}: {key!r} cannot be set in a comparison ({what}); remove it")
        if key not in valid:
            close = difflib.get_close_matches(str(key), valid, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; valid: {', '.join(valid)}"
            raise ConfigError(f"{where}: unknown setting {key!r}{hint}")


def _check_seeds(seeds, where: str) -> list[int]:
    if not isinstance(seeds, list) or not seeds:
        raise ConfigError(f"{where}: seeds={seeds!r}: give a non-empty list of whole numbers, e.g. seeds: [1, 2, 3]")
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds) or len(set(seeds)) != len(seeds):
        raise ConfigError(f"{where}: seeds={seeds!r}: expected distinct whole numbers, e.g. [1, 2, 3]")
    return list(seeds)


def _read_rows(rows_data, seeds: list[int], where: str) -> list[Row]:
    if not isinstance(rows_data, list) or not rows_data:
        raise ConfigError(f"{where}: 'rows' must be a non-empty list, each row a mapping with a name and a method")
    rows, seen = [], set()
    for i, item in enumerate(rows_data, 1):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"].strip():
            raise ConfigError(f"{where}: row {i} needs a name (name: ...) and its settings as a mapping")
        name, settings = item["name"], {k: v for k, v in item.items() if k not in ROW_KEYS}
        here = f"{where}: row {name!r}"
        if name in seen:
            raise ConfigError(f"{here}: the name is used twice; give each row its own name")
        seen.add(name)
        _check_keys(settings, RUN_FIELDS, here, NOT_SETTABLE)
        for key in SHARED_ONLY:
            if key in settings:
                raise ConfigError(f"{here}: {key!r} is shared by all rows; set it at the top of the grid file")
        if settings.get("method") == SEPARATE and settings.get("base", "finetune") != "finetune":
            raise ConfigError(f"{here}: method separate fine-tunes one model per task; remove base or set finetune")
        row_seeds = _check_seeds(item["seeds"], here) if "seeds" in item else seeds
        rows.append(Row(name, settings, row_seeds))
    return rows


def plan_runs(grid: Grid, output_dir: str | Path) -> list[PlannedRun]:
    """Every run of the grid, each checked as ``train`` checks it (ConfigError naming the row); nothing is
    written. Runs of the same settings (two rows alike) share one folder."""
    from .naming import run_folder_name, settings_digest  # the run folder's rules: imported when runs are planned

    runs_dir = Path(output_dir) / "runs"
    planned = []
    for row in grid.rows:
        base_config = _row_config(grid, row)
        specs = _checked(base_config, grid, row)
        if not grid.tasks:
            grid.tasks = list(specs)
        task_groups = [[task] for task in specs] if row.separate else [list(specs)]
        for seed in row.seeds:
            for tasks in task_groups:
                config = dataclasses.replace(copy.deepcopy(base_config), seed=seed)
                if row.separate:
                    config.tasks = tasks
                    config.steps_per_epoch = config.max_steps  # one task: no sampling epochs
                run_specs = _checked(config, grid, row) if row.separate else specs
                digest = settings_digest(config)
                folder = runs_dir / run_folder_name(config, row.separate, digest)
                config.output_dir = str(folder)
                planned.append(PlannedRun(row.name, seed, config, folder, run_specs, digest))
    return planned


def _row_config(grid: Grid, row: Row) -> RunConfig:
    settings = {**grid.shared, **row.settings}
    if row.separate:
        settings.update(method="shared", base="finetune")
    settings.setdefault("output_dir", "compare-run")  # set per run later
    if settings.get("eval_steps") is None and settings.get("save_steps") is None:  # checkpoints to resume from
        settings["save_steps"] = max(1, int(settings.get("max_steps", RunConfig.max_steps)) // 10)
    settings.setdefault("save_total_limit", 1)
    try:
        return RunConfig(**settings)
    except TypeError as err:  # a value RunConfig cannot even hold
        raise ConfigError(f"{grid.source}: row {row.name!r}: {err}") from None


def _checked(config: RunConfig, grid: Grid, row: Row) -> dict[str, TaskSpec]:
    """The checks of ``train`` on a copy (they resolve names in place), the row named in any error."""
    try:
        return copy.deepcopy(config).validate()
    except PalsError as err:
        raise ConfigError(f"{grid.source}: row {row.name!r}: {err}") from None
