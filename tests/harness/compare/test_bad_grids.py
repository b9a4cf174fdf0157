"""Every bad grid is refused before any run folder exists, with a message naming the row and what to fix."""

import pytest
from compare_grids import write_grid

from pals_adapters.errors import ConfigError
from pals_adapters.harness import compare
from pals_adapters.harness.cli import main

PALS = "  - name: PALs\n    method: pals\n"

CASES = [
    # (what is wrong, rows after the PALs row, shared settings changed, words the message must hold)
    ("unknown method", "  - name: typo\n    method: palz\n", {}, ["row 'typo'", "palz"]),
    ("unknown option", "  - name: opt\n    method: pals[hiden_size_aug=8]\n", {}, ["row 'opt'", "hiden_size_aug"]),
    ("row name twice", "  - name: PALs\n    method: houlsby\n", {}, ["row 'PALs'", "used twice"]),
    ("reference no row", "", {"reference": "LoRA"}, ["reference 'LoRA' is no row", "PALs"]),
    ("empty seeds", "", {"seeds": []}, ["seeds=[]", "non-empty list"]),
    ("row with empty seeds", "  - name: few\n    method: lora\n    seeds: []\n", {}, ["row 'few'", "seeds=[]"]),
    ("unknown task", "", {"tasks": ["mood", "nope"]}, ["row 'PALs'", "nope"]),
    ("unreadable task file", "", {"task_file": "missing.yaml"}, ["row 'PALs'", "missing.yaml"]),
    (
        "setting the method refuses",
        "  - name: hot\n    method: pals\n    sampler: temperature\n",
        {},
        ["row 'hot'", "alpha"],
    ),
    (
        "frozen separate models",
        "  - name: sep\n    method: separate\n    base: frozen\n",
        {},
        ["row 'sep'", "finetune"],
    ),
    ("a seed in a row", "  - name: one\n    method: pals\n    seed: 3\n", {}, ["row 'one'", "seeds: [...]"]),
    ("overwrite in a grid", "", {"overwrite": True}, ["'overwrite' cannot be set", "compare decides it"]),
    ("misspelt setting", "", {"max_step": 4}, ["unknown setting 'max_step'", "max_steps"]),
    (
        "a row changes the tasks",
        "  - name: t\n    method: pals\n    tasks: [mood]\n",
        {},
        ["row 't'", "shared by all rows"],
    ),
    ("a value of the wrong type", "  - name: w\n    method: pals\n    lr: fast\n", {}, ["row 'w'", "lr='fast'"]),
]


@pytest.mark.parametrize("rows, shared, words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_grid_is_refused_before_any_folder_exists(rows, shared, words, user_tasks, tiny_model_dir, tmp_path):
    grid = write_grid(user_tasks.parent, tiny_model_dir, rows="rows:\n" + PALS + rows, **shared)
    out = tmp_path / "out"
    with pytest.raises(ConfigError) as refused:
        compare(grid, out)
    for word in words:
        assert word in str(refused.value)
    assert not out.exists()


def test_the_command_says_what_to_fix_without_a_traceback(user_tasks, tiny_model_dir, tmp_path, capsys):
    grid = write_grid(user_tasks.parent, tiny_model_dir, rows="rows:\n" + PALS, reference="Houlsby")
    with pytest.raises(SystemExit) as ended:
        main(["compare", "--config", str(grid), "--output-dir", str(tmp_path / "out"), "--model", "elsewhere"])
    assert ended.value.code == 2
    error = capsys.readouterr().err
    assert "pals-bench compare: error:" in error and "reference 'Houlsby' is no row" in error
    assert not (tmp_path / "out").exists()


def test_command_line_settings_replace_the_grids(user_tasks, tiny_model_dir, tmp_path):
    grid = write_grid(user_tasks.parent, tiny_model_dir, rows="rows:\n" + PALS)
    plan = compare(grid, tmp_path / "out", overrides={"seeds": [7], "max_steps": 2, "tasks": ["mood"]}, dry_run=True)
    [run] = plan["rows"][0]["runs"]
    assert (run["seed"], run["tasks"]) == (7, ["mood"])
    with pytest.raises(ConfigError, match="unknown setting 'max_step'"):
        compare(grid, tmp_path / "out", overrides={"max_step": 2}, dry_run=True)
    assert not (tmp_path / "out").exists()
