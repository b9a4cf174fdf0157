"""Training the runs of a grid: which are done, resuming the interrupted ones from their last complete
checkpoint, N runs at a time in N processes, and dropping a finished run's checkpoints."""

from __future__ import annotations

import copy
import ctypes
import json
import logging
import multiprocessing
import os
import shutil
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path

from ...errors import ConfigError
from ..training.checkpoints import RUN_CONFIG, last_complete_checkpoint, list_checkpoints
from ..training.run_folder import LOCK_FILE, RunInUse, run_lock
from .grid import PlannedRun
from .naming import IDENTITY_FILE, write_identity

logger = logging.getLogger(__name__)

RESULTS_FILE = "results.json"
DAMAGED_SUFFIX = ".damaged"  # a results.json that does not parse is kept under this suffix, and the run redone
DONE, PARTIAL, MISSING, DAMAGED = "done", "partial", "missing", "damaged"
# What compare itself leaves in a run folder before the run starts: no sign of a started run.
NOT_A_START = (LOCK_FILE, IDENTITY_FILE)


def record_problem(folder: Path, tasks: list[str]) -> str | None:
    """Why the run record ``results.json`` of ``folder`` cannot be reported (cut short, empty, a task's score
    missing), or None when it can."""
    try:
        record = json.loads((folder / RESULTS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        return f"{RESULTS_FILE} does not parse ({type(err).__name__}: {err})"
    if not isinstance(record, dict) or not record:
        return f"{RESULTS_FILE} holds no run record"
    metrics = record.get("metrics")
    missing = [key for key in ("metrics", "parameters", "log_history") if key not in record]
    if not missing and isinstance(metrics, dict):
        missing = [f"metrics.{t}_score" for t in tasks if not isinstance(metrics.get(f"{t}_score"), (int, float))]
    return f"{RESULTS_FILE} lacks {', '.join(missing)}" if missing else None


def run_state(run: PlannedRun) -> str:
    """done (a run record that reads), damaged (a record that does not), partial (checkpoints or files of a
    started run) or missing."""
    if (run.folder / RESULTS_FILE).is_file():
        return DAMAGED if record_problem(run.folder, run.tasks) else DONE
    if run.folder.is_dir() and any(p.name not in NOT_A_START for p in run.folder.iterdir()):
        return PARTIAL
    return MISSING


def export_note(run: PlannedRun) -> str | None:
    """What a finished run lacks of what the grid now asks for (an export, when it was trained with export:
    false), and how to get it; None when it lacks nothing. Whether a run exports changes none of its scores,
    so the run is not trained again for it."""
    if not run.config.export or (run.folder / "export").is_dir():
        return None
    last = next((c for c in list_checkpoints(run.folder) if c.name == f"checkpoint-{run.config.max_steps}"), None)
    how = (
        f"pals-bench export {run.folder.resolve()} --checkpoint {last.resolve()}"
        if last is not None
        else f"its weights were not kept: delete {run.folder.resolve()} and run compare again to train it with one"
    )
    return f"no export (trained with export: false); to get one: {how}"


def unique_runs(planned: list[PlannedRun]) -> list[PlannedRun]:
    """One run per folder (two rows of the same settings share their runs)."""
    seen: dict[Path, PlannedRun] = {}
    for run in planned:
        seen.setdefault(run.folder, run)
    return list(seen.values())


BUSY = "busy"  # train_one's answer when another process holds the run (and it was not to wait)


def train_one(run: PlannedRun, keep_checkpoints: bool, callbacks=(), wait: bool = True) -> dict | str:
    """One run into its folder, all of it under the run's lock (a second compare on the same folder never
    touches a live run's files): read if another process finished it meanwhile, else resumed from its last
    complete checkpoint if it has one; its checkpoints removed once its results are written unless
    ``keep_checkpoints``. Returns a short record of it, or `BUSY` when another process holds the run and
    not ``wait``."""
    folder = run.folder
    try:
        with run_lock(folder, wait=wait):
            return _train_locked(run, keep_checkpoints, callbacks)
    except RunInUse:
        return BUSY


def _train_locked(run: PlannedRun, keep_checkpoints: bool, callbacks) -> dict:
    from ..training.runner import run as train  # here: a worker process imports the training stack once

    config, folder = copy.deepcopy(run.config), run.folder
    state = run_state(run)
    if state == DONE:  # another compare finished it while this one waited
        return record_of_finished(run)
    if state == DAMAGED:
        problem = record_problem(folder, run.tasks)
        (folder / RESULTS_FILE).replace(folder / (RESULTS_FILE + DAMAGED_SUFFIX))
        _say(
            f"{folder}: {problem}: not a finished run; it is trained again (the file is kept as "
            f"{RESULTS_FILE + DAMAGED_SUFFIX})"
        )
    if run.place is not None:
        write_identity(run.place)
    if list_checkpoints(folder):
        try:
            config.resume = last_complete_checkpoint(folder)
        except ConfigError:  # only checkpoints cut short while saving: nothing to go on from
            for broken in list_checkpoints(folder):
                shutil.rmtree(broken)
            _say(f"{folder}: no complete checkpoint to resume from; the run starts again")
    if config.resume is not None:  # the cadence the run checkpointed with (checkpoints change no score)
        recorded = _recorded_settings(folder)
        for name in ("save_steps", "save_total_limit"):
            if name in recorded:
                setattr(config, name, recorded[name])
    results = train(config, callbacks)
    if not keep_checkpoints:
        for checkpoint in list_checkpoints(folder):
            shutil.rmtree(checkpoint)
    return _record(folder, results, resumed=config.resume is not None, trained=True)


def record_of_finished(run: PlannedRun) -> dict:
    """The short record of a run another process trained and finished."""
    results = json.loads((run.folder / RESULTS_FILE).read_text(encoding="utf-8"))
    return _record(run.folder, results, resumed=False, trained=False)


def _recorded_settings(folder: Path) -> dict:
    try:
        recorded = json.loads((folder / RUN_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # the resume check then says what is wrong
    return recorded if isinstance(recorded, dict) else {}


def _record(folder: Path, results: dict, resumed: bool, trained: bool) -> dict:
    return {
        "folder": str(folder),
        "average": results["metrics"]["average"],
        "seconds": results.get("wall_seconds"),
        "resumed": resumed,
        "trained": trained,
    }


def _say(line: str) -> None:
    print(f"compare: {line}", file=sys.stderr, flush=True)


class Progress:
    """The grid's progress line: runs done of all, the current run's step (runs trained in this process),
    the last run's score and time, the time left."""

    EVERY = 30  # seconds between two step lines

    def __init__(self, total: int, already: int, jobs: int, stream=None):
        self.total, self.done, self.jobs = total, already, jobs
        self.started, self.trained = time.time(), 0
        self.stream = stream or sys.stdout
        self.run_started = self.last_line = 0.0

    def at_step(self, run: PlannedRun, step: int, max_steps: int) -> None:
        now = time.time()
        if now - self.last_line < self.EVERY or not max_steps:
            return
        self.last_line = now
        this_run = (now - self.run_started) / max(step, 1) * max_steps  # the current run's whole time, as it goes
        per_run = (self.run_started - self.started) / self.trained if self.trained else this_run
        left = this_run - (now - self.run_started) + per_run * (self.total - self.done - 1) / self.jobs
        print(
            f"compare: {self.done}/{self.total} runs done; {run.row} seed {run.seed} at step {step}/{max_steps}; "
            f"about {_duration(left)} left",
            file=self.stream,
            flush=True,
        )

    def step_callback(self, run: PlannedRun):
        """A Trainer callback that reports the run's steps on the grid's line."""
        from transformers import TrainerCallback

        progress = self

        class GridStep(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                progress.at_step(run, state.global_step, state.max_steps)

        self.run_started = self.last_line = time.time()
        return GridStep()

    def starting(self, run: PlannedRun) -> None:
        place = run.place
        if place is not None and place.previous is not None:
            finished = (place.previous / RESULTS_FILE).is_file()
            self._line(
                f"{run.row} seed {run.seed}: the {'finished' if finished else 'interrupted'} run in {place.previous} "
                f"had other inputs ({'; '.join(place.changed)}); "
                + ("training it afresh" if finished else "not resuming it, training afresh")
            )
        self._line(f"training {run.row} seed {run.seed} -> {run.folder}")

    def held(self, run: PlannedRun) -> None:
        self._line(f"{run.row} seed {run.seed}: another process is training {run.folder}; waiting for it last")

    def _line(self, text: str) -> None:
        print(f"compare: {text}", file=self.stream, flush=True)

    def finished(self, run: PlannedRun, record: dict) -> None:
        self.done += 1
        self.trained += 1
        left = self.total - self.done
        per_run = (time.time() - self.started) / self.trained
        eta = f"; about {_duration(per_run * left / self.jobs)} left" if left else ""
        resumed = ", resumed" if record["resumed"] else "" if record.get("trained", True) else ", by another process"
        print(
            f"compare: {self.done}/{self.total} runs done ({run.row} seed {run.seed}: average "
            f"{100 * record['average']:.1f} in {record['seconds'] or 0:.0f} s{resumed}){eta}",
            file=self.stream,
            flush=True,
        )


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def train_missing(runs: list[PlannedRun], keep_checkpoints: bool, jobs: int = 1) -> None:
    """Trains every run of ``runs`` that is not done, ``jobs`` at a time (each in its own process when
    ``jobs`` > 1, with its share of the CPU threads unless the run sets ``threads``). A run another process
    holds (a second compare on the same folder) is left to it and waited for once the others are done."""
    runs = unique_runs(runs)
    todo = [run for run in runs if run_state(run) != DONE]
    progress = Progress(len(runs), len(runs) - len(todo), jobs)
    if not todo:
        return
    if jobs == 1:
        held = []
        for run in todo:
            progress.starting(run)
            record = train_one(run, keep_checkpoints, [progress.step_callback(run)], wait=False)
            if record == BUSY:
                progress.held(run)
                held.append(run)
            else:
                progress.finished(run, record)
        for run in held:
            progress.finished(run, train_one(run, keep_checkpoints, [progress.step_callback(run)], wait=True))
        return
    threads = max(1, len(os.sched_getaffinity(0)) // jobs) if hasattr(os, "sched_getaffinity") else 1
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked torch threads
    with ProcessPoolExecutor(jobs, mp_context=context, initializer=_worker_start, initargs=(threads,)) as pool:
        pending = {}
        for run in todo:
            progress.starting(run)
            pending[pool.submit(train_one, run, keep_checkpoints, wait=False)] = run
        try:
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    run, record = pending.pop(future), future.result()
                    if record == BUSY:  # queued behind the others: it waits for the lock in its turn
                        progress.held(run)
                        pending[pool.submit(train_one, run, keep_checkpoints, wait=True)] = run
                    else:
                        progress.finished(run, record)
        except BaseException:  # Ctrl-C, SIGTERM, a failed run: the workers stop with the command
            for future in pending:
                future.cancel()
            for process in list((getattr(pool, "_processes", None) or {}).values()):
                process.kill()  # its run stays as its last complete checkpoint left it
            raise


def _worker_start(threads: int) -> None:
    """A worker process: its share of the threads, and it ends with the command (even a kill -9 of it),
    so that no orphan keeps training while holding its run's lock."""
    import torch
    from tqdm import tqdm

    torch.set_num_threads(threads)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the command answers it
    # progress bars locked within the worker: tqdm's default lock is a semaphore of the system, which a worker
    # stopped by the command would leave behind (and Python would warn of at exit)
    tqdm.set_lock(threading.RLock())
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
