"""Tests of task specs (tasks.py) and data loading (data.py)."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import datasets
import pytest
import yaml

from pals_adapters.errors import ConfigError, DataError, PalsError, UnknownNameError
from pals_adapters.harness.tasks.glue import GLUE_TASKS, get_task
from pals_adapters.harness.tasks.spec import TaskSpec
from pals_adapters.harness.tasks.splits import load_split, load_task
from pals_adapters.harness.tasks.user_tasks import custom_task, load_task_specs


def _find_glue() -> Path | None:
    candidate = Path(os.environ.get("GLUE_DIR") or Path(__file__).resolve().parents[3] / ".." / "shared" / "glue")
    return candidate if (candidate / "CoLA").is_dir() else None


GLUE_DIR = _find_glue()
needs_glue = pytest.mark.skipif(GLUE_DIR is None, reason="GLUE data not found: set GLUE_DIR or provide ../shared/glue")


@functools.cache
def real(task: str, split: str) -> datasets.Dataset:
    """Each real split is loaded once per session."""
    return load_split(task, split, glue_dir=GLUE_DIR, source="local")


def write(path: Path, text: str | bytes) -> Path:
    """Write exactly these bytes (no newline translation)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


# --------------------------------------------------------------------------- registry


@pytest.mark.parametrize(
    "alias, name",
    [
        ("cola", "cola"),
        ("CoLA", "cola"),
        ("SST-2", "sst2"),
        ("sst-2", "sst2"),
        ("sst2", "sst2"),
        ("MRPC", "mrpc"),
        ("sts-b", "stsb"),
        ("STS-B", "stsb"),
        ("QQP", "qqp"),
        ("mnli", "mnli"),
        ("QNLI", "qnli"),
        ("rte", "rte"),
        ("WNLI", "wnli"),
    ],
)
def test_get_task_aliases(alias, name):
    assert get_task(alias) is GLUE_TASKS[name]


def test_get_task_unknown_lists_names():
    with pytest.raises(UnknownNameError) as info:
        get_task("squad")
    assert "squad" in str(info.value) and "cola" in str(info.value) and "wnli" in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, PalsError)


@pytest.mark.parametrize(
    "name, metrics, labels, num_labels",
    [
        ("cola", ("matthews",), ("0", "1"), 2),
        ("sst2", ("accuracy",), ("0", "1"), 2),
        ("mrpc", ("accuracy", "f1"), ("0", "1"), 2),
        ("stsb", ("pearson", "spearman"), (), 1),
        ("qqp", ("accuracy", "f1"), ("0", "1"), 2),
        ("mnli", ("accuracy",), ("contradiction", "entailment", "neutral"), 3),
        ("qnli", ("accuracy",), ("entailment", "not_entailment"), 2),
        ("rte", ("accuracy",), ("entailment", "not_entailment"), 2),
        ("wnli", ("accuracy",), ("0", "1"), 2),
    ],
)
def test_glue_registry(name, metrics, labels, num_labels):
    spec = GLUE_TASKS[name]
    assert (spec.metrics, spec.labels, spec.num_labels) == (metrics, labels, num_labels)
    assert spec.is_regression == (name == "stsb")
    assert spec.hub == ("nyu-mll/glue", name)


def test_mnli_splits():
    assert GLUE_TASKS["mnli"].splits == {
        "train": "train.tsv",
        "validation_matched": "dev_matched.tsv",
        "validation_mismatched": "dev_mismatched.tsv",
        "test_matched": "test_matched.tsv",
        "test_mismatched": "test_mismatched.tsv",
    }


BASE = dict(
    name="t",
    text_columns=("a",),
    label_column="y",
    is_regression=False,
    labels=("0", "1"),
    metrics=("accuracy",),
    splits={"train": "train.tsv"},
)


@pytest.mark.parametrize(
    "change, field",
    [
        ({"name": ""}, "name"),
        ({"text_columns": ()}, "text_columns"),
        ({"text_columns": ("a", "b", "c")}, "text_columns"),
        ({"labels": ("0",)}, "labels"),
        ({"is_regression": True}, "labels"),
        ({"metrics": ("bleu",)}, "metrics"),
        ({"metrics": ()}, "metrics"),
        ({"labels": ("a", "b", "c"), "metrics": ("f1",)}, "metrics"),
        ({"splits": {}}, "splits"),
        ({"file_format": "xml"}, "file_format"),
        ({"has_header": False}, "column_positions"),
        ({"has_header": {"dev": False}}, "has_header"),
        ({"hub": ("only-id",)}, "hub"),
        ({"label_range": (0, 5)}, "label_range"),
    ],
)
def test_taskspec_validation_names_field(change, field):
    with pytest.raises(ConfigError, match=field):
        TaskSpec(**{**BASE, **change})


def test_taskspec_normalises_and_hashes():
    spec = TaskSpec(**{**BASE, "text_columns": ["a", "b"]})
    assert spec.text_columns == ("a", "b") and spec.is_pair
    hash(spec)


# --------------------------------------------------------------------------- real GLUE files

README_ROWS = {
    "cola": (8551, 1043, 1063),
    "sst2": (67349, 872, 1821),
    "mrpc": (3668, 408, 1725),
    "stsb": (5749, 1500, 1379),
    "rte": (2490, 277, 3000),
    "wnli": (635, 71, 146),
}
ROW_CASES = [(t, s, n) for t, ns in README_ROWS.items() for s, n in zip(("train", "validation", "test"), ns)]


@needs_glue
@pytest.mark.parametrize("task, split, rows", ROW_CASES, ids=[f"{t}-{s}" for t, s, _ in ROW_CASES])
def test_real_row_counts_and_schema(task, split, rows):
    ds = real(task, split)
    assert len(ds) == rows
    spec = get_task(task)
    expected = ["text_a", "text_b", "idx"] if split == "test" else ["text_a", "text_b", "label", "idx"]
    assert sorted(ds.column_names) == sorted(expected)
    assert ds["idx"] == list(range(rows))
    if not spec.is_pair:
        assert set(ds["text_b"]) == {""}
    if split != "test":
        labels = ds["label"]
        if spec.is_regression:
            assert all(0.0 <= v <= 5.0 for v in labels)
        else:
            assert set(labels) == set(range(spec.num_labels))


@needs_glue
@pytest.mark.parametrize(
    "task, split, folder, file, text_cols",
    [
        ("mrpc", "train", "MRPC", "train.tsv", (3, 4)),
        ("mrpc", "validation", "MRPC", "dev.tsv", (3, 4)),
        ("mrpc", "test", "MRPC", "test.tsv", (3, 4)),
        ("cola", "train", "CoLA", "train.tsv", (3,)),
        ("cola", "validation", "CoLA", "dev.tsv", (3,)),
        ("sst2", "validation", "SST-2", "dev.tsv", (0,)),
        ("stsb", "validation", "STS-B", "dev.tsv", (7, 8)),
    ],
)
def test_real_text_verbatim(task, split, folder, file, text_cols):
    """Texts equal the raw tab-separated fields, quotes and trailing spaces included."""
    lines = (GLUE_DIR / folder / file).read_text(encoding="utf-8-sig").splitlines()
    if get_task(task).header_for(split):
        lines = lines[1:]
    raw = [line.split("\t") for line in lines]
    ds = real(task, split)
    assert ds["text_a"] == [r[text_cols[0]] for r in raw]
    if len(text_cols) == 2:
        assert ds["text_b"] == [r[text_cols[1]] for r in raw]


@needs_glue
def test_real_mrpc_quotes_and_bom():
    first = real("mrpc", "validation")[0]
    assert first["label"] == 1
    assert first["text_b"].startswith('"The foodservice pie business')  # unbalanced quote kept
    assert sum('"' in t for t in real("mrpc", "train")["text_a"]) > 100


@needs_glue
def test_real_label_mapping():
    assert real("rte", "train")[0]["label"] == GLUE_TASKS["rte"].labels.index("not_entailment")
    assert real("stsb", "train")[1]["label"] == pytest.approx(3.8)
    assert real("cola", "validation")[0] == {
        "text_a": "The sailors rode the breeze clear of the rocks.",
        "text_b": "",
        "label": 1,
        "idx": 0,
    }


@needs_glue
def test_load_task_auto_and_env(monkeypatch):
    monkeypatch.setenv("GLUE_DIR", str(GLUE_DIR))
    dd = load_task("WNLI", splits=["validation", "test"])
    assert isinstance(dd, datasets.DatasetDict)
    assert {k: len(v) for k, v in dd.items()} == {"validation": 71, "test": 146}


# --------------------------------------------------------------------------- synthetic GLUE layouts


@pytest.mark.parametrize("ending", ["\n", "", "\r\n"], ids=["lf", "no-final-newline", "crlf"])
def test_trailing_newline_and_crlf(tmp_path, ending):
    rows = ["index\tsentence1\tsentence2\tlabel", "0\ta\tb\tentailment", "1\tc\td\tnot_entailment"]
    sep = "\r\n" if ending == "\r\n" else "\n"
    write(tmp_path / "RTE" / "train.tsv", sep.join(rows) + ending)
    ds = load_split("rte", "train", glue_dir=tmp_path, source="local")
    assert ds.to_dict() == {"text_a": ["a", "c"], "text_b": ["b", "d"], "label": [0, 1], "idx": [0, 1]}


def test_quotes_never_swallow_rows(tmp_path):
    body = 'sentence\tlabel\n"it starts with a quote \t1\nno end quote " here\t0\n""\t1\nplain\t0'
    write(tmp_path / "SST-2" / "train.tsv", body)
    ds = load_split("sst2", "train", glue_dir=tmp_path, source="local")
    assert ds["text_a"] == ['"it starts with a quote ', 'no end quote " here', '""', "plain"]
    assert ds["label"] == [1, 0, 1, 0]


def test_bom_header_is_clean(tmp_path):
    body = '\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tA "b\tc\n'
    write(tmp_path / "MRPC" / "dev.tsv", body)
    ds = load_split("mrpc", "validation", glue_dir=tmp_path, source="local")
    assert ds[0] == {"text_a": 'A "b', "text_b": "c", "label": 1, "idx": 0}


def test_headerless_cola(tmp_path):
    write(tmp_path / "CoLA" / "dev.tsv", 'gj04\t1\t\tGood one.\ngj04\t0\t*\tBad "one.')
    ds = load_split("cola", "validation", glue_dir=tmp_path, source="local")
    assert ds["text_a"] == ["Good one.", 'Bad "one.'] and ds["label"] == [1, 0]


MNLI_HEAD = "index\tpromptID\tpairID\tgenre\tsentence1\tsentence2\tlabel1\tgold_label"


@pytest.mark.parametrize(
    "task, folder, files, split, expected",
    [
        (
            "mnli",
            "MNLI",
            {"train.tsv": f"{MNLI_HEAD}\n0\t1\t1e\tgov\tP\tH\tneutral\tneutral\n"},
            "train",
            {"text_a": ["P"], "text_b": ["H"], "label": [2], "idx": [0]},
        ),
        (
            "mnli",
            "MNLI",
            {
                "dev_matched.tsv": MNLI_HEAD.replace("label1", "label1\tlabel2")
                + "\n0\t1\t1e\tgov\tP\tH\tneutral\tneutral\tcontradiction\n"
            },
            "validation_matched",
            {"text_a": ["P"], "text_b": ["H"], "label": [0], "idx": [0]},
        ),
        (
            "mnli",
            "MNLI",
            {"dev_mismatched.tsv": f"{MNLI_HEAD}\n0\t1\t1e\tgov\tP\tH\tx\tentailment"},
            "validation_mismatched",
            {"text_a": ["P"], "text_b": ["H"], "label": [1], "idx": [0]},
        ),
        (
            "mnli",
            "MNLI",
            {"test_mismatched.tsv": "index\tpromptID\tpairID\tgenre\tsentence1\tsentence2\n0\t1\t2\tg\tP\tH\n"},
            "test_mismatched",
            {"text_a": ["P"], "text_b": ["H"], "idx": [0]},
        ),
        (
            "qqp",
            "QQP",
            {"train.tsv": 'id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n5\t1\t2\tWhy "x?\tHow?\t1\n'},
            "train",
            {"text_a": ['Why "x?'], "text_b": ["How?"], "label": [1], "idx": [0]},
        ),
        (
            "qqp",
            "QQP",
            {"test.tsv": "id\tquestion1\tquestion2\n0\tA?\tB?\n"},
            "test",
            {"text_a": ["A?"], "text_b": ["B?"], "idx": [0]},
        ),
        (
            "qnli",
            "QNLI",
            {"dev.tsv": "index\tquestion\tsentence\tlabel\n0\tQ?\tS.\tnot_entailment\n"},
            "validation",
            {"text_a": ["Q?"], "text_b": ["S."], "label": [1], "idx": [0]},
        ),
    ],
)
def test_absent_glue_tasks_by_layout(tmp_path, task, folder, files, split, expected):
    for name, body in files.items():
        write(tmp_path / folder / name, body)
    assert load_split(task, split, glue_dir=tmp_path, source="local").to_dict() == expected


# --------------------------------------------------------------------------- hub (faked)


def fake_hub(calls):
    def load_dataset(path, name, split):
        calls.append((path, name, split))
        label = -1 if split.startswith("test") else 2  # hub MNLI: 0 ent, 1 neutral, 2 contradiction
        feats = datasets.Features(
            {
                "premise": datasets.Value("string"),
                "hypothesis": datasets.Value("string"),
                "label": datasets.ClassLabel(names=["entailment", "neutral", "contradiction"]),
                "idx": datasets.Value("int32"),
            }
        )
        return datasets.Dataset.from_dict(
            {"premise": ["p"], "hypothesis": ["h"], "label": [label], "idx": [7]}, features=feats
        )

    return load_dataset


@pytest.mark.parametrize(
    "split, expected",
    [
        ("validation_matched", {"text_a": ["p"], "text_b": ["h"], "label": [0], "idx": [7]}),
        ("test_matched", {"text_a": ["p"], "text_b": ["h"], "idx": [7]}),
    ],
)
def test_hub_maps_schema_and_labels(monkeypatch, tmp_path, split, expected):
    calls = []
    monkeypatch.setattr(datasets, "load_dataset", fake_hub(calls))
    monkeypatch.delenv("GLUE_DIR", raising=False)
    assert load_split("mnli", split).to_dict() == expected  # auto, no glue_dir -> hub
    assert load_split("mnli", split, glue_dir=tmp_path).to_dict() == expected  # auto, file absent -> hub
    assert calls == [("nyu-mll/glue", "mnli", split)] * 2


def test_auto_hub_failure_is_data_error(monkeypatch, tmp_path):
    def broken(*args, **kwargs):
        raise ConnectionError("hub unreachable")

    monkeypatch.setattr(datasets, "load_dataset", broken)
    with pytest.raises(DataError, match=r"(?s)QQP.*train\.tsv.*hub unreachable.*GLUE_DIR"):
        load_split("qqp", "train", glue_dir=tmp_path)


@pytest.mark.parametrize(
    "call, error, fragment",
    [
        (lambda: load_split("rte", "dev", glue_dir="."), UnknownNameError, "validation"),
        (lambda: load_split("rte", "train", source="disk"), UnknownNameError, "local"),
        (lambda: load_split(GLUE_TASKS["rte"], "train", source="local", glue_dir=None), ConfigError, "GLUE_DIR"),
    ],
)
def test_bad_arguments(monkeypatch, call, error, fragment):
    monkeypatch.delenv("GLUE_DIR", raising=False)
    with pytest.raises(error, match=fragment):
        call()


# --------------------------------------------------------------------------- user tasks

ROWS = [("good film, really", "pos"), ('said "meh"', "neg"), ("fine", "neutral")]


def user_files(folder: Path, fmt: str) -> None:
    for split, rows in (("train", ROWS), ("dev", ROWS[:2]), ("test", ROWS[:1])):
        labelled = split != "test"
        if fmt == "csv":
            body = "text,label\n" if labelled else "text\n"
            body += "".join(('"' + t.replace('"', '""') + '"' + (f",{y}" if labelled else "")) + "\n" for t, y in rows)
        elif fmt == "tsv":
            body = "text\tlabel\n" if labelled else "text\n"
            body += "".join(t + (f"\t{y}" if labelled else "") + "\n" for t, y in rows)
        else:
            body = "".join(json.dumps({"text": t, **({"label": y} if labelled else {})}) + "\n" for t, y in rows)
        write(folder / f"{split}.{fmt}", body)


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl"])
@pytest.mark.parametrize("config", ["yaml", "json"])
def test_user_task_from_file(tmp_path, monkeypatch, fmt, config):
    user_files(tmp_path / "data", fmt)
    entry = {
        "name": "sentiment",
        "train": f"data/train.{fmt}",
        "validation": f"data/dev.{fmt}",
        "test": f"data/test.{fmt}",
        "text_columns": ["text"],
        "label_column": "label",
    }
    cfg = tmp_path / f"tasks.{config}"
    cfg.write_text(yaml.safe_dump({"tasks": [entry]}) if config == "yaml" else json.dumps([entry]))
    monkeypatch.chdir(tmp_path / "data")  # paths resolve against the config file, not the cwd
    [spec] = load_task_specs(cfg)
    assert (spec.name, spec.file_format, spec.labels, spec.metrics) == (
        "sentiment",
        fmt,
        ("neg", "neutral", "pos"),
        ("accuracy",),
    )
    dd = load_task(spec)
    assert dd["train"].to_dict() == {
        "text_a": [t for t, _ in ROWS],
        "text_b": [""] * 3,
        "label": [2, 0, 1],
        "idx": [0, 1, 2],
    }
    assert len(dd["validation"]) == 2 and "label" not in dd["test"].column_names


def test_user_regression_pair_task(tmp_path):
    write(tmp_path / "train.jsonl", '{"a": "x", "b": "y", "s": 1.5}\n{"a": "z", "b": "w", "s": "2"}\n')
    spec = custom_task(
        "sim",
        train="train.jsonl",
        text_columns=["a", "b"],
        label_column="s",
        type="regression",
        label_range=(0, 3),
        base_dir=tmp_path,
    )
    assert spec.metrics == ("pearson", "spearman") and spec.num_labels == 1
    assert load_split(spec, "train").to_dict() == {
        "text_a": ["x", "z"],
        "text_b": ["y", "w"],
        "label": [1.5, 2.0],
        "idx": [0, 1],
    }


def test_inferred_labels_sort_numerically(tmp_path):
    write(tmp_path / "train.csv", "text,label\na,10\nb,2\nc,1\n")
    spec = custom_task("n", train=tmp_path / "train.csv", metrics="matthews")
    assert spec.labels == ("1", "2", "10")
    assert load_split(spec, "train")["label"] == [2, 1, 0]


def test_user_csv_with_bom(tmp_path):
    write(tmp_path / "train.csv", '\ufefflabel,text\nb,"x, y"\na,z\n')
    spec = custom_task("bom", train="train.csv", base_dir=tmp_path)
    assert load_split(spec, "train")["text_a"] == ["x, y", "z"]


@pytest.mark.parametrize(
    "content, fragments",
    [
        ({"tasks": [{"name": "x", "train": "t.csv", "labels": ["a", "b"], "epochs": 3}]}, ["epochs", "tasks.yaml"]),
        (
            {"tasks": [{"name": "x", "train": "t.csv", "labels": ["a", "b"]}], "defaults": {}},
            ["defaults", "tasks.yaml"],
        ),
        ({"tasks": [{"name": "x", "train": "t.xml", "labels": ["a", "b"]}]}, ["format", "tasks.yaml"]),
        ({"tasks": [{"name": "x", "train": "t.csv", "type": "ranking"}]}, ["type", "tasks.yaml"]),
        ({"tasks": [{"name": "x", "train": "t.csv", "labels": ["a", "b"], "metric": "pearson"}]}, ["metrics"]),
        ({"tasks": [{"train": "t.csv"}]}, ["name", "tasks.yaml"]),
        ({"tasks": [{"name": "x", "test": "t.csv"}]}, ["labels", "tasks.yaml"]),
    ],
)
def test_task_file_config_errors(tmp_path, content, fragments):
    cfg = tmp_path / "tasks.yaml"
    cfg.write_text(yaml.safe_dump(content))
    with pytest.raises(ConfigError) as info:
        load_task_specs(cfg)
    for fragment in fragments:
        assert fragment in str(info.value)


# --------------------------------------------------------------------------- bad input

STSB_HEAD = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"


def stsb_row(score: str) -> str:
    return f"0\tg\tf\ty\to\tn\tn\tA.\tB.\t{score}\n"


def user(fmt: str, **kw):
    return lambda d: custom_task("u", train=d / f"train.{fmt}", labels=["a", "b"], base_dir=d, **kw)


BAD_CASES = [
    # id, task (name or factory of the tmp folder), split, files, expected message fragments
    ("missing-file", "rte", "train", {}, ["RTE/train.tsv", "missing file", "train"]),
    ("empty-file", "rte", "train", {"RTE/train.tsv": ""}, ["RTE/train.tsv", "empty"]),
    (
        "header-only",
        "rte",
        "train",
        {"RTE/train.tsv": "index\tsentence1\tsentence2\tlabel\n"},
        ["RTE/train.tsv", "no data rows"],
    ),
    (
        "missing-text-column",
        "rte",
        "train",
        {"RTE/train.tsv": "index\tpremise\tsentence2\tlabel\n0\ta\tb\tentailment\n"},
        ["RTE/train.tsv", "'sentence1'", "columns found: index, premise, sentence2, label"],
    ),
    (
        "missing-label-column",
        "rte",
        "validation",
        {"RTE/dev.tsv": "index\tsentence1\tsentence2\n0\ta\tb\n"},
        ["RTE/dev.tsv", "'label'", "columns found"],
    ),
    (
        "too-few-fields",
        "rte",
        "train",
        {"RTE/train.tsv": "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\ta\tentailment\n"},
        ["RTE/train.tsv", "line 3", "too few fields", "expected 4", "found 3"],
    ),
    (
        "too-many-fields",
        "sst2",
        "train",
        {"SST-2/train.tsv": "sentence\tlabel\nx\t1\ny\tz\t0\n"},
        ["SST-2/train.tsv", "line 3", "too many fields"],
    ),
    (
        "headerless-short-row",
        "cola",
        "train",
        {"CoLA/train.tsv": "s\t1\t\tok\ns\t1\tbad\n"},
        ["CoLA/train.tsv", "line 2", "too few fields"],
    ),
    (
        "label-not-in-set",
        "rte",
        "train",
        {"RTE/train.tsv": "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\ta\tb\tcontradiction\n"},
        ["RTE/train.tsv", "line 3", "'contradiction'", "['entailment', 'not_entailment']"],
    ),
    (
        "regression-nan",
        "stsb",
        "train",
        {"STS-B/train.tsv": STSB_HEAD + stsb_row("1.0") + stsb_row("nan")},
        ["STS-B/train.tsv", "line 3", "'nan'", "not finite"],
    ),
    (
        "regression-inf",
        "stsb",
        "train",
        {"STS-B/train.tsv": STSB_HEAD + stsb_row("inf")},
        ["STS-B/train.tsv", "line 2", "not finite"],
    ),
    (
        "regression-unparsable",
        "stsb",
        "validation",
        {"STS-B/dev.tsv": STSB_HEAD + stsb_row("four")},
        ["STS-B/dev.tsv", "line 2", "'four'", "not a number"],
    ),
    (
        "regression-out-of-range",
        "stsb",
        "train",
        {"STS-B/train.tsv": STSB_HEAD + stsb_row("4.0") + stsb_row("5.5")},
        ["STS-B/train.tsv", "line 3", "5.5", "label_range [0.0, 5.0]"],
    ),
    (
        "blank-line",
        "sst2",
        "train",
        {"SST-2/train.tsv": "sentence\tlabel\nx\t1\n\ny\t0\n"},
        ["SST-2/train.tsv", "line 3", "blank line"],
    ),
    ("not-utf8", "sst2", "train", {"SST-2/train.tsv": b"sentence\tlabel\ncaf\xe9\t1\n"}, ["SST-2/train.tsv", "UTF-8"]),
    (
        "csv-label-not-in-set",
        user("csv"),
        "train",
        {"train.csv": 'text,label\n"a, b",a\nc,z\n'},
        ["train.csv", "line 3", "'z'", "['a', 'b']"],
    ),
    (
        "jsonl-invalid-json",
        user("jsonl"),
        "train",
        {"train.jsonl": '{"text": "x", "label": "a"}\n{"text": "y",\n'},
        ["train.jsonl", "line 2", "invalid JSON"],
    ),
    (
        "jsonl-missing-key",
        user("jsonl"),
        "train",
        {"train.jsonl": '{"text": "x", "label": "a"}\n{"text": "y", "label": "b"}\n{"txt": "z", "label": "a"}\n'},
        ["train.jsonl", "line 3", "'text'", "keys found: txt, label"],
    ),
    (
        "jsonl-not-object",
        user("jsonl"),
        "train",
        {"train.jsonl": '{"text": "x", "label": "a"}\n["y", "b"]\n'},
        ["train.jsonl", "line 2", "JSON object"],
    ),
    (
        "jsonl-null-text",
        user("jsonl"),
        "train",
        {"train.jsonl": '{"text": null, "label": "a"}\n'},
        ["train.jsonl", "line 1", "null"],
    ),
]


@pytest.mark.parametrize("case_id, task, split, files, fragments", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_input_raises_data_error(tmp_path, case_id, task, split, files, fragments):
    for rel, body in files.items():
        write(tmp_path / rel, body)
    spec = task(tmp_path) if callable(task) else get_task(task)
    with pytest.raises(DataError) as info:
        load_split(spec, split, glue_dir=tmp_path, source="local")
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


@pytest.mark.parametrize(
    "body, fragments",
    [
        ("text,label\na,x\nb,\n", ["train.csv", "line 3", "empty label"]),
        ("text,label\na,x\n", ["train.csv", "fewer than 2 distinct labels"]),
        ("txt,label\na,x\nb,y\n", ["train.csv", "'text'", "columns found: txt, label"]),
    ],
)
def test_label_inference_errors(tmp_path, body, fragments):
    write(tmp_path / "train.csv", body)
    with pytest.raises((DataError, ConfigError)) as info:
        custom_task("u", train="train.csv", base_dir=tmp_path)
    for fragment in fragments:
        assert fragment in str(info.value)


# --------------------------------------------------------------------------- issue 25.2: files that move, bad rows, ids

SKIP_CASES = [
    # format, file body, (line, problem) of each skipped row, texts kept, their idx (position in the file)
    (
        "csv",
        "text,label\nx,a\nonly a text\ny,c\nz,b\n\nw,a,extra\n",
        [(3, "too few fields"), (4, "label 'c'"), (6, "blank line"), (7, "too many fields")],
        ["x", "z"],
        [0, 3],
    ),
    (
        "tsv",
        'text\tlabel\n"x\ta\ny\n"z\tb\n',  # quotes are text in TSV: nothing spans lines
        [(3, "too few fields")],
        ['"x', '"z'],
        [0, 2],
    ),
    (
        "jsonl",
        '{"text": "x", "label": "a"}\n{"text": \n[1, 2]\n{"text": null, "label": "b"}\n{"label": "a"}\n'
        '{"text": "y", "label": "b"}\n',
        [(2, "invalid JSON"), (3, "found list"), (4, "is null"), (5, "missing key 'text'")],
        ["x", "y"],
        [0, 5],
    ),
]


@pytest.mark.parametrize("fmt, body, bad, texts, idx", SKIP_CASES, ids=[c[0] for c in SKIP_CASES])
def test_skip_bad_rows_counts_and_names_every_skipped_row(tmp_path, caplog, fmt, body, bad, texts, idx):
    from pals_adapters.harness.tasks.splits import SkippedRows

    path = write(tmp_path / f"train.{fmt}", body)
    strict = custom_task("u", train=path, labels=["a", "b"])
    with pytest.raises(DataError, match=f"train.{fmt}, line {bad[0][0]}"):
        load_split(strict, "train")  # without skip_bad_rows the first bad row is refused
    spec = custom_task("u", train=path, labels=["a", "b"], skip_bad_rows=True)
    skipped: list[SkippedRows] = []
    data = load_split(spec, "train", skipped=skipped)
    assert (data["text_a"], data["idx"]) == (texts, idx)
    [report] = skipped
    assert report.count == len(bad) and report.file == str(path)
    for (line, problem), (want_line, want) in zip(report.first, bad):
        assert line == want_line and want in problem
    assert f"skipped {len(bad)} malformed row{'s' * (len(bad) > 1)} of {path}" in caplog.text  # never silent


def test_skip_bad_rows_names_the_first_five_and_counts_all(tmp_path):
    from pals_adapters.harness.tasks.splits import SkippedRows

    rows = "".join("lonely\n" if i % 2 else f"t{i},a\n" for i in range(20))
    path = write(tmp_path / "t.csv", "text,label\n" + rows)
    spec = custom_task("u", train=path, labels=["a", "b"], skip_bad_rows=True)
    skipped: list[SkippedRows] = []
    assert len(load_split(spec, "train", skipped=skipped)) == 10
    assert skipped[0].count == 10 and [line for line, _ in skipped[0].first] == [3, 5, 7, 9, 11]
    assert "and 5 more" in skipped[0].describe()


def test_a_file_of_bad_rows_only_is_still_refused(tmp_path):
    path = write(tmp_path / "t.csv", "text,label\nx\ny\n")
    spec = custom_task("u", train=path, labels=["a", "b"], skip_bad_rows=True)
    with pytest.raises(DataError, match="no data rows .all 2 rows malformed"):
        load_split(spec, "train")


@pytest.mark.parametrize(
    "entry, fragment",
    [
        ({"skip_bad_rows": True}, "skip_bad_rows needs `labels`"),
        ({"skip_bad_rows": "yes", "labels": ["a", "b"]}, "skip_bad_rows must be true or false"),
        ({"id_column": "text"}, "id_column 'text' is also the text or label column"),
        ({"id_column": ""}, "id_column must be a column name"),
    ],
)
def test_task_file_options_of_issue_25_are_checked(tmp_path, entry, fragment):
    write(tmp_path / "t.csv", "id,text,label\n1,x,a\n2,y,b\n")
    (tmp_path / "tasks.yaml").write_text(yaml.safe_dump({"tasks": [{"name": "u", "train": "t.csv", **entry}]}))
    with pytest.raises(ConfigError, match=fragment):
        load_task_specs(tmp_path / "tasks.yaml")


@pytest.mark.parametrize(
    "fmt, body, expected",
    [
        ("csv", "code,text,label\nA-1,x,a\nB 2,y,b\n", ["A-1", "B 2"]),
        ("jsonl", '{"code": 7, "text": "x", "label": "a"}\n{"code": "r8", "text": "y", "label": "b"}\n', ["7", "r8"]),
    ],
)
def test_id_column_keeps_each_rows_id(tmp_path, fmt, body, expected):
    spec = custom_task("u", train=write(tmp_path / f"t.{fmt}", body), labels=["a", "b"], id_column="code")
    assert load_split(spec, "train")["id"] == expected


@pytest.mark.parametrize(
    "body, fragment",
    [
        ("code,text,label\nA,x,a\nA,y,b\n", "t.csv, line 3: id 'A' in column 'code' is also the id of line 2"),
        ("code,text,label\nA,x,a\n ,y,b\n", "t.csv, line 3 (data row 2): empty id in column 'code'"),
        ("text,label\nx,a\n", "missing column 'code'"),
    ],
)
def test_bad_ids_are_refused(tmp_path, body, fragment):
    spec = custom_task("u", train=write(tmp_path / "t.csv", body), labels=["a", "b"], id_column="code")
    with pytest.raises(DataError) as info:
        load_split(spec, "train")
    assert fragment in str(info.value)


def test_a_task_stores_its_files_relative_to_the_task_file(tmp_path):
    from pals_adapters.harness.tasks.spec import spec_to_json
    from pals_adapters.harness.tasks.user_tasks import comparable_spec, split_files, with_data_dir

    write(tmp_path / "course" / "data" / "train.csv", "text,label\nx,a\ny,b\n")
    (tmp_path / "course" / "tasks.yaml").write_text("name: u\ntrain: data/train.csv\n")
    [spec] = load_task_specs(tmp_path / "course" / "tasks.yaml")
    assert spec.splits == {"train": "data/train.csv"} and spec.data_dir == str(tmp_path / "course")
    moved = tmp_path / "elsewhere"
    (tmp_path / "course").rename(moved)
    relocated = with_data_dir(spec, moved)
    assert split_files(relocated) == {"train": str(moved / "data" / "train.csv")}
    assert load_split(relocated, "train")["text_a"] == ["x", "y"]
    # a record written before (absolute files, no new fields) is the same task as the spec now
    old = {**spec_to_json(spec), "splits": {"train": str(tmp_path / "course" / "data" / "train.csv")}}
    del old["skip_bad_rows"], old["id_column"]
    assert comparable_spec(old) == comparable_spec(spec_to_json(spec))
