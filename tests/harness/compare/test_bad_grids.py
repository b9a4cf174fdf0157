"""Every bad grid is refused before any run folder exists, with a message naming the row and what to fix."""

import shutil

import pytest
from compare_grids import write_grid

from pals_adapters.errors import ConfigError, PalsError
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
    # seeds numpy refuses, or the same run twice: refused here, not inside numpy after other rows trained
    ("a negative seed", "", {"seeds": [1, -2]}, ["seed -2 is out of range", "0 to 4294967295"]),
    ("a seed past numpy's range", "", {"seeds": [2**32]}, ["seed 4294967296 is out of range"]),
    ("a seed given twice", "", {"seeds": [3, 1, 3]}, ["seed 3 is given twice"]),
    ("a row's seed out of range", "  - name: big\n    method: lora\n    seeds: [-1]\n", {}, ["row 'big'", "seed -1"]),
    ("a seed that is no number", "", {"seeds": [1, True]}, ["True is not a whole number"]),
    # rows scored on other dev examples than the reference's would be paired example by example wrongly
    (
        "a row's own eval subset",
        "  - name: few dev\n    method: lora\n    max_eval_examples: 4\n",
        {},
        ["row 'few dev'", "max_eval_examples=4", "reference row 'PALs'", "set it once at the top"],
    ),
    ("one dev example", "", {"max_eval_examples": 1}, ["'mood' would be scored on 1 dev example", "at least 2"]),
    ("an unknown separate budget", "", {"separate_budget": "more"}, ["separate_budget='more'", "per_task_steps"]),
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


def test_an_empty_dev_split_is_refused_before_any_folder_exists(user_tasks, tiny_model_dir, tmp_path):
    tasks = tmp_path / "tasks"
    shutil.copytree(user_tasks.parent, tasks, ignore=shutil.ignore_patterns("grid.yaml"))
    (tasks / "mood" / "dev.csv").write_text("text,label\n")
    grid = write_grid(tasks, tiny_model_dir, rows="rows:\n" + PALS)
    with pytest.raises(PalsError) as refused:  # the data's own error, before the first run rather than in it
        compare(grid, tmp_path / "out")
    assert "mood/dev.csv: no data rows" in str(refused.value)
    assert not (tmp_path / "out").exists()


SHADOWED = (
    PALS + "  - name: long\n    method: lora\n    max_steps: 6\n  - name: once\n    method: houlsby\n    seeds: [1]\n"
)


@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"max_steps": 2}, ["overrides={'max_steps': ...}", "row 'long' sets max_steps itself", "max_steps: 6"]),
        ({"seeds": [5]}, ["overrides={'seeds': ...}", "row 'once' sets seeds itself"]),
        ({"max_step": 2}, ["overrides={'max_step': ...}", "unknown setting 'max_step'", "max_steps"]),
        ({"output_dir": "x"}, ["overrides={'output_dir': ...}", "cannot be set"]),
    ],
)
def test_python_overrides_a_row_shadows_or_misspelt_are_refused_naming_the_argument(
    overrides, words, user_tasks, tiny_model_dir, tmp_path
):
    grid = write_grid(user_tasks.parent, tiny_model_dir, rows="rows:\n" + SHADOWED)
    with pytest.raises(ConfigError) as refused:
        compare(grid, tmp_path / "out", overrides=overrides)
    for word in words:
        assert word in str(refused.value)
    assert "command line" not in str(refused.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "options, words",
    [
        (["--max-steps", "2"], ["--max-steps: row 'long' sets max_steps itself", "remove max_steps from that row"]),
        (["--seeds", "1", "2"], ["--seeds: row 'once' sets seeds itself"]),
    ],
)
def test_command_line_options_a_row_shadows_are_refused_naming_the_option(
    options, words, user_tasks, tiny_model_dir, tmp_path, capsys
):
    grid = write_grid(user_tasks.parent, tiny_model_dir, rows="rows:\n" + SHADOWED)
    with pytest.raises(SystemExit) as ended:
        main(["compare", "--config", str(grid), "--output-dir", str(tmp_path / "out"), *options])
    assert ended.value.code == 2
    error = capsys.readouterr().err
    for word in words:
        assert word in error
    assert not (tmp_path / "out").exists()


def test_command_line_settings_replace_the_grids(user_tasks, tiny_model_dir, tmp_path):
    grid = write_grid(user_tasks.parent, tiny_model_dir, rows="rows:\n" + PALS)
    plan = compare(grid, tmp_path / "out", overrides={"seeds": [7], "max_steps": 2, "tasks": ["mood"]}, dry_run=True)
    [run] = plan["rows"][0]["runs"]
    assert (run["seed"], run["tasks"]) == (7, ["mood"])
    with pytest.raises(ConfigError, match="unknown setting 'max_step'"):
        compare(grid, tmp_path / "out", overrides={"max_step": 2}, dry_run=True)
    assert not (tmp_path / "out").exists()
