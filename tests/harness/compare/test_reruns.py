"""A comparison run again after an interruption, an edit or damage: an interrupted run on changed data
starts afresh, a new checkpoint cadence resumes, a damaged run record is retrained, a missing export is
named with the way to get it, and a bad output folder is refused before planning."""

import json

import pytest
from compare_reruns import flip_first_label, one_row_grid, run_folders

from pals_adapters.errors import ConfigError
from pals_adapters.harness import compare
from pals_adapters.harness.cli import main


def interrupted(tmp_path, model_dir, **shared):
    """A grid and its output folder holding one run stopped after its last checkpoint (before its results)."""
    grid = one_row_grid(tmp_path, model_dir, tasks=["mood"], keep_checkpoints=True, **shared)
    out = tmp_path / "out"
    [run] = compare(grid, out)["rows"][0]["runs"]
    folder = out / run["run_dir"]
    for name in ("results.json", "dev_predictions.jsonl"):
        (folder / name).unlink()
    assert list(folder.glob("checkpoint-*"))
    return grid, out, folder


def the_run(out):
    return json.loads((out / "comparison.json").read_text())["rows"][0]["runs"][0]


def test_an_interrupted_run_on_edited_data_starts_afresh_in_a_new_folder(tiny_model_dir, tmp_path, capsys):
    grid, out, old = interrupted(tmp_path, tiny_model_dir)
    flip_first_label(tmp_path / "mood" / "train.csv")
    capsys.readouterr()
    compare(grid, out)
    said = capsys.readouterr().out
    assert "the interrupted run in" in said and "(train.csv changed); not resuming it, training afresh" in said
    new = out / the_run(out)["run_dir"]
    assert new != old and json.loads((new / "results.json").read_text())["config"]["resume"] is None
    assert list(old.glob("checkpoint-*")) and not (old / "results.json").exists()  # left as it was


def test_a_new_checkpoint_cadence_resumes_the_interrupted_run(tiny_model_dir, tmp_path):
    grid, out, folder = interrupted(tmp_path, tiny_model_dir)
    grid.write_text(grid.read_text().replace("keep_checkpoints: true", "keep_checkpoints: true\nsave_steps: 2"))
    assert compare(grid, out, dry_run=True)["rows"][0]["runs"][0]["state"] == "partial"
    compare(grid, out)
    results = json.loads((folder / "results.json").read_text())
    assert results["config"]["resume"] is not None and run_folders(out) == [folder.name]


@pytest.mark.parametrize("damage", ['{"metrics": {"mood_sc', "{}"], ids=["truncated", "empty"])
def test_a_damaged_run_record_is_trained_again(damage, tiny_model_dir, tmp_path, capsys):
    grid = one_row_grid(tmp_path, tiny_model_dir, tasks=["mood"])
    out = tmp_path / "out"
    compare(grid, out)
    folder = out / the_run(out)["run_dir"]
    (folder / "results.json").write_text(damage)
    line = compare(grid, out, dry_run=True)["rows"][0]["runs"][0]
    assert line["state"] == "damaged"
    capsys.readouterr()
    data = compare(grid, out)
    said = capsys.readouterr()
    assert "results.json" in said.err and "not a finished run; it is trained again" in said.err
    assert (folder / "results.json.damaged").read_text() == damage  # kept, never silently lost
    assert json.loads((folder / "results.json").read_text())["metrics"]["mood_score"] == pytest.approx(
        data["rows"][0]["runs"][0]["scores"]["mood"] / 100
    )


def test_runs_that_is_a_file_is_refused_before_planning(tiny_model_dir, tmp_path, capsys):
    grid = one_row_grid(tmp_path, tiny_model_dir, tasks=["mood"])
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "runs").write_text("not a folder")
    for dry_run in (True, False):
        with pytest.raises(ConfigError, match=r"runs is a file, not a folder"):
            compare(grid, tmp_path / "out", dry_run=dry_run)
    with pytest.raises(SystemExit) as ended:
        main(["compare", "--config", str(grid), "--output-dir", str(tmp_path / "out")])
    assert ended.value.code == 2 and "runs is a file" in capsys.readouterr().err


def test_a_finished_run_without_the_export_the_grid_now_asks_for_says_how_to_get_it(tiny_model_dir, tmp_path, capsys):
    grid = one_row_grid(tmp_path, tiny_model_dir, tasks=["mood"])  # export: false
    out = tmp_path / "out"
    compare(grid, out)
    folder = out / the_run(out)["run_dir"]
    capsys.readouterr()
    line = compare(grid, out, dry_run=True, overrides={"export": True})["rows"][0]["runs"][0]
    assert line["state"] == "done"
    said = capsys.readouterr().out
    assert "done (no export (trained with export: false); to get one:" in said and f"delete {folder}" in said
    compare(grid, out, overrides={"export": True})
    assert "no export (trained with export: false)" in capsys.readouterr().err
    assert not (folder / "export").exists()  # not retrained for it


def test_the_report_records_the_python_call_or_the_command(tiny_model_dir, tmp_path):
    grid = one_row_grid(tmp_path, tiny_model_dir, tasks=["mood"])
    out = tmp_path / "out"
    data = compare(grid, out, overrides={"lr": 0.002})
    assert data["command"] == f"compare({str(grid)!r}, {str(out)!r}, overrides={{'lr': 0.002}})"
    main(["compare", "--config", str(grid), "--output-dir", str(out), "--lr", "0.002", "--report-only"])
    recorded = json.loads((out / "comparison.json").read_text())["command"]
    assert recorded == f"pals-bench compare --config {grid} --output-dir {out} --report-only --lr 0.002"
