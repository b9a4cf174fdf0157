"""The output folder of a run: one run at a time (a file lock), the record of what its checkpoints
are (written once, never overwritten), and resuming only the run that made them.

A resumed run must have the settings of the run it continues: its checkpoints hold that run's
optimizer, schedule and sampler position, so any other setting would silently give a result that
belongs to neither. Only the settings in `MAY_CHANGE_ON_RESUME` may differ; they are reported.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from collections.abc import Iterator
from dataclasses import asdict, fields
from pathlib import Path

from filelock import FileLock, Timeout

from ...errors import ConfigError
from ..checks import resolve_task_names
from ..export.staging import check_replaceable
from ..methods.method import current_name
from ..run_config import RunConfig
from ..tasks.spec import TaskSpec, spec_to_json
from ..tasks.user_tasks import comparable_spec
from .checkpoints import RUN_CONFIG, RUN_TASKS, checkpoint_problem, last_complete_checkpoint, list_checkpoints

logger = logging.getLogger(__name__)

LOCK_FILE = ".pals-bench.lock"
# Settings that change what is logged or written at the end, or how fast it runs, never the numbers of the
# run (the thread count can change the last bits of float sums, no more).
MAY_CHANGE_ON_RESUME = ("logging_steps", "report_to", "export", "threads")
# Where the run is, not what it is.
NOT_COMPARED = ("resume", "output_dir", "overwrite")
RESULTS = "results.json"  # written last: a folder with it holds a finished run
# What a run leaves in its folder besides checkpoints and export: removed by overwrite.
RUN_FILES = (RESULTS, "training.png", RUN_CONFIG, RUN_TASKS)


class RunInUse(ConfigError):
    """Another process holds the run folder's lock."""


@contextlib.contextmanager
def run_lock(output_dir: str | Path, wait: bool = False) -> Iterator[None]:
    """Holds ``<output_dir>/.pals-bench.lock`` for the block; a second run into the same folder is refused
    at once (`RunInUse`), or waits for it with ``wait``. The lock is the operating system's (released when the
    process dies, even by kill -9); within one process it is taken again freely (compare holds a run's lock
    around the run, which takes it too)."""
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str((folder / LOCK_FILE).resolve()), is_singleton=True)
    try:
        lock.acquire(timeout=-1 if wait else 0)
    except Timeout:
        raise RunInUse(
            f"output_dir {folder} is in use by another run (it holds {folder / LOCK_FILE}); wait for that run to "
            "finish, or choose another output_dir"
        ) from None
    try:
        yield
    finally:
        lock.release()


# Settings whose default depends on the base, by what a run recorded before they existed did: such a run
# resumes with the behaviour it trained with (an explicit --no-... then matches its record).
BEFORE_THE_SETTING = {"standardise_targets": False, "scale_shared_lr": False}


def _comparable(settings: dict) -> dict:
    """The settings as the run used them: task names resolved (SST-2 is sst2), defaults for fields an
    older record lacks, a method by its current name (a run of ``top_pals`` resumes as ``attention_on_top``)."""
    values = {f.name: settings.get(f.name, BEFORE_THE_SETTING.get(f.name, _default(f))) for f in fields(RunConfig)}
    values["method"] = current_name(values["method"])
    with contextlib.suppress(Exception):  # a task file that is gone: compare the names as written
        values["tasks"] = list(resolve_task_names(values["tasks"], values["task_file"]))
    return values


def _default(f):
    return f.default_factory() if callable(f.default_factory) else f.default


def setting_differences(recorded: dict, config: RunConfig) -> tuple[list[str], list[str]]:
    """(differences that change the run, differences that may change on resume), as readable lines."""
    old, new = _comparable(recorded), _comparable(asdict(config))
    refused, allowed = [], []
    for name in old:
        if name not in NOT_COMPARED and old[name] != new[name]:
            line = f"{name}: run {old[name]!r}, now {new[name]!r}"
            (allowed if name in MAY_CHANGE_ON_RESUME else refused).append(line)
    return refused, allowed


def _task_differences(recorded: dict, specs: dict[str, TaskSpec]) -> list[str]:
    now = {name: spec_to_json(spec) for name, spec in specs.items()}
    lines = []
    for name in sorted(set(recorded) | set(now)):
        before, after = recorded.get(name), now.get(name)
        # the same files however the record wrote them (absolute, or relative to the task file's folder)
        before, after = (comparable_spec(s) if isinstance(s, dict) else s for s in (before, after))
        if before is None or after is None:
            continue  # a task added or removed shows in the 'tasks' setting
        for key in sorted(set(before) | set(after)):
            if before.get(key) != after.get(key):
                lines.append(f"task {name!r} {key}: run {before.get(key)!r}, now {after.get(key)!r}")
    return lines


def _read_record(folder: Path) -> tuple[dict, dict | None]:
    path = folder / RUN_CONFIG
    if not path.is_file():
        raise ConfigError(
            f"{path} is missing: the settings of the run that wrote the checkpoints of {folder} are unknown, so "
            "resuming cannot be checked; start a new run in another output_dir"
        )
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
        tasks_path = folder / RUN_TASKS
        tasks = json.loads(tasks_path.read_text(encoding="utf-8")) if tasks_path.is_file() else None
    except (OSError, ValueError) as err:
        raise ConfigError(f"{folder}: the run's record cannot be read ({err}); start a new run elsewhere") from err
    if not isinstance(settings, dict):
        raise ConfigError(f"{path}: not a record of run settings; start a new run elsewhere")
    return settings, tasks


MODEL_FOLDER = "model_folder"  # in run_config.json: where the model given as a relative folder is


def write_record(folder: Path, config: RunConfig, specs: dict[str, TaskSpec]) -> None:
    """``run_config.json`` and ``run_tasks.json``: what the run's checkpoints are (for resume and export). A model
    given as a local folder is also recorded as the absolute path that finds it again from any directory (in
    this local record only: exports record the folder by its path from the export)."""
    folder.mkdir(parents=True, exist_ok=True)
    settings = asdict(config)
    if config.model and Path(config.model).is_dir():
        settings[MODEL_FOLDER] = str(Path(config.model).resolve())
    for name, data in ((RUN_CONFIG, settings), (RUN_TASKS, {n: spec_to_json(s) for n, s in specs.items()})):
        tmp = folder / f".{name}.tmp-{os.getpid()}"
        tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
        os.replace(tmp, folder / name)  # a crash never leaves half a record


def _remove_run(out: Path, checkpoints: list[Path]) -> None:
    """overwrite: the replaced run's results, record and checkpoints go before the new run writes its own
    (its export stays until the new one is swapped in whole at the end)."""
    if checkpoints or any((out / name).exists() for name in RUN_FILES):
        logger.warning("overwrite: replacing the run in %s (its results, record and checkpoints)", out)
    for checkpoint in checkpoints:
        shutil.rmtree(checkpoint)
    for name in RUN_FILES:
        (out / name).unlink(missing_ok=True)


def prepare_run_folder(config: RunConfig, specs: dict[str, TaskSpec], *, writer: bool = True) -> str | None:
    """Checks that ``config`` may start or resume in its output_dir and writes the record of a new run
    (``writer``: the process that writes files). Returns the checkpoint to resume from, or None.

    A new run into a folder that holds checkpoints is refused (they would mix with the new ones); a
    resumed run must have the settings of the run it continues (see the module docstring).
    """
    out = Path(config.output_dir)
    if config.export:
        check_replaceable(out / "export")  # refused now, not after the training
    if config.resume is None:
        existing = list_checkpoints(out)
        if config.overwrite:
            if writer:
                _remove_run(out, existing)
        elif (out / RESULTS).is_file():
            raise ConfigError(
                f"output_dir {out} holds a finished run ({RESULTS}, {RUN_CONFIG}"
                + (", export" if (out / "export").is_dir() else "")
                + "); a new run there would replace it. Choose a new output_dir, continue it with --resume last "
                "(if it has checkpoints), or pass --overwrite to replace it"
            )
        elif existing:
            names = ", ".join(p.name for p in existing[:3]) + (" ..." if len(existing) > 3 else "")
            raise ConfigError(
                f"output_dir {out} already holds checkpoints of a run ({names}); continue it with resume='last' "
                "(--resume last), or choose a new output_dir (or delete them) to start afresh"
            )
        if writer:
            write_record(out, config, specs)
        return None

    checkpoint = last_complete_checkpoint(out) if config.resume == "last" else config.resume
    source = Path(checkpoint).resolve().parent
    recorded, recorded_tasks = _read_record(source)
    refused, allowed = setting_differences(recorded, config)
    if recorded_tasks is not None:
        refused += _task_differences(recorded_tasks, specs)
    if refused:
        raise ConfigError(
            f"resume: {checkpoint} was written by a run with other settings: "
            + "; ".join(refused)
            + f". Resume with the run's own settings (see {source / RUN_CONFIG}), or start a new run in "
            "another output_dir to change them"
        )
    if config.resume != "last":
        problem = checkpoint_problem(checkpoint)
        if problem:
            raise ConfigError(f"resume={checkpoint!r}: this checkpoint does not load ({problem}); give another one")
    if allowed:
        logger.warning("resume: these settings differ from the run's and change no result: %s", "; ".join(allowed))
    if writer and source != out.resolve():
        if list_checkpoints(out):
            raise ConfigError(f"output_dir {out} holds checkpoints of another run; resume into a new output_dir")
        write_record(out, config, specs)
    return checkpoint
