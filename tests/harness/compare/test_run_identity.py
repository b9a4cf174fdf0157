"""A run of a comparison is found by everything that changes its scores: its settings, the content of its
data, its tasks' definitions and its base model. A changed input retrains the run into a new folder and
the dry run names what changed; the same inputs elsewhere, or a setting that changes no score, do not."""

import json
import shutil

import datasets
import pytest
from compare_reruns import files_and_times, flip_first_label, one_row_grid, run_folders
from helpers import glue_dir

from pals_adapters.harness import compare


def dev_labels(folder, task):
    lines = (folder / "dev_predictions.jsonl").read_text().splitlines()
    return [row["label"] for row in map(json.loads, lines) if row["task"] == task]


def only_run(data):
    [row] = data["rows"]
    [run] = row["runs"]
    return run


@pytest.mark.parametrize("split", ["dev", "train"])
def test_an_edited_data_file_is_a_new_run_and_the_dry_run_says_which(split, tiny_model_dir, tmp_path, capsys):
    grid = one_row_grid(tmp_path, tiny_model_dir, tasks=["mood"])
    out = tmp_path / "out"
    first = only_run(compare(grid, out))
    old = out / first["run_dir"]
    kept = files_and_times(old)
    flip_first_label(tmp_path / "mood" / f"{split}.csv")
    capsys.readouterr()
    [line] = compare(grid, out, dry_run=True)["rows"][0]["runs"]
    assert line["state"] == "stale" and line["changed"] == [f"{split}.csv changed"]
    assert f"stale ({split}.csv changed)" in capsys.readouterr().out
    report = compare(grid, out, report_only=True)  # the old run's scores are never reported as current
    assert not any(row["runs"] for row in report["rows"]) and report["missing"]["PALs"]
    assert f"stale ({split}.csv changed)" in capsys.readouterr().err
    second = only_run(compare(grid, out))
    new = out / second["run_dir"]
    assert new != old and files_and_times(old) == kept  # the old run is kept as it was
    assert f"had other inputs ({split}.csv changed); training it afresh" in capsys.readouterr().out
    assert json.loads((new / "results.json").read_text())["config"]["resume"] is None
    if split == "dev":  # the new run scored the edited file
        assert dev_labels(new, "mood")[0] == 1 - dev_labels(old, "mood")[0]
    assert only_run(compare(grid, out, dry_run=True))["state"] == "done"


def test_the_same_files_elsewhere_are_the_same_run(tiny_model_dir, tmp_path):
    grid = one_row_grid(tmp_path / "a", tiny_model_dir, tasks=["mood"])
    out = tmp_path / "out"
    compare(grid, out)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.rmtree(tmp_path / "a")  # the project folder moved: the same data, the same run
    assert only_run(compare(tmp_path / "b" / "grid.yaml", out, dry_run=True))["state"] == "done"


def save_reviews(folder, first_label):
    rows = {"text": [f"review {i} {'good' if i % 2 else 'bad'}" for i in range(8)], "label": [i % 2 for i in range(8)]}
    rows["label"][0] = first_label
    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["neg", "pos"])})
    split = datasets.Dataset.from_dict(rows, features=features)
    datasets.DatasetDict({"train": split, "validation": split}).save_to_disk(str(folder))


def test_a_changed_dataset_split_is_a_new_run(tiny_model_dir, tmp_path, capsys):
    save_reviews(tmp_path / "reviews", 0)
    (tmp_path / "tasks.yaml").write_text("tasks:\n  - {name: reviews, dataset: {from_disk: reviews}}\n")
    grid = one_row_grid(tmp_path / "grid", tiny_model_dir, task_file=str(tmp_path / "tasks.yaml"))
    out = tmp_path / "out"
    old = out / only_run(compare(grid, out))["run_dir"]
    shutil.rmtree(tmp_path / "reviews")
    save_reviews(tmp_path / "reviews", 1)  # one label of both splits changed
    line = only_run(compare(grid, out, dry_run=True))
    assert line["state"] == "stale"
    assert line["changed"] == ["task 'reviews' split 'train' changed", "task 'reviews' split 'validation' changed"]
    new = out / only_run(compare(grid, out))["run_dir"]
    assert new != old and dev_labels(new, "reviews")[0] == 1 and dev_labels(old, "reviews")[0] == 0


def small_glue(folder, source, lines=12):
    """An RTE folder with the first lines of each file of ``source``."""
    (folder / "RTE").mkdir(parents=True)
    for name in ("train.tsv", "dev.tsv", "test.tsv"):
        head = (source / "RTE" / name).read_text(encoding="utf-8").splitlines()[:lines]
        (folder / "RTE" / name).write_text("\n".join(head) + "\n", encoding="utf-8")
    return folder


def test_glue_dir_counts_by_its_files(tiny_model_dir, tmp_path):
    if glue_dir() is None:
        pytest.skip("no GLUE folder")
    first = small_glue(tmp_path / "glue-a", glue_dir())
    grid = one_row_grid(tmp_path / "g", tiny_model_dir, tasks=["rte"], task_file=None, glue_dir=str(first))
    out = tmp_path / "out"
    old = out / only_run(compare(grid, out))["run_dir"]
    same = shutil.copytree(first, tmp_path / "glue-copy")
    assert only_run(compare(grid, out, dry_run=True, overrides={"glue_dir": str(same)}))["state"] == "done"
    other = shutil.copytree(first, tmp_path / "glue-b")
    dev = other / "RTE" / "dev.tsv"
    rows = dev.read_text(encoding="utf-8").splitlines()
    label = rows[1].rsplit("\t", 1)[1]
    rows[1] = rows[1].rsplit("\t", 1)[0] + "\t" + ("entailment" if label == "not_entailment" else "not_entailment")
    dev.write_text("\n".join(rows) + "\n", encoding="utf-8")
    line = only_run(compare(grid, out, dry_run=True, overrides={"glue_dir": str(other)}))
    assert line["state"] == "stale" and line["changed"] == ["RTE/dev.tsv changed"]
    new = out / only_run(compare(grid, out, overrides={"glue_dir": str(other)}))["run_dir"]
    assert new != old and dev_labels(new, "rte")[0] == 1 - dev_labels(old, "rte")[0]


def test_a_model_folder_beside_the_grid_is_read_from_there_and_counts_by_its_files(
    tiny_model_dir, tmp_path, monkeypatch
):
    project = tmp_path / "project"
    shutil.copytree(tiny_model_dir, project / "model")
    grid = one_row_grid(project, "model", tasks=["mood"])  # model: "model", beside the grid
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    old = only_run(compare(grid, "out"))["run_dir"]
    assert json.loads((elsewhere / "out" / old / "results.json").read_text())["config"]["model"] == str(
        project / "model"
    )
    config = json.loads((project / "model" / "config.json").read_text())
    config["hidden_act"] = "relu"  # the same weights, another model
    (project / "model" / "config.json").write_text(json.dumps(config))
    line = only_run(compare(grid, "out", dry_run=True))
    assert line["state"] == "stale" and line["changed"] == ["the model changed"]


def test_a_task_added_or_removed_is_a_new_run(tiny_model_dir, tmp_path):
    grid = one_row_grid(tmp_path, tiny_model_dir)  # every task of the task file: mood, closeness
    out = tmp_path / "out"
    compare(grid, out)
    tasks = tmp_path / "tasks.yaml"
    two = tasks.read_text()
    tasks.write_text(two + "  - name: senti2\n    train: mood/train.csv\n    validation: mood/dev.csv\n")
    line = only_run(compare(grid, out, dry_run=True))
    assert line["state"] == "stale" and line["changed"] == ["task 'senti2' added"]
    data = compare(grid, out)
    assert data["tasks"] == ["mood", "closeness", "senti2"] and set(only_run(data)["scores"]) >= {"senti2"}
    tasks.write_text(two.split("  - name: closeness")[0])  # closeness removed: mood alone
    line = only_run(compare(grid, out, dry_run=True))
    assert line["state"] == "stale" and "task 'closeness' removed" in line["changed"]
    data = compare(grid, out)
    assert data["tasks"] == ["mood"] and len(run_folders(out)) == 3


def test_the_old_spelling_of_a_method_and_settings_that_change_no_score_retrain_nothing(
    tiny_model_dir, tmp_path, capsys
):
    rows = "rows:\n  - name: PALs\n    method: full\n"
    grid = one_row_grid(tmp_path, tiny_model_dir, rows=rows, tasks=["mood"])
    out = tmp_path / "out"
    compare(grid, out)  # warns that full is now shared
    before = files_and_times(out / "runs")
    grid.write_text(grid.read_text().replace("method: full", "method: shared"))
    assert only_run(compare(grid, out, dry_run=True, overrides={"logging_steps": 1, "threads": 2}))["state"] == "done"
    capsys.readouterr()
    compare(grid, out)
    assert files_and_times(out / "runs") == before and "compare: training" not in capsys.readouterr().out
