"""A grid that cannot learn: every dev example of its task is the same text, so every run predicts one
class and scores the majority-class floor. The report says so in the table, the JSON and the figure, and
notes the intervals of width zero; the floor is taken on the dev examples the runs are scored on."""

import json
import logging
import random

import pytest
from compare_grids import write_grid

from pals_adapters.harness import compare
from pals_adapters.harness.checks import resolve_task_names
from pals_adapters.harness.comparison.reporting.figure import FIGURE_MARK
from pals_adapters.harness.comparison.reporting.floor import majority_score

ROWS = "rows:\n  - name: PALs\n    method: pals\n  - name: LoRA\n    method: lora\n    base: frozen\n"


@pytest.fixture(scope="module")
def flat_task(tmp_path_factory):
    """``flat``: 24 training rows of two classes; its 8 dev rows one text, half of each class."""
    folder = tmp_path_factory.mktemp("flat")
    rng = random.Random(0)
    words = ["good", "bad", "fine", "awful", "great", "poor"]
    train = [f"{' '.join(rng.choice(words) for _ in range(4))},{i % 2}" for i in range(24)]
    (folder / "train.csv").write_text("text,label\n" + "\n".join(train) + "\n")
    (folder / "dev.csv").write_text("text,label\n" + "".join(f"all the same,{i // 4}\n" for i in range(8)))
    (folder / "tasks.yaml").write_text(
        "tasks:\n  - name: flat\n    train: train.csv\n    validation: dev.csv\n"
        "    text_columns: [text]\n    label_column: label\n"
    )
    return folder


def test_a_row_at_the_floor_that_predicts_one_class_is_flagged(flat_task, tiny_model_dir, tmp_path):
    grid = write_grid(flat_task, tiny_model_dir, rows=ROWS, seeds=[1, 2], max_steps=2, reference="PALs")
    out = tmp_path / "out"
    data = compare(grid, out)
    assert data["floor"]["flat"]["score"] == 50.0
    for row in data["rows"]:
        assert row["mean"]["flat"] == 50.0 and row["sd"]["flat"] == 0.0
        assert row["flags"]["flat"] == {"near_floor": True, "one_class_seeds": [1, 2]}
        assert row["flags"]["average"]["near_floor"]
    assert json.loads((out / "comparison.json").read_text())["rows"][1]["flags"] == data["rows"][1]["flags"]
    table = (out / "comparison.md").read_text()
    assert "| PALs | 2 | " in table and "| 50.0 ± 0.0 (floor, one class) |" in table
    assert "(floor): the score is within the seeds' noise of the majority-class floor" in table
    assert "(one class): a seed's run predicts one class for every dev example" in table
    # both seeds alike on both rows: a t interval of width zero, said to be no measure of the noise
    assert data["paired"]["LoRA"]["flat"]["low"] == data["paired"]["LoRA"]["flat"]["high"] == 0.0
    assert "Width zero (every seed or resample gave the same difference" in table and "LoRA (flat)" in table
    csv_lines = (out / "comparison.csv").read_text().splitlines()
    assert csv_lines[0].endswith("near_floor,one_class_seeds,resumed")
    assert any(line.startswith("LoRA,flat,") and ",True,1 2,False" in line for line in csv_lines)
    assert FIGURE_MARK in (out / "comparison.png").read_bytes()


def test_the_floor_is_taken_on_the_dev_examples_the_runs_are_scored_on(flat_task):
    [spec] = resolve_task_names(None, str(flat_task / "tasks.yaml")).values()
    assert majority_score(spec)["score"] == 50.0  # all 8 dev rows: half of them the majority class
    first_four = majority_score(spec, max_eval_examples=4)  # the first 4 rows: all class 0, train's majority
    assert first_four["score"] == 100.0 and first_four["range"] == [0.0, 100.0]


def test_runs_shorter_than_logging_steps_are_warned_about_before_training(flat_task, tiny_model_dir, tmp_path, caplog):
    grid = write_grid(flat_task, tiny_model_dir, rows=ROWS, seeds=[1], max_steps=4, logging_steps=10)
    with caplog.at_level(logging.WARNING):
        compare(grid, tmp_path / "out", dry_run=True)
    warned = [r.getMessage() for r in caplog.records if "logging_steps" in r.getMessage()]
    assert len(warned) == 2 and "row 'PALs': logging_steps 10 exceeds the 4 steps of its runs" in warned[0]
    assert "no loss curve" in warned[0] and not (tmp_path / "out").exists()
