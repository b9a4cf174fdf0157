"""Launching a distributed run from a test, bounded: torchrun on one node, each launch in its own
process group, killed with its ranks past its time (`finish`, `kill_launch`). Used by the sharded
(FSDP) and DeepSpeed tests."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO

LIMIT = 180  # seconds for one launch of 2 tiny ranks (about 20 s on 2 shared cores)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def environment() -> dict:
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }


def start(command: list[str], **env: str) -> subprocess.Popen:
    """A launcher in its own process group (see `kill_launch` for its ranks), with ``env`` added to the
    environment."""
    return subprocess.Popen(
        command,
        cwd=REPO,
        env={**environment(), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def child_processes(pid: int) -> list[int]:
    """The ids of the processes whose parent is ``pid`` (Linux: read from /proc)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:  # the field after the name is the parent's
                children.append(int(stat.parent.name))
    return children


def kill_launch(proc: subprocess.Popen, ranks: tuple[int, ...] = ()) -> str:
    """kill -9 of a launch: the launcher's process group, and its ranks, which torchrun starts in sessions
    of their own (killing the launcher's group leaves them running); ``ranks``: ids known otherwise.
    Returns what the launch printed."""
    ranks = {*ranks, *child_processes(proc.pid)}  # before the launcher dies and its children are re-parented
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    for pid in ranks:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    try:
        output, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # a process outside those killed still holds the output pipe
        output = "(the launch's output was still held open 30 s after the kill)"
    return output


def ended(pid: int) -> bool:
    """Whether process ``pid`` is gone (or a zombie: dead, not yet reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def finish(proc: subprocess.Popen, limit: float = LIMIT) -> tuple[int, str]:
    """Waits for ``proc`` up to ``limit`` seconds; past it kills the launch and its ranks and fails the test."""
    try:
        output, _ = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        output = kill_launch(proc)
        pytest.fail(f"launch ran past {limit} s and was killed:\n{output[-4000:]}")
    return proc.returncode, output


def torchrun(*args: str, ranks: int = 2) -> list[str]:
    """One node of ``ranks`` ranks. ``--standalone``: the rendezvous store binds a free port itself (a port
    picked here first could be taken by another process before torchrun binds it)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks), *args]
