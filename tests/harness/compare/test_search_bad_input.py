"""A ``search:`` a grid file gets wrong is refused before anything trains or any folder is written, with a
ConfigError that names the grid file, the row and what to fix."""

import re
import sys

import pytest
import yaml
from helpers import REPO
from search_grids import write_search_grid, write_signal_task

from pals_adapters.errors import ConfigError
from pals_adapters.harness import compare

CASES = [
    ("unknown setting", {"learning_rate": [1e-3]}, None, "unknown setting 'learning_rate'"),
    (
        "a budget setting",
        {"max_steps": [8, 16]},
        None,
        "'max_steps' cannot be searched: it sets the training budget, which every row gets alike",
    ),
    (
        "the method itself",
        {"method": ["pals", "lora"]},
        None,
        "'method' cannot be searched: it makes the row the method it is; give each method its own row",
    ),
    ("an empty list", {"lr": []}, None, "lr: an empty list; give one candidate or more"),
    ("a twice-given candidate", {"lr": [1e-3, 1e-3]}, None, "a candidate is given twice"),
    ("a range upside down", {"lr": {"log": [1e-2, 1e-4]}, "trials": 4}, None, "low below high"),
    ("a log range from 0", {"lr": {"log": [0, 1e-2]}, "trials": 4}, None, "a log range starts above 0"),
    ("an unknown range", {"lr": {"normal": [1e-4, 1e-2]}, "trials": 4}, None, "{log: [low, high]}"),
    ("a range of a word", {"scale_shared_lr": {"log": [1, 2]}, "trials": 2}, None, "not a number: give its candidates"),
    ("a grid-level seed out of range", None, {"lr": [1e-3], "seed": -1}, "grid.yaml: search: seed=-1: give a whole"),
    ("a range without trials", {"lr": {"log": [1e-4, 1e-2]}}, None, "a range needs a trial count: add trials"),
    ("no trials", {"lr": {"log": [1e-4, 1e-2]}, "trials": 0}, None, "trials=0: give the number of trial runs"),
    ("more trials than candidates", {"lr": [1e-4, 1e-3], "trials": 3}, None, "make only 2 combinations"),
    ("no setting", {"trials": 3}, None, "names no setting to choose"),
    ("selection of 1", None, {"lr": [1e-3], "selection": 1.0}, "grid.yaml: search: selection=1.0: the fraction"),
    ("selection of 0", None, {"lr": [1e-3], "selection": 0}, "selection=0: the fraction"),
    ("a row's own split", {"lr": [1e-3], "selection": 0.2}, None, "'selection' is the same for every row"),
    (
        "a candidate train refuses",
        {"lr": [1e-3, -1.0]},
        None,
        "row 'searched': lr=-1.0: must be > 0 (in the search, with lr=-1.0)",
    ),
    ("a range end train refuses", {"warmup_ratio": {"uniform": [0.0, 1.5]}, "trials": 2}, None, "warmup_ratio=1.5"),
    ("not a mapping", [1e-3], None, "give the settings to choose and their candidates"),
]


def _grid(folder, model, row_search, grid_search):
    write_signal_task(folder)
    row = {"name": "searched", "method": "shared"}
    if row_search is not None:
        row["search"] = row_search
    rows = "reference: searched\n" + yaml.safe_dump({"rows": [row]}, default_flow_style=None)
    shared = {"search": grid_search} if grid_search is not None else {}
    return write_search_grid(folder, model, rows, **shared)


@pytest.mark.parametrize("row_search, grid_search, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_search_is_refused_before_anything_trains(row_search, grid_search, message, tiny_model_dir, tmp_path):
    grid = _grid(tmp_path, tiny_model_dir, row_search, grid_search)
    out = tmp_path / "out"
    with pytest.raises(ConfigError) as caught:
        compare(grid, out)
    assert message in str(caught.value) and str(grid) in str(caught.value)
    assert not out.exists()


def test_selection_is_given_in_search_not_as_a_setting(tiny_model_dir, tmp_path):
    grid = _grid(tmp_path, tiny_model_dir, {"lr": [1e-3]}, None)
    grid.write_text(grid.read_text().replace("max_steps:", "selection: 0.2\nmax_steps:"))
    with pytest.raises(ConfigError, match=r"'selection' cannot be set in a comparison \(give it in search:"):
        compare(grid, tmp_path / "out")


def test_a_search_without_optuna_says_how_to_install_it(tiny_model_dir, tmp_path, monkeypatch):
    grid = _grid(tmp_path, tiny_model_dir, {"lr": [1e-3, 1e-2]}, None)
    monkeypatch.setitem(sys.modules, "optuna", None)  # what `import optuna` meets where it is not installed
    with pytest.raises(
        ConfigError, match=r'a search needs Optuna, which is not installed: pip install "pals-adapters\[search\]"'
    ):
        compare(grid, tmp_path / "out", dry_run=True)
    assert not (tmp_path / "out").exists()


def test_a_row_left_out_of_the_grids_search_makes_none(tiny_model_dir, tmp_path, capsys):
    grid = _grid(tmp_path, tiny_model_dir, False, {"lr": [1e-3, 1e-2]})
    plan = compare(grid, tmp_path / "out", dry_run=True)
    assert plan["search"] == {} and "search of row" not in capsys.readouterr().out


def test_the_worked_example_of_the_docs_plans_a_search_of_every_row(user_tasks, tiny_model_dir, tmp_path, capsys):
    """docs/compare.md's example grid (on the user's tasks and a tiny model): every row's search planned with
    the same trial count, nothing written."""
    page = (REPO / "docs" / "compare.md").read_text(encoding="utf-8")
    example = next(b for b in re.findall(r"^```yaml\n(.*?)^```", page, flags=re.S | re.M) if "search:" in b)
    grid = user_tasks.parent / "searched.yaml"
    shared = {"task_file": "tasks.yaml", "model": str(tiny_model_dir), "max_steps": 4, "batch_size": 8}
    shared.update(max_length=24, seeds=[1, 2, 3], reference="PALs")
    grid.write_text(yaml.safe_dump(shared) + example)
    plan = compare(grid, tmp_path / "out", dry_run=True)
    printed = capsys.readouterr().out
    assert set(plan["search"]) == {"PALs", "Houlsby", "LoRA r=8, frozen base", "separate models"}
    assert printed.count(": 8 trials (tpe over adapter_lr, lr), 0 done") == 4
    assert not (tmp_path / "out").exists()


def test_report_only_names_a_search_not_finished(tiny_model_dir, tmp_path):
    grid = _grid(tmp_path, tiny_model_dir, {"lr": [1e-3, 1e-2]}, None)
    with pytest.raises(ConfigError, match=r"--report-only: the search of row 'searched' is not finished"):
        compare(grid, tmp_path / "out", report_only=True)
    assert not (tmp_path / "out" / "runs").exists()
