"""Tasks whose data is a `datasets` dataset: a local folder laid out as a Hub repository (Parquet per split,
one with a README declaring configurations and ClassLabel features), a save_to_disk folder, a Hub id (its
load_dataset call checked), trained beside a file task, exported, evaluated and predicted; and the bad
inputs, refused before anything is written."""

import json
import shutil
from pathlib import Path

import datasets
import pytest
from datasets.exceptions import DatasetNotFoundError

from pals_adapters.errors import ConfigError, DataError
from pals_adapters.harness.cli import main
from pals_adapters.harness.comparison.grid import plan_runs, read_grid
from pals_adapters.harness.export.card import dataset_of
from pals_adapters.harness.export.manifest import read_task_manifest
from pals_adapters.harness.tasks import dataset_source
from pals_adapters.harness.tasks.dataset_rows import dataset_record, pinned
from pals_adapters.harness.tasks.splits import load_split
from pals_adapters.harness.tasks.user_tasks import custom_task, load_task_specs
from pals_adapters.harness.training import runner

SENTIMENT = datasets.ClassLabel(names=["neg", "pos"])
NLI = datasets.ClassLabel(names=["entailment", "neutral", "contradiction"])
README = """---
configs:
- config_name: reviews
  data_files:
  - split: train
    path: reviews/train.parquet
  - split: validation
    path: reviews/validation.parquet
  - split: test
    path: reviews/test.parquet
- config_name: other
  data_files: other/*.parquet
---
# Reviews
"""


def reviews(n: int, labels: bool = True) -> datasets.Dataset:
    feats = datasets.Features({"text": datasets.Value("string"), "label": SENTIMENT, "n": datasets.Value("int64")})
    rows = {"text": [f"review {i} {'great' if i % 2 else 'awful'}" for i in range(n)], "n": list(range(n))}
    rows["label"] = [i % 2 for i in range(n)] if labels else [-1] * n
    return datasets.Dataset.from_dict(rows, features=feats)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """The project folder of the tests: a Hub-layout folder with a README, a plain Parquet folder (a pair
    regression), a save_to_disk folder (a pair classification) and a CSV task, all in one task file."""
    root = tmp_path_factory.mktemp("project")
    hub = root / "data" / "hub_repo"
    for split, data in (("train", reviews(16)), ("validation", reviews(8)), ("test", reviews(4, labels=False))):
        (hub / "reviews").mkdir(parents=True, exist_ok=True)
        data.to_parquet(str(hub / "reviews" / f"{split}.parquet"))
    (hub / "other").mkdir()
    reviews(4).to_parquet(str(hub / "other" / "train.parquet"))
    (hub / "README.md").write_text(README)
    for split in ("train", "validation"):
        (root / "data" / "scores").mkdir(exist_ok=True)
        rows = {"s1": [f"a {i}" for i in range(10)], "s2": [f"b {i % 3}" for i in range(10)]}
        rows["score"] = [float(i % 5) for i in range(10)]
        datasets.Dataset.from_dict(rows).to_parquet(str(root / "data" / "scores" / f"{split}.parquet"))
    feats = datasets.Features(
        {"premise": datasets.Value("string"), "hypothesis": datasets.Value("string"), "label": NLI}
    )
    nli = {"premise": [f"p {i}" for i in range(12)], "hypothesis": [f"h {i % 4}" for i in range(12)]}
    nli["label"] = [i % 3 for i in range(12)]
    splits = {s: datasets.Dataset.from_dict(nli, features=feats) for s in ("train", "validation", "test")}
    datasets.DatasetDict(splits).save_to_disk(str(root / "data" / "nli_disk"))
    (root / "data" / "files.csv").write_text("text,label\n" + "".join(f"line {i},{'ab'[i % 2]}\n" for i in range(10)))
    (root / "tasks.yaml").write_text(
        "tasks:\n"
        "  - {name: reviews, dataset: {path: data/hub_repo, name: reviews}}\n"
        "  - {name: scores, dataset: {path: data/scores}, text_columns: [s1, s2], label_column: score,"
        " type: regression, splits: {train: 'train[:80%]', validation: validation}}\n"
        "  - {name: nli, dataset: {from_disk: data/nli_disk}, text_columns: [premise, hypothesis]}\n"
        "  - {name: files, train: data/files.csv, validation: data/files.csv}\n"
    )
    return root


def test_task_file_reads_the_three_dataset_forms(data):
    specs = {spec.name: spec for spec in load_task_specs(data / "tasks.yaml")}
    assert specs["reviews"].labels == ("neg", "pos")  # the ClassLabel names, in their order
    assert specs["reviews"].splits == {"train": "train", "validation": "validation", "test": "test"}
    assert specs["reviews"].dataset == {"path": "data/hub_repo", "name": "reviews", "local": True}
    assert specs["nli"].labels == ("entailment", "neutral", "contradiction") and specs["nli"].is_pair
    assert len(load_split(specs["scores"], "train")) == 8  # train[:80%] of 10 rows
    test = load_split(specs["reviews"], "test")
    assert "label" not in test.column_names and len(test) == 4  # -1: unlabelled test rows
    files = {"train": "data/scores/train.parquet", "validation": "data/scores/validation.parquet"}
    builder = custom_task(  # a packaged builder takes files relative to the task file
        "scores2",
        dataset={"path": "parquet", "data_files": files},
        base_dir=data,
        type="regression",
        text_columns=["s1", "s2"],
        label_column="score",
    )
    assert load_split(builder, "validation")["label"][:3] == [0.0, 1.0, 2.0] and builder.dataset["data_files"] == files
    validation = load_split(specs["reviews"], "validation")
    assert validation["label"][:2] == [0, 1] and validation["text_a"][1] == "review 1 great"


def test_labels_may_reorder_or_subset_only_when_the_task_says_so(data, caplog):
    source = {"path": str(data / "data" / "hub_repo"), "name": "reviews"}
    with pytest.raises(ConfigError, match=r"labels \['pos', 'neg'\] differ from .*\['neg', 'pos'\].*label_subset"):
        custom_task("t", dataset=source, labels=["pos", "neg"])
    spec = custom_task("t", dataset=source, labels=["pos", "neg"], label_subset=True)
    assert spec.labels == ("pos", "neg") and load_split(spec, "validation")["label"][:2] == [1, 0]
    kept = custom_task(
        "t",
        dataset={"from_disk": str(data / "data" / "nli_disk")},
        text_columns=["premise"],
        labels=["contradiction", "entailment"],
        label_subset=True,
    )
    assert load_split(kept, "train")["label"][:3] == [1, 0, 1]  # rows of "neutral" left out
    assert "left out 4 rows" in caplog.text


def test_a_hub_id_goes_through_load_dataset_and_is_pinned_to_its_commit(monkeypatch, tmp_path):
    commit = "0123456789abcdef0123456789abcdef01234567"  # datasets names a Hub dataset's cache folder by it
    reviews(6).save_to_disk(str(tmp_path / commit))
    train = datasets.Dataset.from_file(str(next((tmp_path / commit).glob("*.arrow"))))
    calls = []

    def load_dataset(**kwargs):
        calls.append(kwargs)
        return datasets.DatasetDict({"train": train, "test": reviews(2, labels=False)})

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    source = {"path": "someone/reviews", "name": "sentiment", "revision": "v1", "data_dir": "en"}
    spec = custom_task("hubtask", dataset=source, splits={"train": "train[2:]", "test": "test"}, base_dir=tmp_path)
    assert spec.dataset == source and spec.labels == ("neg", "pos")
    assert load_split(spec, "train")["text_a"] == [f"review {i} {'great' if i % 2 else 'awful'}" for i in (2, 3, 4, 5)]
    assert calls == [source]  # path, configuration, revision, data_dir as given; opened once
    record = dataset_record(spec, tmp_path / "export")
    assert record["resolved_revision"] == commit and record["source"] == source
    assert record["splits"]["train"]["split"] == "train[2:]" and record["splits"]["train"]["rows"] == 4
    assert load_split(pinned(spec, record), "test")["idx"] == [0, 1]  # evaluate / predict load that commit
    assert calls[-1] == source | {"revision": commit}
    assert dataset_of(spec)[:2] == ("someone/reviews", "sentiment")  # what the model card names


@pytest.mark.parametrize(
    "task, split, columns",
    [
        ("qqp", "train", ("question1", "question2")),
        ("mnli", "validation_matched", ("premise", "hypothesis")),
        ("qnli", "validation", ("question", "sentence")),
    ],
)
def test_the_papers_glue_tasks_load_from_the_hub(monkeypatch, task, split, columns):
    calls = []

    def load_dataset(path, name, split):
        calls.append((path, name, split))
        feats = {c: datasets.Value("string") for c in columns} | {"label": datasets.ClassLabel(num_classes=3)}
        return datasets.Dataset.from_dict(
            {columns[0]: ["a"], columns[1]: ["b"], "label": [1]}, datasets.Features(feats)
        )

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    loaded = load_split(task, split, source="hub")
    assert calls == [("nyu-mll/glue", task, split)] and loaded["text_b"] == ["b"]


@pytest.fixture(scope="module")
def trained(data, tiny_model_dir) -> tuple[Path, dict]:
    """The four tasks trained together (mixed batches, length grouping, 9 examples each) and exported."""
    run = data / "run"
    config = runner.RunConfig(
        model=str(tiny_model_dir),
        task_file=str(data / "tasks.yaml"),
        method="pals",
        base="frozen",
        sampler="round_robin",
        batching="mixed",
        group_by_length=True,
        max_train_examples=9,
        max_steps=4,
        batch_size=4,
        max_length=24,
        logging_steps=2,
        eval_batch_size=8,
        output_dir=str(run),
    )
    return run, runner.run(config)


def test_train_export_evaluate_predict_with_a_file_task(data, trained):
    run, results = trained
    assert results["train_sizes"] == {"reviews": 9, "scores": 8, "nli": 9, "files": 9}
    manifest = read_task_manifest(run / "export" / "reviews")
    record = manifest.dataset_source
    assert (
        record["source"]["path"] == "data/hub_repo"
        and record["source"]["folder_from_export"] == "../../../data/hub_repo"
    )
    assert set(record["splits"]) == {"train", "validation", "test"} and record["splits"]["test"]["rows"] == 4
    assert str(data) not in json.dumps(record)  # no absolute path of this machine in the record
    assert read_task_manifest(run / "export" / "files").dataset_source is None
    assert main(["evaluate", str(run / "export"), "--out", str(data / "eval.json")]) in (None, 0)
    report = json.loads((data / "eval.json").read_text())["tasks"]
    assert set(report) == {"reviews", "scores", "nli", "files"}
    assert report["reviews"]["per_class"]["validation"]["labels"] == ["neg", "pos"]  # the ClassLabel names
    assert main(["predict", str(run / "export"), "--out", str(data / "pred"), "--format", "jsonl"]) in (None, 0)
    rows = [json.loads(line) for line in (data / "pred" / "reviews-test.jsonl").read_text().splitlines()[0:4]]
    assert len(rows) == 4 and {row["prediction"] for row in rows} <= {"neg", "pos"}
    assert (data / "pred" / "nli-test.jsonl").is_file()


def test_a_split_changed_since_training_is_named(data, trained, capsys):
    dev = data / "data" / "hub_repo" / "reviews" / "validation.parquet"
    reviews(8).select(range(6)).to_parquet(str(dev))
    try:
        capsys.readouterr()
        main(["evaluate", str(trained[0] / "export" / "reviews")])
    finally:
        reviews(8).to_parquet(str(dev))
    captured = capsys.readouterr()
    assert (
        "split 'validation' (validation) of dataset folder data/hub_repo (configuration reviews) differs"
        in captured.err
    )
    assert "(6 dev examples)" in captured.out  # the data as it is now


def test_a_dataset_task_added_to_an_export_and_found_after_a_move(data, trained, tmp_path, capsys, tiny_model_dir):
    export = trained[0] / "export"
    (data / "more.yaml").write_text(
        "tasks:\n  - {name: more, dataset: {from_disk: data/nli_disk}, text_columns: [premise],"
        " labels: [contradiction, entailment], label_subset: true}\n"
    )
    settings = dict(max_steps=2, batch_size=4, max_length=24, logging_steps=1, output_dir=str(data / "run_more"))
    runner.run(runner.RunConfig(task_file=str(data / "more.yaml"), add_to=str(export), **settings))
    assert read_task_manifest(export / "more").dataset_source["source"]["from_disk"] == "data/nli_disk"
    moved = tmp_path / "moved"  # the project folder moved whole: the export finds its dataset folder again
    shutil.copytree(data, moved)
    (data / "data" / "nli_disk").rename(data / "data" / "nli_away")
    try:
        capsys.readouterr()
        # the base stayed outside the project: given again
        main(["evaluate", str(moved / "run" / "export" / "more"), "--base-model", str(tiny_model_dir)])
    finally:
        (data / "data" / "nli_away").rename(data / "data" / "nli_disk")
    captured = capsys.readouterr()
    assert "no longer in" not in captured.err and "more: more_accuracy=" in captured.out  # found relative to the export


def test_a_compare_grid_plans_dataset_tasks(data, tiny_model_dir):
    (data / "grid.yaml").write_text(
        f"task_file: tasks.yaml\nmodel: {tiny_model_dir}\nmax_steps: 2\nseeds: [1]\nreference: PALs\n"
        "rows:\n  - {name: PALs, method: pals}\n  - {name: one model per task, method: separate}\n"
    )
    planned = plan_runs(read_grid(data / "grid.yaml"), data / "comparison")
    assert [sorted(run.specs) for run in planned][:2] == [["files", "nli", "reviews", "scores"], ["reviews"]]
    assert planned[0].specs["nli"].dataset == {"from_disk": "data/nli_disk", "local": True}
    assert not (data / "comparison").exists()  # planning writes nothing


def nothing_written(folder: Path, action) -> None:
    before = sorted(folder.rglob("*"))
    action()
    assert sorted(folder.rglob("*")) == before


def _train(data: Path, entry: str):
    (data / "bad.yaml").write_text(f"tasks:\n  - {{name: bad, {entry}}}\n")
    config = runner.RunConfig(model="unused", task_file=str(data / "bad.yaml"), output_dir=str(data / "badrun"))
    return lambda: runner.run(config)


HUB_REPO = "dataset: {path: data/hub_repo, name: reviews}"
BAD = [
    ("unknown-config", "dataset: {path: data/hub_repo, name: nope}", "configurations: reviews, other"),
    ("unknown-folder", "dataset: {path: ./data/missing}", "no such folder"),
    ("not-save-to-disk", "dataset: {from_disk: data/scores}", "not a folder written by save_to_disk"),
    ("unknown-key", "dataset: {path: data/scores, split: train}", "dataset key 'split' is not known"),
    (
        "unknown-split",
        HUB_REPO + ", splits: {train: training}",
        "no split 'training'; its splits: train, validation, test",
    ),
    ("no-train-or-dev", HUB_REPO + ", splits: {test: test}", "neither a train nor a validation split"),
    ("unknown-column", HUB_REPO + ", text_columns: [body]", "no column 'body'; its columns: text, n, label"),
    ("not-text", HUB_REPO + ", text_columns: [n]", r"text column 'n' holds Value\('int64'\), not text"),
    ("files-too", HUB_REPO + ", train: data/files.csv", "'train' does not go with a dataset"),
    ("labels-differ", HUB_REPO + ", labels: [bad, good]", r"labels \['bad', 'good'\] differ .*\['neg', 'pos'\]"),
]


@pytest.mark.parametrize("case, entry, fragment", BAD, ids=[c[0] for c in BAD])
def test_bad_dataset_tasks_are_refused_before_anything_is_written(data, case, entry, fragment):
    with pytest.raises(ConfigError, match=fragment):
        nothing_written(data / "data", _train(data, entry))
    assert not (data / "badrun").exists()


@pytest.mark.parametrize(
    "problem, configurations, fragment",
    [
        (DatasetNotFoundError("Dataset 'nobody/nothing' doesn't exist on the Hub"), None, "check the dataset's name"),
        (ValueError("BuilderConfig 'x' not found. Available: ['a', 'b']"), ["a", "b"], "its configurations: a, b"),
    ],
    ids=["unknown-hub-dataset", "unknown-hub-configuration"],
)
def test_an_unknown_hub_dataset_or_configuration_is_refused(monkeypatch, tmp_path, problem, configurations, fragment):
    def load_dataset(**kwargs):
        raise problem

    def config_names(path, revision=None):
        if configurations is None:
            raise DatasetNotFoundError(path)
        return configurations

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setattr(datasets, "get_dataset_config_names", config_names)
    with pytest.raises(ConfigError, match=fragment):
        custom_task("t", dataset={"path": "nobody/nothing", "name": "x"}, base_dir=tmp_path)


def test_label_values_outside_a_classlabel_are_refused(tmp_path):
    plain = datasets.Dataset.from_dict({"text": ["a", "b"], "label": [0, 2]})
    datasets.DatasetDict({"train": plain}).save_to_disk(str(tmp_path / "d"))
    info_file = tmp_path / "d" / "train" / "dataset_info.json"  # the features say ClassLabel(neg, pos)
    info = json.loads(info_file.read_text())
    info["features"]["label"] = {"names": ["neg", "pos"], "_type": "ClassLabel"}
    info_file.write_text(json.dumps(info))
    with pytest.raises(
        ConfigError, match=r"train label column 'label' holds 2, outside its ClassLabel \['neg', 'pos'\]"
    ):
        custom_task("t", dataset={"from_disk": str(tmp_path / "d")})


def test_skip_bad_rows_counts_unusable_dataset_rows(tmp_path, caplog):
    rows = {"text": ["fine", None, "ok", "also"], "label": [0, 1, -1, 1]}
    feats = datasets.Features({"text": datasets.Value("string"), "label": SENTIMENT})
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows, features=feats)}).save_to_disk(str(tmp_path / "d"))
    strict = custom_task("t", dataset={"from_disk": str(tmp_path / "d")})
    with pytest.raises(
        DataError, match=r"split 'train', row 1 \(counted from 0, as ids\): text in column 'text' is null"
    ):
        load_split(strict, "train")
    skipped = []
    spec = custom_task("t", dataset={"from_disk": str(tmp_path / "d")}, skip_bad_rows=True)
    loaded = load_split(spec, "train", skipped=skipped)
    assert loaded["text_a"] == ["fine", "also"] and loaded["idx"] == [0, 3]
    assert skipped[0].count == 2 and [pos for pos, _ in skipped[0].first] == [1, 2]  # from 0, as idx
    assert "no label (-1)" in skipped[0].first[1][1] and "skipped 2 malformed rows" in caplog.text


def test_a_local_folder_is_recorded_relative_to_the_task_file(data):
    spec = custom_task("t", dataset={"path": str(data / "data" / "hub_repo"), "name": "reviews"}, base_dir=data)
    assert spec.dataset["path"] == "data/hub_repo" and dataset_source.local_folder(spec) == data / "data" / "hub_repo"


def test_an_empty_slice_is_refused_as_such(tmp_path):
    datasets.DatasetDict({"train": reviews(8)}).save_to_disk(str(tmp_path / "d"))
    with pytest.raises(ConfigError, match=r"split 'train\[5:3\]' selects no rows \(train has 8; .*rows 5 to 3\)"):
        custom_task("t", dataset={"from_disk": str(tmp_path / "d")}, splits={"train": "train[5:3]"})


def test_a_revision_of_a_local_dataset_folder_is_refused(data):
    folder = str(data / "data" / "hub_repo")
    with pytest.raises(ConfigError, match="revision 'v1' applies to a Hub dataset.*remove revision"):
        custom_task("t", dataset={"path": folder, "name": "reviews", "revision": "v1"}, base_dir=data)


def test_absolute_files_of_a_task_are_recorded_relative_to_the_export(tmp_path):
    from pals_adapters.harness.tasks.file_record import shared_spec_json, spec_from_shared_json
    from pals_adapters.harness.tasks.user_tasks import split_files

    data = tmp_path / "far" / "data"
    data.mkdir(parents=True)
    for split in ("train", "dev"):
        (data / f"{split}.csv").write_text("text,label\n" + "".join(f"w{i},{i % 2}\n" for i in range(6)))
    files = {"train": str(data / "train.csv"), "validation": str(data / "dev.csv")}
    export = tmp_path / "project" / "run" / "export" / "mood"
    export.mkdir(parents=True)
    for spec in (
        custom_task("mood", **files, base_dir=tmp_path / "project"),  # train: /abs/..., validation: /abs/...
        custom_task("mood", dataset={"path": "csv", "data_files": files}, base_dir=tmp_path / "project"),
    ):
        recorded = {"task_spec": shared_spec_json(spec, export), "dataset_source": dataset_record(spec, export)}
        assert str(tmp_path) not in json.dumps(recorded)  # no path of this machine
        back = spec_from_shared_json(recorded["task_spec"], export)
        assert split_files(back) == split_files(spec)  # the same files, read back from the export
        if spec.dataset is not None:
            assert back.dataset["data_files"]["train"] == "../far/data/train.csv"
            assert len(load_split(back, "validation")) == 6
