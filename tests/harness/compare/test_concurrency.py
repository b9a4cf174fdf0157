"""Two `compare` commands on one output folder: each run is trained once, under its lock, by whichever
command takes it first; the other command trains the other runs, waits for the held ones and reads
them. No checkpoint of a live run is touched, and both end with the same, complete report."""

import json
import os
import subprocess
import sys
import time

from compare_reruns import one_row_grid

from pals_adapters.harness import compare


def test_a_second_compare_on_the_same_folder_leaves_the_first_ones_runs_alone(tiny_model_dir, tmp_path, capsys):
    grid = one_row_grid(tmp_path, tiny_model_dir, tasks=["mood"], max_steps=200, save_steps=5, seeds=[1, 2])
    out = tmp_path / "out"
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "pals_adapters.harness.cli", "compare", "--config", str(grid)]
    first = subprocess.Popen(
        [*command, "--output-dir", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        deadline = time.time() + 180
        while time.time() < deadline and first.poll() is None and not list(out.glob("runs/*/checkpoint-*")):
            time.sleep(0.05)
        assert first.poll() is None, "the first compare must be training when the second starts"
        second = compare(grid, out)
        said = capsys.readouterr().out
        stdout, stderr = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, stderr[-3000:]
    assert "another process is training" in said  # the race happened: the second found a held run
    assert "2/2 runs done" in stdout and "2/2 runs done" in said
    report = json.loads((out / "comparison.json").read_text())
    assert [len(row["runs"]) for row in (report["rows"][0], second["rows"][0])] == [2, 2]
    assert report["rows"] == second["rows"]
    for results in out.glob("runs/*/results.json"):  # each run trained once, from its start, never resumed
        assert json.loads(results.read_text())["config"]["resume"] is None
    assert "no complete checkpoint" not in stderr + said
