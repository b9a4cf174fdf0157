"""A grid's missing runs on a Ray cluster: one Ray task per run with the grid's resources, placed by Ray on
any node that has them. The node trains in its scratch space (or in the folder every node mounts, where the
grid names one, so that a run cut off with its node resumes on another) and sends back what a finished
run keeps; the driver writes it into ``OUTPUT_DIR/runs/<run>`` as a local run would have, and only plans,
waits and reports.

Imported only when the launcher is Ray: importing it imports Ray. Nodes import it to run a task."""

from __future__ import annotations

import io
import json
import logging
import os
import platform
import shutil
import socket
import tarfile
import tempfile
import uuid
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import ray
from ray.exceptions import RayError, RayTaskError

from ...errors import ConfigError
from ..training.run_folder import RunInUse, run_lock
from .grid import PlannedRun
from .launch import FailedRun, Launch
from .runs import DONE, RESULTS_FILE, Progress, record_of_finished, run_state, train_one, unique_runs

PLACEMENT_KEY = "placement"  # results.json: where the run trained, with what


def train_on_ray(planned: list[PlannedRun], keep_checkpoints: bool, launch: Launch) -> list[FailedRun]:
    """Trains every run of ``planned`` that is not done on the Ray cluster of ``launch`` and writes each
    into its folder once it is finished; returns the runs that failed (the others went on)."""
    runs = unique_runs(planned)
    todo = [run for run in runs if run_state(run) != DONE]
    if not todo:
        return []
    started_here = not ray.is_initialized()  # a caller's own Ray session is used, and left open
    if started_here:
        _connect(launch.ray_address)
    try:
        at_once = check_resources(launch)  # before any run is placed, or any folder made
        with ExitStack() as claims:
            mine, held = claim(todo, claims)
            where = launch.ray_address or "a Ray instance started on this machine"
            print(
                f"compare: {len(todo)} runs on {where}, each with {_describe(_asked(launch))}; "
                f"up to {at_once} at a time",
                flush=True,
            )
            progress = Progress(len(runs), len(runs) - len(todo), at_once)
            for run in held:
                progress.held(run)
            failed = _train(mine, keep_checkpoints, launch, progress)
            rest = []
            for run in held:  # another compare's runs, once it lets go of them: what it left unfinished
                claims.enter_context(run_lock(run.folder, wait=True))
                _remove_leftovers(run)
                if run_state(run) == DONE:
                    progress.finished(run, record_of_finished(run))
                else:
                    rest.append(run)
            return failed + _train(rest, keep_checkpoints, launch, progress)
    finally:
        if started_here:
            ray.shutdown()


def claim(todo: list[PlannedRun], claims: ExitStack) -> tuple[list[PlannedRun], list[PlannedRun]]:
    """The runs of ``todo`` whose lock this driver now holds (in ``claims``: until they are written back, so
    that a second compare on the folder leaves a run alone while a node trains it), and those another process
    holds."""
    mine, held = [], []
    for run in todo:
        try:
            claims.enter_context(run_lock(run.folder))
        except RunInUse:
            held.append(run)
            continue
        mine.append(run)
        _remove_leftovers(run)
    return mine, held


def _remove_leftovers(run: PlannedRun) -> None:
    """What a driver killed while writing the run left beside its folder (only ever touched under its lock)."""
    for stale in run.folder.parent.glob(f".{run.folder.name}.*-*"):
        shutil.rmtree(stale, ignore_errors=True)


def _connect(address: str | None) -> None:
    try:
        ray.init(address=address, logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise ConfigError(
            f"ray_address={address!r}: cannot connect to a Ray cluster there ({err}); start one (ray start --head) "
            "or give its address (auto, HOST:PORT, ray://HOST:10001)"
        ) from None


def _asked(launch: Launch) -> dict[str, float]:
    return {"CPU": launch.cpus, **({"GPU": launch.gpus} if launch.gpus else {})}


def _describe(resources: dict) -> str:
    return ", ".join(f"{resources.get(name, 0):g} {name}" for name in ("CPU", "GPU"))


def check_resources(launch: Launch) -> int:
    """How many runs the cluster's nodes hold at a time; ConfigError naming what a run asks and what the
    cluster has where no node can take one (the run would wait for ever)."""
    asked = _asked(launch)
    nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
    at_once = sum(min(int(res.get(name, 0) // need) for name, need in asked.items()) for res in nodes)
    if at_once == 0:
        raise ConfigError(
            f"resources_per_run asks {_describe(asked)} for each run, but no node of the Ray cluster has them: "
            f"the cluster has {_describe(ray.cluster_resources())} on {len(nodes)} node(s). Ask for less in "
            "resources_per_run, or add nodes that have them; nothing was trained"
        )
    return at_once


def _train(todo: list[PlannedRun], keep: bool, launch: Launch, progress: Progress) -> list[FailedRun]:
    task = ray.remote(train_on_node)
    options = dict(
        num_cpus=launch.cpus,
        num_gpus=launch.gpus,
        max_retries=launch.max_retries,  # a lost node or worker: run again, elsewhere if need be
        retry_exceptions=False,  # the run's own error (bad data, a PalsError) would only fail again
    )
    pending = {}
    for run in todo:
        named = task.options(name=f"pals-run {run.folder.name}", **options)  # also the worker's process title
        pending[named.remote(run, keep, launch.storage, _asked(launch))] = run
    failed = []
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        run = pending.pop(ready[0])
        try:
            sent = ray.get(ready[0])
        except RayTaskError as err:  # the run's own error, raised on the node
            cause = err.cause if err.cause is not None else err
            failed.append(FailedRun(run.row, run.seed, run.folder, f"{type(cause).__name__}: {cause}"))
        except RayError as err:  # its worker or node lost more often than max_retries
            reason = str(err).strip().splitlines()[0] if str(err).strip() else ""
            error = f"lost {launch.max_retries + 1} time(s) with its worker or node ({type(err).__name__}: {reason})"
            failed.append(FailedRun(run.row, run.seed, run.folder, error))
        else:
            write_run(sent["archive"], run.folder, sent["trained_in"], sent[PLACEMENT_KEY])
            placement = sent[PLACEMENT_KEY]
            print(
                f"compare: {run.row} seed {run.seed} trained on {placement['host']} (node {placement['node_id'][:8]})"
            )
            progress.finished(run, sent["record"])
            continue
        print(f"compare: FAILED {run.row} seed {run.seed} ({run.folder.name}): {failed[-1].error}", flush=True)
    return failed


# --------------------------------------------------------------------------- on the node


def train_on_node(run: PlannedRun, keep_checkpoints: bool, storage: str | None, asked: dict) -> dict:
    """One run on this node (the body of its Ray task): in ``storage/<run>`` where every node mounts
    ``storage`` (resumed from its last checkpoint there), else in a scratch folder removed afterwards.
    Returns what the run keeps as a tar archive, its short record and where it trained."""
    scratch = None
    if storage is not None:
        if not Path(storage).is_dir():
            raise ConfigError(
                f"storage={storage}: no such folder on node {socket.gethostname()}; every node must mount it at "
                "that path (or leave storage out)"
            )
        folder = Path(storage) / run.folder.name
    else:
        scratch = Path(tempfile.mkdtemp(prefix="pals-run-"))
        folder = scratch / run.folder.name
    here = replace(run, folder=folder, config=replace(run.config, output_dir=str(folder)))
    if run.place is not None:  # its identity recorded in the folder that comes back
        here = replace(here, place=replace(run.place, folder=folder))
    try:
        record = train_one(here, keep_checkpoints)  # a run finished here before (driver gone) is read back
        archive = pack_run(folder)
        device = json.loads((folder / RESULTS_FILE).read_text(encoding="utf-8")).get("device")
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    if storage is not None:  # sent back whole: the shared folder keeps no finished run
        shutil.rmtree(folder, ignore_errors=True)
    return {"archive": archive, "trained_in": str(folder), "record": record, PLACEMENT_KEY: _placement(asked, device)}


def _placement(asked: dict, device: str | None) -> dict:
    """Where the run trained and on what: the Ray node, its host, the resources the run had, the device."""
    context = ray.get_runtime_context()
    return {
        "launcher": "ray",
        "node_id": context.get_node_id(),
        "host": socket.gethostname(),
        "node_ip": ray.util.get_node_ip_address(),
        "resources": {"cpus": asked["CPU"], "gpus": asked.get("GPU", 0)},
        "gpu_ids": [str(i) for i in ray.get_gpu_ids()],
        "device": device,
        "cpu": _cpu_model(),
    }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} cores)"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()} ({os.cpu_count()} cores)"


def pack_run(folder: Path) -> bytes:
    """Everything in the run's folder (its checkpoints are gone unless kept), as an uncompressed tar."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(folder, arcname=".")
    return buffer.getvalue()


# --------------------------------------------------------------------------- on the driver


def write_run(archive: bytes, folder: Path, trained_in: str, placement: dict) -> None:
    """The run sent back, written into ``folder`` as a local run leaves it: its records name ``folder``
    where they named the node's folder, results.json records where it trained. Unpacked beside it and
    renamed into place, so that a run half written (the driver killed) is never taken as done."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    incoming = Path(tempfile.mkdtemp(prefix=f".{folder.name}.incoming-", dir=folder.parent))
    try:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(incoming, filter="data")
            else:  # Python before 3.10.12: the archive is our own node's, its names were made by pack_run
                tar.extractall(incoming)  # noqa: S202
        for record in incoming.glob("*.json"):
            data = _moved(json.loads(record.read_text(encoding="utf-8")), trained_in, str(folder))
            if record.name == RESULTS_FILE:
                data[PLACEMENT_KEY] = placement
            record.write_text(json.dumps(data, indent=2), encoding="utf-8")
        replaced = None
        with run_lock(folder, wait=True):  # held by this driver since it was claimed; taken again freely
            # a partial run of the same settings (e.g. cut off here): the finished one wins
            replaced = folder.rename(folder.parent / f".{folder.name}.replaced-{uuid.uuid4().hex[:8]}")
            incoming.rename(folder)
        if replaced is not None:
            shutil.rmtree(replaced, ignore_errors=True)
    except BaseException:
        shutil.rmtree(incoming, ignore_errors=True)
        raise


def _moved(value, old: str, new: str):
    """``value`` (JSON) with every path under ``old`` now under ``new``."""
    if isinstance(value, dict):
        return {key: _moved(item, old, new) for key, item in value.items()}
    if isinstance(value, list):
        return [_moved(item, old, new) for item in value]
    if isinstance(value, str) and (value == old or value.startswith(old + os.sep)):
        return new + value[len(old) :]
    return value
