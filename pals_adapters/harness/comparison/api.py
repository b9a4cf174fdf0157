"""`compare`: a grid of methods x seeds on the same tasks, data and budget, trained (or read) and reported."""

from __future__ import annotations

import dataclasses
import shlex
import sys
from pathlib import Path

from ...errors import ConfigError
from ..run_config import RunConfig
from .collect import collect_rows
from .grid import SEPARATE, Grid, PlannedRun, plan_runs, read_grid
from .launch import failed_runs_error, read_launch, require_ray
from .reporting.floor import majority_score
from .reporting.paired import paired_differences
from .reporting.report import check_report_files, comparison_data, markdown, write_report
from .runs import DAMAGED, DONE, MISSING, PARTIAL, export_note, record_problem, run_state, train_missing, unique_runs
from .search.record import add_search_records, describe_searches
from .search.trials import plan_searches, read_studies, run_searches, unfinished, with_choices


def compare(
    config: str | Path,
    output_dir: str | Path,
    *,
    overrides: dict | None = None,
    jobs: int = 1,
    dry_run: bool = False,
    print_commands: bool = False,
    report_only: bool = False,
    command: str | None = None,
    launcher: str | None = None,
    ray_address: str | None = None,
) -> dict:
    """Compares methods on the same tasks, data and budget: every (row, seed) of the grid file ``config``
    is one harness run in ``<output_dir>/runs/``, and the report compares the rows with the reference row.

    The grid file (YAML or JSON) holds the settings every run shares (any `RunConfig` field: ``model``,
    ``tasks``, ``task_file``, ``glue_dir``, ``max_steps``, learning rates ...; paths relative to the file),
    ``seeds: [...]``, ``rows:`` (each a ``name`` and the settings it changes, e.g. ``method: pals`` and
    ``base: frozen``; ``method: separate`` trains one fine-tuned model per task, the papers' baseline),
    ``reference:`` (a row's name) and optionally ``keep_checkpoints: true``; ``search:`` (at the top for every
    row, or in a row) chooses each row's settings by trial runs scored on training rows held out, never on
    dev, before the row's seeds run with them (docs/compare.md). ``overrides`` replace the file's
    shared settings (``{"model": "roberta-base"}`` is the same comparison on another base; ``"seeds"``
    too).

    Everything is checked before the first run starts (each row's runs as ``train`` checks them): a
    `pals_adapters.errors.ConfigError` names the row and what to fix, and no folder is written.

    A run's folder is named by a digest of its settings: a finished run is read, not retrained; an
    interrupted one resumes from its last complete checkpoint; changed settings make a new folder. A
    finished run keeps its ``results.json``, ``dev_predictions.jsonl`` and export, and its checkpoints only
    with ``keep_checkpoints``. ``jobs``: runs trained at a time, each in its own process (on a CPU with its
    share of the threads); the scores do not depend on it.

    ``launcher``: ``"local"`` (the default) or ``"ray"``: each missing run one Ray task on the cluster at
    ``ray_address`` (``auto``, ``HOST:PORT``, ``ray://HOST:10001``; None starts Ray on this machine) with the
    grid's ``resources_per_run``; what a finished run keeps comes back into its folder here. Both replace the
    grid file's ``launcher`` and ``ray_address`` (docs/scaling-out.md). Runs that fail there are named, the
    others go on, and the comparison ends with a `pals_adapters.errors.PalsError` naming them.

    ``dry_run``: train nothing and write nothing; return (and print) the runs, which are done, and each
    row's parameters. ``print_commands`` (with ``dry_run``): also print each missing run as the
    ``pals-bench train`` command that makes it. ``report_only``: train nothing; report the runs that are
    done and name the missing ones.

    Writes ``comparison.json`` (``{"tasks", "reference", "rows": [{"name", "method", "base", "seeds",
    "runs": [{"seed", "run_dir", "scores", "seconds"}], "mean", "sd", "params_x_base", "search"}], "paired": {row:
    {task|"average": {"mean", "low", "high", "n", "interval"}}}}``, scores in points 0-100, paired as
    reference minus row with 95% intervals), ``comparison.md`` (printed too), ``comparison.csv`` and
    ``comparison.png`` in ``output_dir``, and returns the JSON data.
    """
    output_dir = Path(output_dir)
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ConfigError(f"jobs={jobs!r}: give the number of runs to train at a time, 1 or more")
    # the call as given, before anything changes its arguments
    call = command or python_call(config, output_dir, overrides, jobs, report_only, launcher, ray_address)
    grid = read_grid(config, overrides)
    check_output_folder(output_dir)
    launch = read_launch(grid.launch, grid.source, launcher, ray_address, jobs)
    if launch.on_ray and not (dry_run or report_only):
        require_ray()
    planned = plan_runs(grid, output_dir)  # every check; nothing written yet
    searches = plan_searches(grid, output_dir)  # each row's search and its trials, checked too
    if dry_run:
        return describe_plan(grid, planned, print_commands, searches, output_dir)
    check_report_files(output_dir)  # a report file compare did not write: refused before any training
    train = _launcher(launch, jobs)
    if searches:  # each row's settings chosen on its selection part, then its final runs planned with them
        _search(searches, grid, output_dir, train, report_only)
        grid, planned = _with_choices(grid, searches, output_dir)
    failed = []
    if report_only:
        _say_stale(planned)
    else:
        failed = train(planned, grid.keep_checkpoints)
    _say_missing_exports(planned)
    rows = collect_rows(grid, planned)
    specs = _all_specs(planned)
    paired, notes = paired_differences(rows, grid.reference, specs)
    glue_dir, source = grid.shared.get("glue_dir"), grid.shared.get("data_source", "auto")
    floor = {task: majority_score(spec, glue_dir, source, grid.max_eval_examples) for task, spec in specs.items()}
    data = comparison_data(grid.tasks, grid.reference, rows, paired, notes, floor, call, output_dir)
    add_search_records(data, searches, grid, output_dir)
    paths = write_report(data, rows, output_dir)
    print(markdown(data))
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    if failed:
        raise failed_runs_error(failed)
    return data


def python_call(config, output_dir, overrides, jobs: int, report_only: bool, launcher=None, ray_address=None) -> str:
    """The call as the report records it: ``compare('grid.yaml', 'out', overrides={...})``."""
    words = [repr(str(config)), repr(str(output_dir))]
    options = {"overrides": overrides or None, "jobs": jobs if jobs != 1 else None, "report_only": report_only or None}
    options.update(launcher=launcher, ray_address=ray_address)
    words += [f"{name}={value!r}" for name, value in options.items() if value is not None]
    return f"compare({', '.join(words)})"


def check_output_folder(output_dir: Path) -> None:
    """ConfigError before planning when the output folder or its ``runs`` folder is not a folder."""
    for folder in (output_dir, output_dir / "runs"):
        if folder.exists() and not folder.is_dir():
            raise ConfigError(
                f"{folder} is a file, not a folder: compare keeps its runs in {output_dir / 'runs'}; move the file "
                "away or choose another --output-dir"
            )


def _launcher(launch, jobs: int):
    """How runs train: ``train(runs, keep_checkpoints)`` returns the runs that failed (the Ray launcher goes on
    past a failed run; the local one stops at it)."""
    if launch.on_ray:
        from .ray_launcher import train_on_ray  # imports Ray

        return lambda runs, keep: train_on_ray(runs, keep, launch)

    def train_here(runs: list[PlannedRun], keep: bool) -> list:
        train_missing(runs, keep, jobs)
        return []

    return train_here


def _search(searches: list, grid: Grid, output_dir: Path, train, report_only: bool) -> None:
    """Every row's search run to its end by the grid's launcher (read only with ``report_only``, which needs
    them finished); a trial that fails stops the search, naming it."""
    if not report_only:

        def train_trials(runs: list[PlannedRun]) -> None:
            failed = train(runs, False)  # a trial's checkpoints: of no use once it is scored
            if failed:
                raise failed_runs_error(failed)

        run_searches(searches, grid, output_dir, train_trials)
        return
    read_studies(searches)
    for search in unfinished(searches):
        raise ConfigError(
            f"--report-only: the search of row {search.row.name!r} is not finished, so its final runs are not known "
            "yet; run compare without --report-only to finish it"
        )


def _with_choices(grid: Grid, searches: list, output_dir: Path) -> tuple[Grid, list[PlannedRun]]:
    chosen = with_choices(grid, searches)
    return chosen, plan_runs(chosen, output_dir)


def _say_stale(planned: list[PlannedRun]) -> None:
    for run in unique_runs(planned):
        if run.place is not None and run.place.previous is not None and run_state(run) == MISSING:
            print(
                f"compare: {run.row} seed {run.seed}: stale ({'; '.join(run.place.changed)}): the run in "
                f"{run.place.previous} is not reported; run compare without --report-only to train it afresh",
                file=sys.stderr,
                flush=True,
            )


def _say_missing_exports(planned: list[PlannedRun]) -> None:
    for run in unique_runs(planned):
        note = export_note(run) if run_state(run) == DONE else None
        if note:
            print(f"compare: {run.row} seed {run.seed}: {note}", file=sys.stderr, flush=True)


def _all_specs(planned: list[PlannedRun]) -> dict:
    specs: dict = {}
    for run in planned:
        specs.update(run.specs)
    return specs


def describe_plan(
    grid: Grid, planned: list[PlannedRun], print_commands: bool, searches: list = (), output_dir: Path = Path(".")
) -> dict:
    """The dry run: each row's search (its trials so far), each run's row, seed, state and folder (a searched
    row's once its search is finished), each row's parameters as a multiple of the base, and with
    ``print_commands`` the ``pals-bench train`` command of each run not done."""
    from ..methods.accounting import count_method_parameters

    read_studies(searches)
    searched = describe_searches(searches, grid, output_dir) if searches else {}
    pending = {search.row.name for search in unfinished(searches)}
    if searches:
        grid, planned = _with_choices(grid, searches, output_dir)  # a pending row's runs: not known yet
    runs = unique_runs([run for run in planned if run.row not in pending])
    states = {run.folder: run_state(run) for run in runs}
    words = {run.folder: state_words(run, states[run.folder]) for run in runs}
    rows = []
    print(f"{len(runs)} runs, {sum(s == DONE for s in states.values())} done; tasks: {', '.join(grid.tasks)}")
    for row in grid.rows:
        first = next(run for run in planned if run.row == row.name)
        method = "shared" if row.separate else first.config.method
        count = count_method_parameters(method, first.config.model, n_tasks=len(grid.tasks))
        multiple = count.multiplier + (len(grid.tasks) - 1 if row.separate else 0)
        mine = [run for run in planned if run.row == row.name and row.name not in pending]
        print(f"row {row.name!r}: {'separate' if row.separate else method}, about {multiple:.2f} x the base")
        if row.name in pending:
            print(f"  seeds {', '.join(map(str, row.seeds))}: trained once its search has chosen their settings")
        for run in mine:
            print(f"  seed {run.seed} {'+'.join(run.tasks)}: {words[run.folder]}  {run.folder}")
        rows.append({"name": row.name, "params_x_base": multiple, "runs": [_run_line(r, states) for r in mine]})
    if print_commands:
        print("\n# the runs not done, one command each (then: compare --report-only):")
        for run in runs:
            if states[run.folder] != DONE:
                print(train_command(run, resume=states[run.folder] == PARTIAL))
    return {"tasks": grid.tasks, "reference": grid.reference, "rows": rows, "search": searched}


def _run_line(run: PlannedRun, states: dict) -> dict:
    line = {"seed": run.seed, "tasks": run.tasks, "state": states[run.folder], "run_dir": str(run.folder)}
    if states[run.folder] == MISSING and run.place is not None and run.place.previous is not None:
        line.update(state="stale", previous=str(run.place.previous), changed=run.place.changed)
    return line


def state_words(run: PlannedRun, state: str) -> str:
    """A run's state as the dry run says it: ``done``, ``stale (train.csv changed; ...)``, ``damaged (...)``."""
    if state == MISSING and run.place is not None and run.place.previous is not None:
        return f"stale ({'; '.join(run.place.changed)}): trained afresh; the old run stays in {run.place.previous}"
    if state == DAMAGED:
        return f"damaged ({record_problem(run.folder, run.tasks)}): trained again"
    note = export_note(run) if state == DONE else None
    return f"{state} ({note})" if note else state


PATH_SETTINGS = ("output_dir", "task_file", "glue_dir", "deepspeed", "model")  # a model only as a folder


def train_command(run: PlannedRun, resume: bool = False) -> str:
    """The ``pals-bench train`` command that makes ``run`` in its folder (every setting off its default)."""
    words = ["pals-bench", "train"]
    defaults = RunConfig()
    for f in dataclasses.fields(RunConfig):
        value = getattr(run.config, f.name)
        if f.name == "resume" or (value == getattr(defaults, f.name) and f.name not in ("output_dir", "seed")):
            continue
        option = "--" + f.name.replace("_", "-")
        if f.name in PATH_SETTINGS and isinstance(value, str) and (f.name != "model" or Path(value).is_dir()):
            value = str(Path(value).resolve())  # the command runs from any folder
        if isinstance(value, bool):
            words.append(option if value else "--no-" + option[2:])
        elif isinstance(value, list):
            words += [option, *map(str, value)] if value else []
        elif value is not None:
            words += [option, str(value)]
    if resume:
        words += ["--resume", "last"]
    return shlex.join(words)


__all__ = ["SEPARATE", "compare", "train_command"]
