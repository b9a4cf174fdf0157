"""Ctrl-C (SIGINT to the terminal's process group) or SIGTERM during `pals-bench compare`: one line that
says how to go on, exit status 130 or 143, no traceback, no worker left training; the same command then
goes on from the interrupted run's checkpoints."""

import os
import signal
import subprocess
import sys
import time

import pytest
from compare_reruns import one_row_grid

from pals_adapters.harness import compare

# `pals-bench` as a terminal starts it, with Ctrl-C's default answer: a suite itself run in the background
# (`nohup pytest &`) hands its children SIGINT ignored, as a shell does for background jobs.
AS_IN_A_TERMINAL = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from pals_adapters.harness.cli import main; sys.exit(main())"
)

CASES = [
    ("ctrl-c", signal.SIGINT, 130, 1),
    ("sigterm", signal.SIGTERM, 143, 1),
    ("sigterm, 2 jobs", signal.SIGTERM, 143, 2),
]


@pytest.mark.parametrize("sent, status, jobs", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_an_interrupted_compare_says_how_to_go_on_in_one_line(sent, status, jobs, tiny_model_dir, tmp_path):
    seeds = [1, 2] if jobs > 1 else [1]
    grid = one_row_grid(tmp_path, tiny_model_dir, tasks=["mood"], max_steps=2000, save_steps=5, seeds=seeds)
    out = tmp_path / "out"
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-c", AS_IN_A_TERMINAL, "compare", "--config", str(grid)]
    command += ["--output-dir", str(out), "--jobs", str(jobs)]
    child = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    try:
        deadline = time.time() + 180
        while time.time() < deadline and child.poll() is None and not list(out.glob("runs/*/checkpoint-*")):
            time.sleep(0.05)
        assert child.poll() is None, "the command must still be training when it is interrupted"
        if sent == signal.SIGINT:
            os.killpg(child.pid, signal.SIGINT)  # what a terminal does: every process of the group gets it
        else:
            child.send_signal(signal.SIGTERM)  # a scheduler's stop: the command alone gets it
        stdout, stderr = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    assert child.returncode == status, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == "pals-bench compare: interrupted; run the same command again to go on"
    assert "Traceback" not in stderr + stdout
    checkpoints = sorted(out.glob("runs/*/checkpoint-*"))
    time.sleep(1.0)
    assert sorted(out.glob("runs/*/checkpoint-*")) == checkpoints  # no worker went on training
    states = {run["state"] for run in compare(grid, out, dry_run=True)["rows"][0]["runs"]}
    assert "partial" in states and "done" not in states
