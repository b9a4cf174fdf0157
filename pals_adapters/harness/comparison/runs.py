"""Training the runs of a grid: which are done, resuming the interrupted ones from their last complete
checkpoint, N runs at a time in N processes, and dropping a finished run's checkpoints."""

from __future__ import annotations

import copy
import ctypes
import logging
import multiprocessing
import os
import shutil
import signal
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path

from ...errors import ConfigError
from ..run_config import RunConfig
from ..training.checkpoints import last_complete_checkpoint, list_checkpoints
from .grid import PlannedRun

logger = logging.getLogger(__name__)

RESULTS_FILE = "results.json"
DONE, PARTIAL, MISSING = "done", "partial", "missing"


def run_state(run: PlannedRun) -> str:
    """done (results written), partial (checkpoints or a record of a started run) or missing."""
    if (run.folder / RESULTS_FILE).is_file():
        return DONE
    if run.folder.is_dir() and (list_checkpoints(run.folder) or any(run.folder.iterdir())):
        return PARTIAL
    return MISSING


def unique_runs(planned: list[PlannedRun]) -> list[PlannedRun]:
    """One run per folder (two rows of the same settings share their runs)."""
    seen: dict[Path, PlannedRun] = {}
    for run in planned:
        seen.setdefault(run.folder, run)
    return list(seen.values())


def train_one(config: RunConfig, keep_checkpoints: bool, callbacks=()) -> dict:
    """One run into its folder: resumed from its last complete checkpoint if it has one; its checkpoints
    removed once its results are written unless ``keep_checkpoints``. Returns a short record of it."""
    from ..training.runner import run  # here: a worker process imports the training stack once

    config = copy.deepcopy(config)
    folder = Path(config.output_dir)
    if list_checkpoints(folder):
        try:
            config.resume = last_complete_checkpoint(folder)
        except ConfigError:  # only checkpoints cut short while saving: nothing to go on from
            for broken in list_checkpoints(folder):
                shutil.rmtree(broken)
            logger.warning("%s: no complete checkpoint to resume from; the run starts again", folder)
    results = run(config, callbacks)
    if not keep_checkpoints:
        for checkpoint in list_checkpoints(folder):
            shutil.rmtree(checkpoint)
    return {
        "folder": str(folder),
        "average": results["metrics"]["average"],
        "seconds": results.get("wall_seconds"),
        "resumed": config.resume is not None,
    }


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
        print(f"compare: training {run.row} seed {run.seed} -> {run.folder}", file=self.stream, flush=True)

    def finished(self, run: PlannedRun, record: dict) -> None:
        self.done += 1
        self.trained += 1
        left = self.total - self.done
        per_run = (time.time() - self.started) / self.trained
        eta = f"; about {_duration(per_run * left / self.jobs)} left" if left else ""
        resumed = ", resumed" if record["resumed"] else ""
        print(
            f"compare: {self.done}/{self.total} runs done ({run.row} seed {run.seed}: average "
            f"{100 * record['average']:.1f} in {record['seconds']:.0f} s{resumed}){eta}",
            file=self.stream,
            flush=True,
        )


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def train_missing(runs: list[PlannedRun], keep_checkpoints: bool, jobs: int = 1) -> None:
    """Trains every run of ``runs`` that is not done, ``jobs`` at a time (each in its own process when
    ``jobs`` > 1, with its share of the CPU threads unless the run sets ``threads``)."""
    runs = unique_runs(runs)
    todo = [run for run in runs if run_state(run) != DONE]
    progress = Progress(len(runs), len(runs) - len(todo), jobs)
    if not todo:
        return
    if jobs == 1:
        for run in todo:
            progress.starting(run)
            progress.finished(run, train_one(run.config, keep_checkpoints, [progress.step_callback(run)]))
        return
    threads = max(1, len(os.sched_getaffinity(0)) // jobs) if hasattr(os, "sched_getaffinity") else 1
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked torch threads
    with ProcessPoolExecutor(jobs, mp_context=context, initializer=_worker_start, initargs=(threads,)) as pool:
        pending = {}
        for run in todo:
            progress.starting(run)
            pending[pool.submit(train_one, run.config, keep_checkpoints)] = run
        try:
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    progress.finished(pending.pop(future), future.result())
        except BaseException:
            for future in pending:
                future.cancel()
            raise


def _worker_start(threads: int) -> None:
    """A worker process: its share of the threads, and it ends with the command (even a kill -9 of it),
    so that no orphan keeps training while holding its run's lock."""
    import torch

    torch.set_num_threads(threads)
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
