"""A run interrupted after a checkpoint and resumed by `compare`: its wall time and examples per second
are the sums over its segments and its training loss is the whole run's (as an uninterrupted twin's),
and the report marks the row as resumed."""

import json

import pytest
from compare_grids import write_grid
from transformers import TrainerCallback

from pals_adapters.harness import compare
from pals_adapters.harness.comparison.grid import plan_runs, read_grid
from pals_adapters.harness.comparison.runs import train_one

ROWS = "rows:\n  - name: PALs\n    method: pals\n"


class InterruptAt(TrainerCallback):
    """Ctrl-C after ``step``: the checkpoint before it is what the run goes on from."""

    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise KeyboardInterrupt


def final_train_entry(results):
    return next(entry for entry in reversed(results["log_history"]) if "train_runtime" in entry)


def test_a_resumed_runs_costs_and_loss_are_its_whole_runs(user_tasks, tiny_model_dir, tmp_path):
    grid = write_grid(user_tasks.parent, tiny_model_dir, rows=ROWS, seeds=[1], max_steps=6, save_steps=2)
    out = tmp_path / "out"
    [run] = plan_runs(read_grid(grid), out)
    with pytest.raises(KeyboardInterrupt):
        train_one(run, False, [InterruptAt(3)])
    assert (run.folder / "checkpoint-2").is_dir() and not (run.folder / "results.json").exists()

    data = compare(grid, out)  # goes on from checkpoint-2
    results = json.loads((run.folder / "results.json").read_text())
    segments = results["segments"]
    assert [(s["from_step"], s["to_step"]) for s in segments] == [(0, 2), (2, 6)] and results["resumed"]
    assert all(s["train_seconds"] > 0 for s in segments)
    # the time before the interruption counts (up to the checkpoint the run went on from)
    assert results["wall_seconds"] == pytest.approx(segments[0]["train_seconds"] + segments[1]["wall_seconds"])
    whole_rate = 6 * 8 / sum(s["train_seconds"] for s in segments)  # steps x batch over the training time
    assert results["train_examples_per_second"] == pytest.approx(whole_rate)
    assert final_train_entry(results)["train_examples_per_second"] == pytest.approx(whole_rate)

    # the whole run's loss: the same steps as a run never interrupted, not the resumed part over all steps
    twin = tmp_path / "twin"
    compare(grid, twin)
    [twin_results] = [json.loads(p.read_text()) for p in twin.glob("runs/*/results.json")]
    assert not twin_results["resumed"] and len(twin_results["segments"]) == 1
    assert results["train_loss"] == pytest.approx(twin_results["train_loss"], rel=1e-4)
    assert final_train_entry(results)["train_loss"] == pytest.approx(twin_results["train_loss"], rel=1e-4)
    assert final_train_entry(twin_results)["train_loss"] == pytest.approx(twin_results["train_loss"], rel=1e-4)

    [row] = data["rows"]
    assert row["resumed"] and row["runs"][0]["resumed"]
    assert row["seconds_per_seed"] == pytest.approx(results["wall_seconds"])
    assert row["examples_per_second"] == pytest.approx(whole_rate)
    table = (out / "comparison.md").read_text()
    line = next(line for line in table.splitlines() if line.startswith("| PALs |"))
    assert f"| {results['wall_seconds']:.0f} (resumed) | {whole_rate:.1f} |" in line
    assert "(resumed): a run of the row was interrupted and resumed" in table
