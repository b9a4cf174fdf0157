"""From a comparison to a colleague and to new data, as a user walks it: three tasks of one's own (a
``save_to_disk`` DatasetDict, a Hub-style Parquet folder, a CSV), a small compare, ``--export ROW --out DIR
--with-base``, then the card's adapters block in a fresh process with the harness, datasets, evaluate and PEFT
blocked and no hub, predicting what ``pals-bench predict`` predicts; the export copied elsewhere evaluating; new
files predicted and scored with ``--file``."""

import json
import math
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
from compare_grids import write_grid
from helpers import REPO

from pals_adapters.errors import ConfigError
from pals_adapters.harness.cli import main

BLOCKED = ["pals_adapters.harness", "datasets", "evaluate", "peft"]
WORDS = ["good", "bad", "fine", "awful", "great", "poor", "nice", "dull"]
ROWS = """
rows:
  - name: PALs frozen
    method: pals
    base: frozen
  - name: separate models
    method: separate
"""


def _texts(rng, n):
    texts = [" ".join(rng.choice(WORDS) for _ in range(5)) for _ in range(n)]
    return texts, [int(t.count("good") + t.count("great") > 1) for t in texts]


def write_project(folder):
    """A project of three tasks: ``reviews`` (a save_to_disk DatasetDict with a ClassLabel), ``topics`` (a
    Hub-style Parquet folder), ``mood`` (CSV files), and the task file naming them."""
    rng = random.Random(0)
    (folder / "mood").mkdir(parents=True)
    for split, n in (("train", 24), ("dev", 12)):
        texts, labels = _texts(rng, n)
        (folder / "mood" / f"{split}.csv").write_text(
            "text,label\n" + "".join(f"{t},{y}\n" for t, y in zip(texts, labels))
        )
    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["neg", "pos"])})
    splits = {}
    for split, n in (("train", 24), ("validation", 12)):
        texts, labels = _texts(rng, n)
        splits[split] = datasets.Dataset.from_dict({"text": texts, "label": labels}, features=features)
    datasets.DatasetDict(splits).save_to_disk(str(folder / "reviews"))
    (folder / "topics" / "data").mkdir(parents=True)
    for split, n in (("train", 24), ("validation", 12)):
        texts, labels = _texts(rng, n)
        names = ["sports" if y else "news" for y in labels]
        data = datasets.Dataset.from_dict({"text": texts, "label": names})
        data.to_parquet(str(folder / "topics" / "data" / f"{split}-00000-of-00001.parquet"))
    (folder / "tasks.yaml").write_text(
        """tasks:
  - name: mood
    train: mood/train.csv
    validation: mood/dev.csv
  - name: reviews
    dataset: {from_disk: reviews}
  - name: topics
    dataset: {path: topics}
"""
    )
    return folder / "tasks.yaml"


@pytest.fixture(scope="module")
def handed_off(tiny_model_dir, tmp_path_factory):
    """(project folder, comparison folder, the row's export) after compare, --report-only and --export."""
    from pals_adapters.harness import compare

    project = tmp_path_factory.mktemp("handoff") / "project"
    write_project(project)
    grid = write_grid(project, tiny_model_dir, rows=ROWS, seeds=[1], reference="PALs frozen", export=True, max_steps=2)
    out = project / "comparison"
    compare(grid, out)
    assert main(["compare", "--config", str(grid), "--output-dir", str(out), "--report-only"]) == 0
    handoff = project / "handoff"
    args = ["compare", "--config", str(grid), "--output-dir", str(out), "--export", "PALs frozen"]
    assert main([*args, "--out", str(handoff), "--with-base"]) == 0  # trains nothing: it reads the finished run
    return project, out, handoff


# Runs each (folder, code) in a fresh namespace from its folder, the modules of argv[2:] blocked; prints the
# logits of each block.
RUNNER = """
import contextlib, io, json, os, sys
for name in sys.argv[2:]:
    sys.modules[name] = None
results = []
for folder, code in json.load(open(sys.argv[1])):
    os.chdir(folder)
    namespace, printed = {"__name__": "__main__"}, io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, os.path.join(folder, "README.md"), "exec"), namespace)
    results.append({"logits": namespace["logits"][0].tolist(), "printed": printed.getvalue()})
print(json.dumps(results))
"""


def _adapters_block(card):
    blocks = card.read_text(encoding="utf-8").split("```python\n")[1:]
    return next(block.split("```")[0] for block in blocks if "AutoAdapterModel" in block)


def test_a_row_handed_off_with_its_base_predicts_in_the_light_install_what_pals_bench_predicts(
    handed_off, tmp_path, capsys
):
    project, comparison, handoff = handed_off
    colleague = tmp_path / "colleague" / "handoff"  # another machine's folder: no project, no base model beside it
    shutil.copytree(handoff, colleague)
    tasks = ["mood", "reviews", "topics"]
    assert sorted(p.name for p in colleague.iterdir()) == ["base", *tasks]
    jobs = [[str(colleague / task), _adapters_block(colleague / task / "README.md")] for task in tasks]
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    (tmp_path / "runner.py").write_text(RUNNER)
    empty_cache = tmp_path / "no-hub"
    empty_cache.mkdir()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_CACHE": str(empty_cache)}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    done = subprocess.run(
        [sys.executable, str(tmp_path / "runner.py"), str(tmp_path / "jobs.json"), *BLOCKED],
        cwd=tmp_path,  # another directory than the project's
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "none are activated" not in done.stderr  # the block activates the adapter as it loads it
    results = json.loads(done.stdout.strip().splitlines()[-1])
    (tmp_path / "one.csv").write_text("id,text\nfirst,A first sentence.\n")  # the card's example, as a file
    for task, result in zip(tasks, results):
        answers = tmp_path / f"{task}.jsonl"
        main(["predict", str(colleague / task), "--file", str(tmp_path / "one.csv"), "--out", str(answers)])
        answer = json.loads(answers.read_text())
        exp = [math.exp(x - max(result["logits"])) for x in result["logits"]]
        probabilities = [x / sum(exp) for x in exp]
        assert answer["id"] == "first" and answer["prediction"] in result["printed"], task
        assert list(answer["probabilities"].values()) == pytest.approx(probabilities, abs=1e-5), task
    assert set(json.loads(answers.read_text())["probabilities"]) == {"news", "sports"}  # by label name


def test_the_card_says_where_in_the_comparison_the_run_stands(handed_off):
    project, comparison, handoff = handed_off
    report = json.loads((comparison / "comparison.json").read_text())
    row = next(r for r in report["rows"] if r["name"] == "PALs frozen")
    card = (handoff / "mood" / "README.md").read_text(encoding="utf-8")
    assert "## In the comparison" in card and "row `PALs frozen` (seed 1" in card
    cells = " | ".join(f"{row['runs'][0]['scores'][k]:.1f}" for k in ["mood", "reviews", "topics", "average"])
    assert f"| this run (seed 1) | {cells} |" in card
    assert str(project) not in card and 'base = "../base"' in card  # names, never this machine's paths


def test_the_export_copied_elsewhere_evaluates(handed_off, tmp_path, capsys):
    project, _, handoff = handed_off
    moved = tmp_path / "moved-project"
    shutil.copytree(project, moved)  # the project copied whole: the data found relative to the export
    main(["evaluate", str(moved / "handoff")])
    printed = capsys.readouterr().out
    for task in ("mood", "reviews", "topics"):
        accuracy = json.loads((handoff / task / "manifest.json").read_text())["metrics"]["accuracy"]
        assert f"{task}: {task}_accuracy={100 * accuracy:.2f}" in printed
    alone = tmp_path / "alone"
    shutil.copytree(handoff, alone)  # the export alone: the data is given by its task file
    with pytest.raises(SystemExit):
        main(["evaluate", str(alone / "mood")])
    assert "--task-file" in capsys.readouterr().err
    main(["evaluate", str(alone / "mood"), "--task-file", str(project / "tasks.yaml")])
    accuracy = json.loads((handoff / "mood" / "manifest.json").read_text())["metrics"]["accuracy"]
    assert f"mood: mood_accuracy={100 * accuracy:.2f}" in capsys.readouterr().out


def test_new_files_are_predicted_and_scored_with_file(handed_off, tmp_path, capsys):
    _, _, handoff = handed_off
    (tmp_path / "new.jsonl").write_text(
        json.dumps({"id": 7, "text": "good great good"}) + "\n" + json.dumps({"id": "x", "text": "bad dull"}) + "\n"
    )
    main(["predict", str(handoff / "reviews"), "--file", str(tmp_path / "new.jsonl"), "--out", str(tmp_path)])
    rows = (tmp_path / "reviews-new.tsv").read_text().splitlines()
    assert rows[0] == "id\tprediction\tprobability" and [r.split("\t")[0] for r in rows[1:]] == ["7", "x"]
    assert all(r.split("\t")[1] in ("neg", "pos") for r in rows[1:])  # the labels by name
    (tmp_path / "labelled.csv").write_text("text,label\ngood great good,1\nbad dull poor,0\nfine nice,0\n")
    capsys.readouterr()
    main(["evaluate", str(handoff / "mood"), "--file", str(tmp_path / "labelled.csv")])
    printed = capsys.readouterr().out
    assert f"mood on {tmp_path / 'labelled.csv'}: mood_accuracy=" in printed and "(3 examples of" in printed
    with pytest.raises(SystemExit):  # several tasks: the task's folder is asked for
        main(["predict", str(handoff), "--file", str(tmp_path / "new.jsonl"), "--out", str(tmp_path)])
    assert "give the task's folder" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a file without the task's text column
        main(["evaluate", str(handoff / "mood"), "--file", str(tmp_path / "new.jsonl")])
    assert "no column 'label'" in capsys.readouterr().err


def test_a_task_file_may_add_a_test_split_and_a_dataset_task_is_told_its_splits(handed_off, tmp_path, capsys):
    project, _, handoff = handed_off
    with pytest.raises(SystemExit):
        main(["predict", str(handoff), "--out", str(tmp_path / "p")])
    err = capsys.readouterr().err
    assert "mood: add 'test: FILE'" in err and "reviews: add it to the task's splits" in err and "--file" in err
    text = (
        (project / "tasks.yaml")
        .read_text()
        .replace("validation: mood/dev.csv", "validation: mood/dev.csv\n    test: mood/dev.csv")
    )
    (project / "with-test.yaml").write_text(text)
    main(
        ["predict", str(handoff / "mood"), "--task-file", str(project / "with-test.yaml"), "--out", str(tmp_path / "p")]
    )
    assert len((tmp_path / "p" / "mood-test.tsv").read_text().splitlines()) == 13


def test_export_errors_name_the_rows_the_seeds_and_the_missing_run(handed_off, tmp_path):
    from pals_adapters.harness import export_row

    project, comparison, _ = handed_off
    grid = project / "grid.yaml"
    with pytest.raises(ConfigError, match="no such row; its rows: 'PALs frozen', 'separate models'"):
        export_row(grid, comparison, "PALs", tmp_path / "x")
    with pytest.raises(ConfigError, match=r"--seed 2: row 'separate models' has no run of that seed; its seeds: \[1\]"):
        export_row(grid, comparison, "separate models", tmp_path / "x", seed=2)
    with pytest.raises(ConfigError, match="is not finished .* train it first: pals-bench compare"):
        export_row(grid, comparison, "PALs frozen", tmp_path / "x", seed=2, overrides={"seeds": [1, 2]})
    assert not (tmp_path / "x").exists()


def test_a_row_of_separate_models_gives_one_export_per_task(handed_off, tmp_path):
    from pals_adapters.harness import export_row
    from pals_adapters.harness.export import load_task

    project, comparison, _ = handed_off
    written = export_row(project / "grid.yaml", comparison, "separate models", tmp_path / "separate")
    assert sorted(written) == ["mood", "mood/base", "reviews", "reviews/base", "topics", "topics/base"]
    for task in ("mood", "reviews", "topics"):  # each task with its own fine-tuned base
        assert sorted(p.name for p in (tmp_path / "separate" / task).iterdir()) == ["base", task]
        assert list(load_task(tmp_path / "separate" / task / task).tasks) == [task]
    assert "row `separate models` (seed 1" in (tmp_path / "separate" / "topics" / "topics" / "README.md").read_text()


def test_a_run_that_kept_no_export_says_how_to_get_one(handed_off, tmp_path):
    from pals_adapters.harness import export_row

    project, comparison, _ = handed_off
    copy = shutil.copytree(comparison, tmp_path / "comparison")
    for export in copy.glob("runs/pals-*/export"):
        shutil.rmtree(export)
    with pytest.raises(ConfigError, match="the run kept no export .* pals-bench export .* --out DIR"):
        export_row(project / "grid.yaml", copy, "PALs frozen", tmp_path / "x")


def test_the_seed_closest_to_the_row_s_mean_is_exported_by_default():
    from pals_adapters.harness.comparison.handoff import _chosen_seed
    from pals_adapters.harness.comparison.reporting.rows import FinishedRun, RowResult

    def finished(seed, score):
        return FinishedRun(seed, Path(f"run-{seed}"), ["mood"], {"metrics": {"mood_score": score}})

    row = RowResult("r", "pals", "frozen", False, ["mood"], [finished(1, 0.5), finished(2, 0.9), finished(3, 0.6)])
    assert _chosen_seed(row, None, [], "grid.yaml", "out") == 3  # mean 0.667: seed 3 is nearest
    assert _chosen_seed(row, 2, [], "grid.yaml", "out") == 2
    tie = RowResult("r", "pals", "frozen", False, ["mood"], [finished(4, 0.4), finished(2, 0.6)])
    assert _chosen_seed(tie, None, [], "grid.yaml", "out") == 2  # a tie: the lowest seed
