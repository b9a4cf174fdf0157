"""The grid file of `compare`: what every run shares, the seeds, the rows and the reference row, read
and checked in full (each row's runs through the checks ``train`` makes, their budgets and dev subsets)
before any run folder exists."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from ...errors import ConfigError, PalsError
from .. import settings_yaml
from ..run_config import RunConfig
from . import budgets
from .budgets import EQUAL, TaskSizes
from .launch import LAUNCH_KEYS

if TYPE_CHECKING:
    from ..tasks.spec import TaskSpec
    from .naming import RunPlace

logger = logging.getLogger(__name__)

RUN_FIELDS = tuple(f.name for f in dataclasses.fields(RunConfig))
# Where a run is or what it continues: compare decides these for every run.
NOT_SETTABLE = ("output_dir", "resume", "overwrite", "seed", "add_to", "replace", "selection", "selection_seed")
# What all rows share, so that their scores compare: a row may change anything else.
SHARED_ONLY = ("model", "tasks", "task_file", "glue_dir", "data_source")
GRID_KEYS = ("seeds", "rows", "reference", "keep_checkpoints", "separate_budget", "search", *LAUNCH_KEYS)
ROW_KEYS = ("name", "seeds", "search")  # search: the settings it chooses (search/)
PATH_FIELDS = ("task_file", "glue_dir", "deepspeed")  # relative to the grid file's folder
SEPARATE = "separate"  # a row of one fine-tuned model per task: the papers' baseline
SEED_LIMIT = 2**32  # numpy's seeds run from 0 to 2**32 - 1


class CommandLineOverrides(dict):
    """Overrides given as options of ``pals-bench compare``: errors name the option (``--max-steps``), not
    the Python argument (``overrides={"max_steps": ...}``)."""


@dataclass
class Row:
    """One row of the comparison: its name, the settings it changes, its seeds."""

    name: str
    settings: dict
    seeds: list[int]
    own_seeds: bool = False  # the row sets its seeds itself
    search: object = None  # the row's search: as written (checked by `search.space`)

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
    separate_budget: str = EQUAL
    tasks: list[str] = field(default_factory=list)  # resolved by `plan_runs`
    # row name -> {"steps": {task: steps}, "examples": {task: examples}, "batch_size"}: set by `plan_runs`
    budgets: dict[str, dict] = field(default_factory=dict)
    max_eval_examples: int | None = None  # the dev subset every row is scored on: set by `plan_runs`
    launch: dict = field(default_factory=dict)  # where the runs train (`launch.read_launch` checks it)
    search: object = None  # the search every row makes, as written (checked by `search.space`)

    def row(self, name: str) -> Row:
        return next(row for row in self.rows if row.name == name)


@dataclass
class PlannedRun:
    """One harness run of a row: per seed, and per task for a row of separate models."""

    row: str
    seed: int
    config: RunConfig
    folder: Path
    specs: dict[str, TaskSpec]
    digest: str
    place: RunPlace | None = None  # its identity, and the run of other inputs it replaces

    @property
    def tasks(self) -> list[str]:
        return list(self.specs)


def read_grid(path: str | Path, overrides: dict | None = None) -> Grid:
    """The grid of the YAML/JSON file ``path``, with ``overrides`` (shared settings, e.g. from the command
    line: a `CommandLineOverrides`) replacing the file's; ConfigError naming what to fix. An override that a
    row's own setting would shadow is refused, naming the row."""
    path = Path(path)
    data = _read_mapping(path)
    where = str(path)
    rows_data = data.pop("rows", None)
    seeds = data.pop("seeds", None)
    reference = data.pop("reference", None)
    keep = data.pop("keep_checkpoints", False)
    separate_budget = data.pop("separate_budget", EQUAL)
    launch = {key: data.pop(key) for key in LAUNCH_KEYS if key in data}
    search = data.pop("search", None)
    for key in PATH_FIELDS:  # a path in the file is read from the file's folder
        if isinstance(data.get(key), str) and not Path(data[key]).is_absolute():
            data[key] = str((path.parent / data[key]).resolve())
    model = data.get("model")  # a model folder beside the grid too (else a Hub id, or a bundled name)
    if isinstance(model, str) and not Path(model).is_absolute() and (path.parent / model).is_dir():
        data["model"] = str((path.parent / model).resolve())
    command_line = isinstance(overrides, CommandLineOverrides)
    overrides = dict(overrides or {})
    _check_keys(data, (*RUN_FIELDS, *GRID_KEYS), f"{where}", NOT_SETTABLE)
    for key in overrides:
        _check_keys({key: overrides[key]}, (*RUN_FIELDS, "seeds"), _option(key, command_line), NOT_SETTABLE)
    given = list(overrides)
    if "seeds" in overrides:
        seeds = _check_seeds(overrides.pop("seeds"), _option("seeds", command_line))
    shared = {**data, **overrides}
    if not isinstance(keep, bool):
        raise ConfigError(f"{where}: keep_checkpoints={keep!r}: expected true or false")
    if separate_budget not in budgets.SEPARATE_BUDGETS:
        raise ConfigError(
            f"{where}: separate_budget={separate_budget!r}: expected {EQUAL} (each task's own run trains the steps "
            "the multi-task runs give that task) or per_task_steps (each task's own run trains max_steps)"
        )
    seeds = _check_seeds(seeds, where)
    rows = _read_rows(rows_data, seeds, where)
    names = [row.name for row in rows]
    if reference is None:
        raise ConfigError(f"{where}: no 'reference': name the row every other row is compared with ({names})")
    if reference not in names:
        raise ConfigError(f"{where}: reference {reference!r} is no row; choose one of {names}")
    _refuse_shadowed(given, rows, command_line, where)
    return Grid(where, shared, seeds, rows, reference, keep, separate_budget, launch=launch, search=search)


def _option(key: str, command_line: bool) -> str:
    """How the caller gave an override: the option of the command, or the Python argument."""
    return "--" + key.replace("_", "-") if command_line else f"overrides={{{key!r}: ...}}"


def _refuse_shadowed(given: list[str], rows: list[Row], command_line: bool, where: str) -> None:
    """An override replaces the grid's shared setting only: a row that sets it itself would silently keep its
    own value, so the two together are refused."""
    for key in given:
        for row in rows:
            if key in row.settings or (key == "seeds" and row.own_seeds):
                value = row.seeds if key == "seeds" else row.settings[key]
                option = _option(key, command_line)
                raise ConfigError(
                    f"{option}: row {row.name!r} sets {key} itself ({key}: {value!r} in {where}), which {option} "
                    f"does not replace; remove {key} from that row (then {option} applies to it too), or leave out "
                    f"{option} and edit the grid file"
                )


def _read_mapping(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else settings_yaml.safe_load(text)
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
            what = {"seed": "use seeds: [...]", "selection": "give it in search:, e.g. search: {selection: 0.1, ...}"}
            what = what.get(key, "compare decides it for every run")
            raise ConfigError(f"{where}: {key!r} cannot be set in a comparison ({what}); remove it")
        if key not in valid:
            close = difflib.get_close_matches(str(key), valid, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; valid: {', '.join(valid)}"
            raise ConfigError(f"{where}: unknown setting {key!r}{hint}")


def _check_seeds(seeds, where: str) -> list[int]:
    """Distinct whole numbers in numpy's range, refused here rather than inside numpy after other runs."""
    if not isinstance(seeds, list) or not seeds:
        raise ConfigError(f"{where}: seeds={seeds!r}: give a non-empty list of whole numbers, e.g. seeds: [1, 2, 3]")
    for seed in seeds:
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ConfigError(f"{where}: seeds={seeds!r}: {seed!r} is not a whole number; e.g. seeds: [1, 2, 3]")
        if not 0 <= seed < SEED_LIMIT:
            raise ConfigError(
                f"{where}: seed {seed} is out of range: a seed is a whole number from 0 to {SEED_LIMIT - 1} "
                "(what numpy accepts); choose another"
            )
    repeated = sorted({seed for seed in seeds if seeds.count(seed) > 1})
    if repeated:
        raise ConfigError(
            f"{where}: seeds={seeds!r}: seed {repeated[0]} is given twice; give each seed once (a seed repeated "
            "is the same run again, not another sample)"
        )
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
        rows.append(Row(name, settings, row_seeds, own_seeds="seeds" in item, search=item.get("search")))
    return rows


def plan_runs(grid: Grid, output_dir: str | Path) -> list[PlannedRun]:
    """Every run of the grid, each checked as ``train`` checks it (ConfigError naming the row); nothing is
    written. Every row is scored on the reference's dev subset; a separate row's runs train the steps set
    by ``separate_budget``; ``grid.budgets`` gets each row's examples per task. Runs of the same settings
    (two rows alike) share one folder."""
    from .naming import locate_run  # the run folder's rules: imported when runs are planned

    runs_dir = Path(output_dir) / "runs"
    sizes = TaskSizes(grid.shared.get("glue_dir"), grid.shared.get("data_source", "auto"))
    checked = {row.name: _validated(_row_config(grid, row.settings, row), grid, row) for row in grid.rows}
    grid.tasks = list(checked[grid.rows[0].name][1])
    _check_dev_subsets(grid, checked, sizes)
    planned = []
    for row in grid.rows:
        base_config, specs = checked[row.name]
        steps = _row_steps(grid, row, base_config, specs, sizes)
        grid.budgets[row.name] = {
            "steps": steps,
            "examples": {task: n * base_config.batch_size for task, n in steps.items()},
            "batch_size": base_config.batch_size,
        }
        task_groups = [[task] for task in specs] if row.separate else [list(specs)]
        for seed in row.seeds:
            for tasks in task_groups:
                config = dataclasses.replace(copy.deepcopy(_row_config(grid, row.settings, row)), seed=seed)
                if row.separate:
                    _one_task(config, tasks[0], steps[tasks[0]], grid, row)
                run_specs = _validated(config, grid, row)[1] if row.separate else specs
                place = locate_run(runs_dir, config, run_specs, row.separate)
                config.output_dir = str(place.folder)
                digest = place.identity.digest
                planned.append(PlannedRun(row.name, seed, config, place.folder, run_specs, digest, place))
        budgets.warn_without_loss_curve(
            f"{grid.source}: row {row.name!r}", [run.config for run in planned if run.row == row.name]
        )
    return planned


def _row_steps(grid: Grid, row: Row, config: RunConfig, specs: dict, sizes: TaskSizes) -> dict[str, float]:
    """The steps each task trains in the row's runs: expected under the row's sampler for a multi-task row;
    for a separate row, each task's share of the multi-task budget (``separate_budget: equal``: the
    reference row's settings, with the separate row's own max_steps or sampler where it sets them) or
    max_steps each (``per_task_steps``)."""
    if not row.separate:
        return budgets.expected_steps(config, sizes.train(specs, config.max_train_examples))
    if grid.separate_budget != EQUAL:
        return {task: float(config.max_steps) for task in specs}
    reference = grid.row(grid.reference)
    settings = {**({} if reference.separate else reference.settings)}
    settings.update({key: row.settings[key] for key in budgets.BUDGET_SETTINGS if key in row.settings})
    multi, multi_specs = _validated(_row_config(grid, settings, reference), grid, row)
    shares = budgets.expected_steps(multi, sizes.train(multi_specs, multi.max_train_examples))
    return {task: float(n) for task, n in budgets.separate_steps(shares).items()}


def _one_task(config: RunConfig, task: str, steps: float, grid: Grid, row: Row) -> None:
    """A separate row's run of one task: its own steps, one sampling epoch, checkpoints as any run's."""
    config.tasks = [task]
    if grid.separate_budget == EQUAL:
        config.max_steps = int(steps)
        if _default_checkpoints({**grid.shared, **row.settings}):
            config.save_steps = _checkpoint_every(config.max_steps)
    config.steps_per_epoch = config.max_steps  # one task: no sampling epochs


def _check_dev_subsets(grid: Grid, checked: dict, sizes: TaskSizes) -> None:
    """Every row scored on the reference's dev examples, two or more per task; refused otherwise."""
    reference, specs = checked[grid.reference]
    grid.max_eval_examples = reference.max_eval_examples
    for name, (config, _) in checked.items():
        if config.max_eval_examples != reference.max_eval_examples:
            raise ConfigError(
                f"{grid.source}: row {name!r}: max_eval_examples={config.max_eval_examples} but the reference row "
                f"{grid.reference!r} is scored on max_eval_examples={reference.max_eval_examples}: rows compare "
                "only on the same dev examples; remove max_eval_examples from the rows and set it once at the top "
                "of the grid file"
            )
    for spec in specs.values():
        budgets.check_dev_examples(grid.source, spec, sizes.dev(spec, reference.max_eval_examples))


def _default_checkpoints(settings: dict) -> bool:
    return settings.get("eval_steps") is None and settings.get("save_steps") is None


def _checkpoint_every(max_steps: int) -> int:  # every tenth of the steps: something to resume from
    return max(1, max_steps // 10)


def _row_config(grid: Grid, row_settings: dict, row: Row) -> RunConfig:
    settings = {**grid.shared, **row_settings}
    if row.separate:
        settings.update(method="shared", base="finetune")
    settings.setdefault("output_dir", "compare-run")  # set per run later
    if _default_checkpoints(settings):  # checkpoints to resume from
        settings["save_steps"] = _checkpoint_every(int(settings.get("max_steps", RunConfig.max_steps)))
    settings.setdefault("save_total_limit", 1)
    try:
        return RunConfig(**settings)
    except TypeError as err:  # a value RunConfig cannot even hold
        raise ConfigError(f"{grid.source}: row {row.name!r}: {err}") from None


def _validated(config: RunConfig, grid: Grid, row: Row) -> tuple[RunConfig, dict[str, TaskSpec]]:
    """The checks of ``train`` on a copy (they resolve names and defaults in place, e.g. the sampler), the
    row named in any error: the checked copy and the task specs."""
    checked = copy.deepcopy(config)
    try:
        return checked, checked.validate()
    except PalsError as err:
        raise ConfigError(f"{grid.source}: row {row.name!r}: {err}") from None
