"""The report's edges: a row name holding ``|``, runs scored on different dev examples, a task added to the
task file after the runs, and report files that compare did not write."""

import json
import shutil

import pytest
from compare_grids import write_grid

from pals_adapters.errors import ConfigError
from pals_adapters.harness import compare

ROWS = "rows:\n  - name: PALs\n    method: pals\n  - name: a | b\n    method: lora\n    base: frozen\n"


@pytest.fixture(scope="module")
def one_seed_grid(user_tasks, tiny_model_dir, tmp_path_factory):
    """(tasks folder, grid file, output folder) of two rows trained on one seed: paired by a bootstrap."""
    folder = tmp_path_factory.mktemp("edges") / "tasks"
    shutil.copytree(user_tasks.parent, folder, ignore=shutil.ignore_patterns("*.yaml.*", "grid.yaml"))
    grid = write_grid(folder, tiny_model_dir, rows=ROWS, seeds=[1], max_steps=2)
    out = folder.parent / "out"
    compare(grid, out)
    return folder, grid, out


def cells(line):
    """The cells of a Markdown table line; an escaped ``\\|`` stays inside its cell."""
    return line.replace("\\|", "\0").strip("|").split("|")


def test_a_row_name_with_a_bar_stays_in_its_cell(one_seed_grid):
    _, _, out = one_seed_grid
    table = (out / "comparison.md").read_text()
    tables = [block.splitlines() for block in table.split("\n\n") if block.startswith("|")]
    assert [len(lines) for lines in tables] == [5, 3]  # scores: header, rule, 2 rows, floor; paired: 1 row
    for lines in tables:
        assert {len(cells(line)) for line in lines} == {len(cells(lines[0]))}  # each line as wide as its header
    assert tables[0][3].startswith("| a \\| b | 1 |") and tables[1][2].startswith("| a \\| b | 1 | bootstrap |")
    assert not list(out.glob(".comparison*"))  # written to temporary names and renamed: none left over


def test_runs_scored_on_other_dev_examples_get_a_note_not_a_crash(one_seed_grid, tmp_path):
    _, grid, out = one_seed_grid
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    [other] = [p for p in copy.glob("runs/lora-*/dev_predictions.jsonl")]
    lines = other.read_text().splitlines()
    last_mood = max(i for i, line in enumerate(lines) if json.loads(line)["task"] == "mood")
    other.write_text("\n".join(lines[:last_mood] + lines[last_mood + 1 :]) + "\n")  # one mood dev row fewer
    data = compare(grid, copy, report_only=True)
    assert "a | b" not in data["paired"]
    assert data["paired_notes"]["a | b"] == (
        "fewer than two common seeds, and its runs and the reference's were scored on different mood dev examples"
    )
    assert "No interval (fewer than two common seeds, and its runs" in (copy / "comparison.md").read_text()


def test_a_task_added_to_the_task_file_leaves_the_old_runs_out_without_a_traceback(
    user_tasks, tiny_model_dir, tmp_path
):
    folder = tmp_path / "tasks"  # the runs' own task file, edited in place after they trained
    shutil.copytree(user_tasks.parent, folder, ignore=shutil.ignore_patterns("*.yaml.*", "grid.yaml"))
    grid = write_grid(folder, tiny_model_dir, rows="rows:\n  - name: PALs\n    method: pals\n", seeds=[1], max_steps=2)
    compare(grid, tmp_path / "out")
    tasks = folder / "tasks.yaml"
    tasks.write_text(
        tasks.read_text() + "  - name: mood2\n    train: mood/train.csv\n    validation: mood/dev.csv\n"
        "    text_columns: [text]\n    label_column: label\n"
    )
    data = compare(grid, tmp_path / "out", report_only=True)
    assert data["tasks"] == ["mood", "closeness", "mood2"] and data["rows"] == []
    assert list(data["missing"]) == ["PALs"]  # its results lack mood2: not a run of this grid


@pytest.mark.parametrize(
    "name, content",
    [
        ("comparison.md", "# my own notes\n"),
        ("comparison.json", '{"mine": true}\n'),
        ("comparison.csv", "a,b\n1,2\n"),
        ("comparison.png", "not a figure of compare"),
    ],
)
def test_a_report_file_compare_did_not_write_is_refused_before_any_run(
    name, content, user_tasks, tiny_model_dir, tmp_path
):
    grid = write_grid(user_tasks.parent, tiny_model_dir, rows="rows:\n  - name: PALs\n    method: pals\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / name).write_text(content)
    with pytest.raises(ConfigError) as refused:
        compare(grid, out)
    assert f"{out / name}: not a report that pals-bench compare wrote" in str(refused.value)
    assert "choose another --output-dir" in str(refused.value)
    assert (out / name).read_text() == content and not (out / "runs").exists()
