"""Equal budgets: a row of separate models trains each task for the steps the multi-task runs give it
(``separate_budget: per_task_steps`` keeps max_steps per task), and the report states every row's
training examples per task, marking a row whose budget is not the reference's."""

import json
import shutil

import pytest
from compare_grids import write_grid

from pals_adapters.harness import compare
from pals_adapters.harness.comparison.grid import plan_runs, read_grid

ROWS = """rows:
  - name: PALs
    method: pals
  - name: separate models
    method: separate
"""


@pytest.fixture
def uneven_tasks(user_tasks, tmp_path):
    """The user's tasks with 24 mood and 8 closeness training rows: a proportional sampler draws mood 3 times
    as often (the default annealed sampler is proportional in a run of one sampling epoch)."""
    folder = tmp_path / "tasks"
    shutil.copytree(user_tasks.parent, folder, ignore=shutil.ignore_patterns("grid.yaml", "*.yaml.*"))
    lines = (folder / "closeness" / "train.jsonl").read_text().splitlines()
    (folder / "closeness" / "train.jsonl").write_text("\n".join(lines[:8]) + "\n")
    return folder


def separate_steps(grid, out):
    plan = plan_runs(read_grid(grid), out)
    return {run.tasks[0]: run.config.max_steps for run in plan if run.row == "separate models"}


def test_separate_models_get_the_multi_task_runs_budget_per_task_by_default(uneven_tasks, tiny_model_dir, tmp_path):
    grid = write_grid(uneven_tasks, tiny_model_dir, rows=ROWS, seeds=[1], max_steps=8)
    out = tmp_path / "out"
    # 8 steps drawn 3:1: mood 6 steps, closeness 2; each separate model trains that many, not 8 each
    assert separate_steps(grid, out) == {"mood": 6, "closeness": 2}
    data = compare(grid, out)
    rows = {row["name"]: row for row in data["rows"]}
    assert rows["PALs"]["budget"]["examples"] == {"mood": 48.0, "closeness": 16.0}  # steps x batch of 8
    assert rows["separate models"]["budget"]["examples"] == {"mood": 48.0, "closeness": 16.0}
    assert not rows["separate models"]["budget"]["differs_from_reference"]
    for run in rows["separate models"]["runs"]:
        results = json.loads((out / run["run_dir"] / "results.json").read_text())
        assert results["config"]["max_steps"] == {"mood": 6, "closeness": 2}[run["tasks"][0]]
    table = (out / "comparison.md").read_text()
    assert "| PALs | 1 | " in table and " | 48 / 16 | " in table and "≠ reference" not in table
    header = next(line for line in table.splitlines() if line.startswith("| row | seeds"))
    assert "examples per task" in header


def test_per_task_steps_keeps_max_steps_per_task_and_the_report_marks_the_difference(
    uneven_tasks, tiny_model_dir, tmp_path
):
    grid = write_grid(uneven_tasks, tiny_model_dir, rows=ROWS, seeds=[1], max_steps=8, separate_budget="per_task_steps")
    out = tmp_path / "out"
    assert separate_steps(grid, out) == {"mood": 8, "closeness": 8}
    data = compare(grid, out)
    separate = next(row for row in data["rows"] if row["name"] == "separate models")
    assert separate["budget"]["examples"] == {"mood": 64.0, "closeness": 64.0}
    assert separate["budget"]["differs_from_reference"]
    table = (out / "comparison.md").read_text()
    assert "| separate models | 1 | 2.00 | 64 / 64 (≠ reference) |" in table
    assert "(≠ reference): the row's budget differs from the reference row's" in table
    lines = (out / "comparison.csv").read_text().splitlines()
    assert "examples_seen" in lines[0] and any(line.startswith("separate models,closeness,") for line in lines)


def test_a_row_of_another_sampler_is_budgeted_under_its_own_sampler(uneven_tasks, tiny_model_dir, tmp_path):
    rows = ROWS.split("  - name: separate")[0] + "  - name: round robin\n    method: pals\n    sampler: round_robin\n"
    grid = write_grid(uneven_tasks, tiny_model_dir, rows=rows, seeds=[1], max_steps=8)
    planned = read_grid(grid)
    plan_runs(planned, tmp_path / "out")
    assert planned.budgets["round robin"]["examples"] == {"mood": 32.0, "closeness": 32.0}  # 4 steps each
    assert planned.budgets["PALs"]["examples"] == {"mood": 48.0, "closeness": 16.0}
