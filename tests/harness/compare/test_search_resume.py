"""A range search (Optuna's TPE sampler) given to every row by the grid: every row gets the same number of
trial runs; a search killed partway goes on from its finished trials; the same seed draws the same trials
and makes the same choice."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from search_grids import write_search_grid, write_signal_task

from pals_adapters.harness import compare

ROWS_YAML = """
reference: fine-tuned
rows:
  - name: fine-tuned
    method: shared
  - name: PALs
    method: pals
"""
SEARCH = {"lr": {"log": [1.0e-6, 3.0e-2]}, "trials": 3, "seed": 7, "selection": 0.25}


@pytest.fixture(scope="module")
def range_grid(tiny_model_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("signal")
    write_signal_task(folder)
    return write_search_grid(folder, tiny_model_dir, ROWS_YAML, seeds=[1], search=SEARCH)


@pytest.fixture(scope="module")
def uninterrupted(range_grid, tmp_path_factory):
    """The search run to its end in one go."""
    out = tmp_path_factory.mktemp("uninterrupted")
    return out, compare(range_grid, out)


def _searches(data: dict) -> dict:
    return {row["name"]: row["search"] for row in data["rows"]}


def test_every_row_given_the_same_trials_gets_as_many_trial_runs(uninterrupted):
    out, data = uninterrupted
    for search in _searches(data).values():
        assert search["sampler"] == "tpe" and search["trials_per_row"] == 3
        assert len(search["trials"]) == 3 and search["cost"]["runs"] == 3
        assert all(trial["selection_score"] is not None for trial in search["trials"])
        lrs = [trial["settings"]["lr"] for trial in search["trials"]]
        assert len(set(lrs)) == 3 and all(1e-6 <= lr <= 3e-2 for lr in lrs)
        best = max(search["trials"], key=lambda trial: trial["selection_score"])
        assert search["chosen"] == best["settings"]
    assert len(list(out.glob("search/runs/*/results.json"))) == 6


def test_a_killed_search_resumes_with_its_finished_trials_and_chooses_as_the_same_seed_does(
    range_grid, uninterrupted, tmp_path
):
    out = tmp_path / "out"
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "pals_adapters.harness.cli", "compare", "--config", str(range_grid)]
    child = subprocess.Popen(
        [*command, "--output-dir", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 240
        while time.time() < deadline and child.poll() is None and not list(out.glob("search/runs/*/results.json")):
            time.sleep(0.02)
        assert child.poll() is None, "the search must still be running when it is killed"
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    finished = {path: path.stat().st_mtime_ns for path in out.glob("search/runs/*/results.json")}
    assert 1 <= len(finished) < 6 and not (out / "comparison.json").exists()

    data = compare(range_grid, out)
    assert {path: path.stat().st_mtime_ns for path in finished} == finished  # read, not trained again
    assert len(list(out.glob("search/runs/*/results.json"))) == 6
    _, fresh = uninterrupted
    for name, search in _searches(data).items():
        same = _searches(fresh)[name]
        assert [t["settings"] for t in search["trials"]] == [t["settings"] for t in same["trials"]]
        assert search["chosen"] == same["chosen"]
        for trial, other in zip(search["trials"], same["trials"]):
            assert trial["selection_score"] == pytest.approx(other["selection_score"])
    report = json.loads((out / "comparison.json").read_text())
    assert [row["search"]["chosen"] for row in report["rows"]] == [s["chosen"] for s in _searches(fresh).values()]
