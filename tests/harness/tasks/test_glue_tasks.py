"""The GLUE tasks: the registry, the real files of ../shared/glue, synthetic layouts and the Hub (faked)."""

from __future__ import annotations

import functools

import datasets
import pytest
from task_files import GLUE_DIR, needs_glue, write

from pals_adapters.errors import ConfigError, DataError, PalsError, UnknownNameError
from pals_adapters.harness.tasks.glue import GLUE_TASKS, get_task
from pals_adapters.harness.tasks.spec import TaskSpec
from pals_adapters.harness.tasks.splits import load_split, load_task


@functools.cache
def real(task: str, split: str) -> datasets.Dataset:
    """Each real split is loaded once per session."""
    return load_split(task, split, glue_dir=GLUE_DIR, source="local")


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
