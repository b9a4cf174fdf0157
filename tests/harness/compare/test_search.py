"""A row's ``search:`` in compare: its settings chosen by trials scored on a selection part of the training
rows, the row's seeds then trained with them and scored on dev; the report shows the search. The dev set
plays no part in the choice."""

import csv
import json

import pytest
from search_grids import ROWS, write_search_grid, write_signal_task

from pals_adapters.errors import ConfigError
from pals_adapters.harness import compare, export_row

ROWS_YAML = """
reference: at the default
rows:
  - name: fine-tuned, searched
    method: shared
    search: {lr: [1.0e-6, 1.0e-2]}
  - name: at the default
    method: shared
"""


@pytest.fixture(scope="module")
def searched(tiny_model_dir, tmp_path_factory):
    """(grid, output folder, report data) of a grid whose searched row learns only at its second candidate."""
    folder = tmp_path_factory.mktemp("signal")
    write_signal_task(folder)
    grid = write_search_grid(folder, tiny_model_dir, ROWS_YAML, search={"selection": 0.25})
    out = tmp_path_factory.mktemp("out")
    return grid, out, compare(grid, out)


def test_the_search_picks_the_learning_rate_that_learns_and_the_row_rises_above_the_floor(searched):
    _, out, data = searched
    rows = {row["name"]: row for row in data["rows"]}
    search = rows["fine-tuned, searched"]["search"]
    assert search["chosen"] == {"lr": 1e-2}
    scores = {trial["settings"]["lr"]: trial["selection_score"] for trial in search["trials"]}
    assert scores[1e-2] > scores[1e-6] + 20
    floor = data["floor"]["signal"]["score"]
    assert rows["at the default"]["flags"]["average"]["near_floor"]  # the default learning rate learns nothing
    assert rows["fine-tuned, searched"]["mean"]["signal"] > floor + 25  # the chosen one does, on dev
    assert not rows["fine-tuned, searched"]["flags"]["average"]["near_floor"]
    for run in rows["fine-tuned, searched"]["runs"]:  # the final runs: the chosen lr, the full training data
        results = json.loads((out / run["run_dir"] / "results.json").read_text())
        assert results["config"]["lr"] == 1e-2 and results["config"]["selection"] is None
        assert results["train_sizes"] == {"signal": ROWS[0]} and results["scored_on"] == "dev"
    assert "search" not in rows["at the default"]


def test_the_report_shows_each_trial_the_choice_and_the_cost(searched):
    _, out, data = searched
    search = next(row for row in data["rows"] if row["name"] == "fine-tuned, searched")["search"]
    assert {"space", "trials", "chosen"} <= set(search) and search["space"] == {"lr": [1e-6, 1e-2]}
    assert search["selection"] == 0.25 and search["sampler"] == "grid" and search["trials_per_row"] == 2
    for trial in search["trials"]:
        assert set(trial) >= {"settings", "selection_score", "run_dir"}
        results = json.loads((out / trial["run_dir"] / "results.json").read_text())
        assert results["scored_on"] == "selection" and results["config"]["lr"] == trial["settings"]["lr"]
        assert trial["run_dir"].startswith("search/runs/")
        assert 100 * results["metrics"]["average"] == pytest.approx(trial["selection_score"])
    assert search["cost"]["runs"] == 2 and search["cost"]["steps"] == 2 * 32 and search["cost"]["seconds"] > 0
    written = json.loads((out / "comparison.json").read_text())
    assert written["rows"][0]["search"] == search
    table = (out / "comparison.md").read_text()
    assert "fine-tuned, searched: chose lr=0.01 (grid, 2 of 2 trials, selection 0.25 of the training rows" in table
    assert "cost 2 runs, 64 steps" in table
    assert "| 1 | 0.01 | 100.0 | chosen |" in table or "| 0 | 0.01 | 100.0 | chosen |" in table


def test_a_finished_search_is_read_not_redone(searched, capsys):
    grid, out, data = searched
    trials = sorted(out.glob("search/runs/*/results.json"))
    stamps = [path.stat().st_mtime_ns for path in trials]
    again = compare(grid, out)
    assert "compare: training" not in capsys.readouterr().out
    assert [path.stat().st_mtime_ns for path in sorted(out.glob("search/runs/*/results.json"))] == stamps
    assert again["rows"][0]["search"]["chosen"] == data["rows"][0]["search"]["chosen"]


def test_the_dry_run_lists_the_trials_and_their_state(searched, capsys):
    grid, out, _ = searched
    plan = compare(grid, out, dry_run=True)
    printed = capsys.readouterr().out
    assert "search of row 'fine-tuned, searched': 2 trials (grid over lr), 2 done" in printed
    assert "trial 0 lr=" in printed and "trial 1 lr=" in printed
    assert len(plan["search"]["fine-tuned, searched"]["trials"]) == 2


def test_a_searched_row_is_handed_over_from_the_runs_of_its_chosen_settings(searched, tmp_path):
    """export_row finds the row's runs with the settings its search chose (this grid keeps no exports, so it
    says how to get one from them); before the search has finished, it says so."""
    grid, out, data = searched
    final = {str(out / run["run_dir"]) for run in data["rows"][0]["runs"]}
    with pytest.raises(ConfigError, match="the run kept no export") as caught:
        export_row(grid, out, "fine-tuned, searched", tmp_path / "handoff")
    assert any(folder in str(caught.value) for folder in final)
    with pytest.raises(ConfigError, match="row 'fine-tuned, searched': its search is not finished"):
        export_row(grid, tmp_path / "not-run", "fine-tuned, searched", tmp_path / "handoff")


def test_the_dry_run_of_a_new_search_lists_its_candidates_and_writes_nothing(searched, tmp_path, capsys):
    grid, out, _ = searched
    fresh = tmp_path / "fresh"
    compare(grid, fresh, dry_run=True)
    printed = capsys.readouterr().out
    assert "search of row 'fine-tuned, searched': 2 trials (grid over lr), 0 done" in printed
    assert "candidate lr=0.01: to train" in printed and "candidate lr=1e-06: to train" in printed
    assert "seeds 1, 2: trained once its search has chosen their settings" in printed
    assert not fresh.exists()
    trained = {path.name for path in out.glob("search/runs/*")}  # the same trials, the same folder names
    assert {line.split("/")[-1] for line in printed.splitlines() if "candidate" in line} == trained


def test_the_dev_set_plays_no_part_in_the_search(searched, tmp_path, capsys):
    """Dev labels scrambled after the search: the same trials, not trained again, the same choice; the final
    runs (scored on dev) are trained again. The rows held out are training rows, none of them a dev row."""
    grid, out, data = searched
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in grid.parent.rglob("*"):
        if path.is_file():
            (copy / path.relative_to(grid.parent)).parent.mkdir(parents=True, exist_ok=True)
            (copy / path.relative_to(grid.parent)).write_bytes(path.read_bytes())
    scrambled = [1 - i % 2 for i in range(ROWS[1])]  # every dev label flipped
    write_signal_task(copy, dev_labels=scrambled)
    copied_grid = copy / "grid.yaml"
    trials = {p.parent.name: p.stat().st_mtime_ns for p in out.glob("search/runs/*/results.json")}
    again = compare(copied_grid, out)
    assert {p.parent.name: p.stat().st_mtime_ns for p in out.glob("search/runs/*/results.json")} == trials
    before = next(row for row in data["rows"] if row["name"] == "fine-tuned, searched")
    after = next(row for row in again["rows"] if row["name"] == "fine-tuned, searched")
    assert after["search"]["trials"] == before["search"]["trials"] and after["search"]["chosen"] == {"lr": 1e-2}
    assert {run["run_dir"] for run in after["runs"]}.isdisjoint(run["run_dir"] for run in before["runs"])
    assert after["mean"]["signal"] < before["mean"]["signal"]  # the dev labels did change the dev scores
    capsys.readouterr()
    ids = {split: _ids(grid.parent / "signal" / f"{split}.csv") for split in ("train", "dev")}
    for trial in after["search"]["trials"]:
        split = json.loads((out / trial["run_dir"] / "selection_split.json").read_text())["signal"]
        held_out = set(split["selection_ids"])
        assert held_out == {ids["train"][i] for i in split["selection_rows"]}  # the rows of the training file
        assert len(held_out) == round(0.25 * ROWS[0]) and split["training_rows"] == ROWS[0] - len(held_out)
        assert held_out.isdisjoint(ids["dev"]) and split["seed"] == 1  # the search's seed: the grid's first


def _ids(path) -> list[str]:
    with open(path, newline="") as handle:
        return [row["id"] for row in csv.DictReader(handle)]


def test_trials_in_two_processes_score_and_choose_as_in_one(tiny_model_dir, tmp_path):
    write_signal_task(tmp_path)
    rows = "reference: searched\nrows:\n  - name: searched\n    method: shared\n    search: {lr: [1.0e-6, 1.0e-2]}\n"
    grid = write_search_grid(tmp_path, tiny_model_dir, rows, seeds=[1], search={"selection": 0.25})
    one, two = (compare(grid, tmp_path / f"jobs{jobs}", jobs=jobs)["rows"][0] for jobs in (1, 2))
    assert two["search"]["chosen"] == one["search"]["chosen"] == {"lr": 1e-2}
    scores = [[(t["settings"], t["selection_score"]) for t in row["search"]["trials"]] for row in (one, two)]
    assert scores[0] == scores[1] and len(scores[0]) == 2
    assert two["mean"] == one["mean"]
