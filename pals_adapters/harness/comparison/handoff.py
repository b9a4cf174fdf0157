"""From a comparison to a hand-off: the export of one row's run (``pals-bench compare ... --export ROW``), its
card saying which comparison it came from and its scores there.

The row's runs are read as they are on disk (trained by ``compare``, or reported with ``--report-only``):
nothing is trained. The run's own export is loaded (every file checked) and written again at ``out``, so that
every path the export records (its data, its base) is seen from its new place.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import statistics
from pathlib import Path

from ...errors import ConfigError
from ..export import export_run, load_tasks, load_tokenizer, read_task_manifest
from ..export.library_heads import base_location
from ..export.manifest import manifest_contents
from ..export.staging import check_replaceable
from ..training.export_checkpoint import recorded_run
from .collect import collect_rows
from .grid import plan_runs, read_grid
from .reporting.rows import FinishedRun, RowResult
from .search.trials import with_searched_settings


def export_row(
    config: str | Path,
    output_dir: str | Path,
    row: str,
    out: str | Path,
    *,
    seed: int | None = None,
    with_base: bool = False,
    overrides: dict | None = None,
    command: str | None = None,
) -> dict[str, Path]:
    """Writes the export of row ``row`` of the comparison (grid file ``config``, runs in ``output_dir``) to
    ``out``: the run of ``seed``, else of the seed whose average is closest to the row's mean (the lowest such
    seed on a tie). Every task's card says which comparison, row and seed it came from and its scores there.
    ``with_base``: a frozen base is written into the export too, so that it loads with no hub. A row of
    ``separate`` models gives one export per task, ``out/<task>/`` (each with its own fine-tuned base).
    ``overrides``: the shared settings `compare` was given (they decide which runs are the row's).

    Trains nothing: ConfigError names the rows for an unknown row, the seeds for a seed the row has not, and
    the runs not finished (train them with ``pals-bench compare``). Returns ``{task or "base": folder}``."""
    grid = read_grid(config, overrides)
    names = [r.name for r in grid.rows]
    if row not in names:
        raise ConfigError(f"--export {row!r}: {grid.source} has no such row; its rows: {', '.join(map(repr, names))}")
    grid = with_searched_settings(grid, Path(output_dir), row)  # a searched row's runs: what its search chose
    planned = plan_runs(grid, output_dir)
    seeds = sorted({run.seed for run in planned if run.row == row})
    if seed is not None and seed not in seeds:
        raise ConfigError(f"--seed {seed}: row {row!r} has no run of that seed; its seeds: {seeds}")
    result = next(r for r in collect_rows(grid, planned) if r.name == row)
    of_seed = [str(run.folder) for run in planned if run.row == row and run.seed == seed]
    chosen = _chosen_seed(result, seed, [f for f in result.missing if f in of_seed], grid.source, output_dir)
    runs = [run for run in result.runs if run.seed == chosen]
    origin = _origin(result, chosen, grid.source, output_dir, command)
    out = Path(out)
    if not result.separate:
        return _export_run(runs[0], out, with_base, origin)
    _check_separate_out(out, result.tasks)
    written = {}
    for run in runs:  # one fine-tuned model per task: each its own export, with its own base
        for name, path in _export_run(run, out / run.tasks[0], with_base, origin).items():
            written[name if name != "base" else f"{run.tasks[0]}/base"] = path
    return written


def _chosen_seed(result: RowResult, seed: int | None, missing: list[str], grid: str, output_dir) -> int:
    """The seed given (finished), else the finished seed whose average is closest to the row's mean."""
    again = f"pals-bench compare --config {grid} --output-dir {output_dir}"
    if seed is not None and seed not in result.seeds:
        folders = missing or result.missing
        raise ConfigError(
            f"row {result.name!r} seed {seed} is not finished (e.g. {folders[0]}); train it first: {again} "
            "(it resumes an interrupted run), then export"
        )
    if not result.runs:
        raise ConfigError(
            f"row {result.name!r} has no finished run yet (e.g. {result.missing[0]}); train it first: {again}"
        )
    if seed is not None:
        return seed
    per_seed = result.seed_scores()
    mean = statistics.fmean(scores["average"] for scores in per_seed.values())
    return min(per_seed, key=lambda s: (abs(per_seed[s]["average"] - mean), s))


def _origin(result: RowResult, seed: int, grid: str, output_dir, command: str | None) -> dict:
    """What a card says of the comparison: its folder and grid file by name, the row, its seeds, this run's
    scores and the row's mean over seeds (points)."""
    per_seed = result.seed_scores()
    keys = [*result.tasks, "average"]
    given = command or f"pals-bench compare --config {grid} --output-dir {output_dir}"
    # local folders by their name, as a card shows them (never a path of this machine)
    given = shlex.join(Path(word).name if os.path.isabs(word) else word for word in shlex.split(given))
    return {
        "comparison": Path(output_dir).resolve().name,
        "grid": Path(grid).name,
        "command": given,
        "row": result.name,
        "seed": seed,
        "seeds": result.seeds,
        "tasks": list(result.tasks),
        "scores": {key: per_seed[seed][key] for key in keys},
        "row_mean": {key: statistics.fmean(scores[key] for scores in per_seed.values()) for key in keys},
    }


def _run_export(run: FinishedRun) -> list[Path]:
    """The task folders of a finished run's export; ConfigError saying how to get one where the run kept none."""
    export_dir = run.folder / "export"
    folders = [p for p in sorted(export_dir.iterdir()) if manifest_contents(p) == "task"] if export_dir.is_dir() else []
    if not folders:
        raise ConfigError(
            f"{export_dir}: the run kept no export (its grid sets export: false, or the folder was removed). If the "
            f"run kept its checkpoints (keep_checkpoints: true): pals-bench export {run.folder} --out DIR. Else train "
            "the row again with exports (remove export: false from the grid; the runs are new folders then)"
        )
    return folders


def _export_run(run: FinishedRun, out: Path, with_base: bool, origin: dict) -> dict[str, Path]:
    """The run's export loaded (every file checked) and written at ``out`` with its card's comparison section."""
    folders = _run_export(run)
    check_replaceable(out)  # before anything loads: an export replaces its whole folder
    manifests = {folder.name: read_task_manifest(folder) for folder in folders}
    first = manifests[folders[0].name]
    run_config, _, model_source = recorded_run(run.folder)
    model = load_tasks(folders)
    tokenizer = load_tokenizer(folders)
    evaluation = first.evaluation
    if evaluation is not None and run_config.glue_dir:  # the GLUE folder the run scored on, as the run gave it
        evaluation = dataclasses.replace(evaluation, glue_dir=os.path.abspath(run_config.glue_dir))
    exported = export_run(
        model,
        out,
        base_model_name=base_location(first.base_model_name, folders[0]) or model_source,
        metrics_by_task={name: manifest.metrics for name, manifest in manifests.items()},
        tokenizer=tokenizer,
        max_length=first.max_length,
        evaluation=evaluation,
        run_config=run_config,
        with_base=with_base,
        origin=origin,
    )
    return exported


def _check_separate_out(out: Path, tasks: list[str]) -> None:
    """A row of separate models writes ``out/<task>/`` per task: ``out`` must hold nothing else."""
    if not out.exists():
        return
    if not out.is_dir():
        raise ConfigError(f"--out {out} is a file; give a folder for the exports (one per task)")
    foreign = sorted(p.name for p in out.iterdir() if p.name not in tasks and not p.name.startswith("."))
    if foreign:
        raise ConfigError(
            f"--out {out} holds {', '.join(foreign[:4])}, which are not exports of this row's tasks ({tasks}); "
            "choose an empty or new folder"
        )


__all__ = ["export_row"]
