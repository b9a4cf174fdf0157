"""`compare` on a user's own CSV/JSONL tasks and a tiny model: the report agrees with the runs and with
statistics recomputed here; finished runs are read, never retrained; --jobs, --report-only and --dry-run."""

import json
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from compare_grids import write_grid
from scipy import stats

from pals_adapters.harness import compare


def files_and_times(folder):
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def test_the_report_agrees_with_the_runs_and_with_statistics_recomputed_here(trained_grid):
    _, out, data = trained_grid
    assert data == json.loads((out / "comparison.json").read_text())
    assert data["tasks"] == ["mood", "closeness"] and data["reference"] == "PALs"
    rows = {row["name"]: row for row in data["rows"]}
    assert list(rows) == [
        "PALs",
        "PALs, frozen base",
        "Houlsby",
        "LoRA, frozen base",
        "full fine-tuning",
        "separate models",
    ]
    per_seed = {}
    for name, row in rows.items():
        assert (row["method"], row["base"]) == {
            "PALs, frozen base": ("pals", "frozen"),
            "LoRA, frozen base": ("lora", "frozen"),
            "Houlsby": ("houlsby", "finetune"),
            "full fine-tuning": ("shared", "finetune"),
            "separate models": ("separate", "finetune"),
        }.get(name, ("pals", "finetune"))
        scores = {}
        for run in row["runs"]:
            folder = out / run["run_dir"]
            assert not os.path.isabs(run["run_dir"]) and folder.parent == out / "runs"
            results = json.loads((folder / "results.json").read_text())
            assert results["config"]["seed"] == run["seed"]
            assert (folder / "dev_predictions.jsonl").is_file()
            assert not list(folder.glob("checkpoint-*"))  # a finished run keeps no checkpoints
            for task in results["train_sizes"]:
                assert run["scores"][task] == pytest.approx(100 * results["metrics"][f"{task}_score"])
                scores.setdefault(run["seed"], {})[task] = 100 * results["metrics"][f"{task}_score"]
        assert sorted(scores) == row["seeds"] == ([1] if name == "separate models" else [1, 2])
        per_seed[name] = {s: {**v, "average": np.mean([v["mood"], v["closeness"]])} for s, v in scores.items()}
        for key in ["mood", "closeness", "average"]:
            values = [per_seed[name][s][key] for s in row["seeds"]]
            assert row["mean"][key] == pytest.approx(np.mean(values))
            assert row["sd"][key] == (pytest.approx(np.std(values, ddof=1)) if len(values) > 1 else None)
    # separate models: one single-task shared fine-tuned run per task, one base per task in the count
    separate = rows["separate models"]
    assert sorted(r["tasks"][0] for r in separate["runs"]) == ["closeness", "mood"]
    assert 2 < separate["params_x_base"] < 2.01 and 1 <= rows["full fine-tuning"]["params_x_base"] < 1.01
    assert rows["PALs"]["params_x_base"] > rows["full fine-tuning"]["params_x_base"]
    # reference minus row: a Student-t interval over the two common seeds (scipy's paired t-test here)
    for name in ["PALs, frozen base", "Houlsby", "LoRA, frozen base", "full fine-tuning"]:
        for key in ["mood", "closeness", "average"]:
            ref = [per_seed["PALs"][s][key] for s in (1, 2)]
            other = [per_seed[name][s][key] for s in (1, 2)]
            diff = data["paired"][name][key]
            assert (diff["n"], diff["interval"]) == (2, "t")
            assert diff["mean"] == pytest.approx(np.mean(ref) - np.mean(other))
            if len(set(np.subtract(ref, other))) > 1:
                low, high = stats.ttest_rel(ref, other).confidence_interval(0.95)
                assert (diff["low"], diff["high"]) == (pytest.approx(low), pytest.approx(high))
    # one common seed: a paired bootstrap over the dev examples, around the difference of the scores
    boot = data["paired"]["separate models"]
    for key in ["mood", "closeness", "average"]:
        assert boot[key]["interval"] == "bootstrap"
        assert boot[key]["mean"] == pytest.approx(per_seed["PALs"][1][key] - per_seed["separate models"][1][key])
        assert boot[key]["low"] <= boot[key]["mean"] <= boot[key]["high"]
    assert data["floor"]["mood"]["score"] >= 50 and data["floor"]["closeness"]["score"] == 0
    table = (out / "comparison.md").read_text()
    assert "| separate models | 1 | 2.00 |" in table and "| majority class (floor) |" in table
    assert (out / "comparison.png").stat().st_size > 0 and (out / "comparison.csv").read_text().count("\n") == 19


def test_report_only_and_dry_run_train_nothing(trained_grid, tmp_path, capsys):
    grid, out, data = trained_grid
    before = files_and_times(out / "runs")
    again = compare(grid, out, report_only=True)
    assert again["rows"] == data["rows"] and files_and_times(out / "runs") == before
    # a row added later: --report-only names its missing runs, --dry-run lists them; neither trains one
    bigger = grid.parent / "bigger.yaml"
    bigger.write_text(grid.read_text() + "  - name: LoRA\n    method: lora\n")
    compare(bigger, out, report_only=True)
    report = json.loads((out / "comparison.json").read_text())
    assert len(report["missing"]["LoRA"]) == 2 and "LoRA" not in [r["name"] for r in report["rows"]]
    plan = compare(bigger, out, dry_run=True, print_commands=True)
    printed = capsys.readouterr().out
    states = {r["name"]: {run["state"] for run in r["runs"]} for r in plan["rows"]}
    assert states["LoRA"] == {"missing"} and states["PALs"] == {"done"}
    assert printed.count("pals-bench train ") == 2 and "--method lora" in printed and "--seed 2" in printed
    assert files_and_times(out / "runs") == before
    fresh = tmp_path / "fresh"
    compare(grid, fresh, dry_run=True)
    assert not fresh.exists()


@pytest.mark.slow
def test_two_jobs_give_the_scores_of_one(user_tasks, tiny_model_dir, tmp_path):
    grid = write_grid(user_tasks.parent, tiny_model_dir, rows="rows:\n  - name: PALs\n    method: pals\n")
    one, two = compare(grid, tmp_path / "one"), compare(grid, tmp_path / "two", jobs=2)
    runs = [[(run["run_dir"], run["scores"]) for run in data["rows"][0]["runs"]] for data in (one, two)]
    assert len(runs[0]) == 2 and runs[0] == runs[1]  # the same folders (settings), the same scores


@pytest.mark.slow
def test_a_grid_killed_mid_run_goes_on_without_retraining_finished_runs(user_tasks, tiny_model_dir, tmp_path):
    rows = "rows:\n  - name: PALs\n    method: pals\n  - name: Houlsby\n    method: houlsby\n"
    grid = write_grid(user_tasks.parent, tiny_model_dir, rows=rows, seeds=[1], max_steps=20, save_steps=2)
    grid = grid.rename(tmp_path / "killed.yaml")
    grid.write_text(grid.read_text().replace('"tasks.yaml"', json.dumps(str(user_tasks))))
    out = tmp_path / "out"
    command = [
        sys.executable,
        "-m",
        "pals_adapters.harness.cli",
        "compare",
        "--config",
        str(grid),
        "--output-dir",
        str(out),
    ]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and child.poll() is None:
            finished = list(out.glob("runs/*/results.json"))
            started = [
                p
                for p in out.glob("runs/*/checkpoint-*/trainer_state.json")
                if p.parents[1] / "results.json" not in finished
            ]
            if finished and any(int(p.parent.name.split("-")[1]) >= 4 for p in started):
                break
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait()
    assert len(finished) == 1, "the test must kill the command during its second run"
    first = files_and_times(finished[0].parent)
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert files_and_times(finished[0].parent) == first  # read, not retrained
    assert "2/2 runs done" in done.stdout and "resumed" in done.stdout
    report = json.loads((out / "comparison.json").read_text())
    assert [len(row["runs"]) for row in report["rows"]] == [1, 1]
    resumed = [r for r in out.glob("runs/*/results.json") if r != finished[0]]
    assert json.loads(resumed[0].read_text())["config"]["resume"] is not None
    assert math.isfinite(report["rows"][1]["mean"]["average"])
