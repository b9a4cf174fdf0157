"""Task files and data files that are refused, each with what to fix."""

from __future__ import annotations

import pytest
from task_files import write

from pals_adapters.errors import ConfigError, DataError
from pals_adapters.harness.tasks.glue import get_task
from pals_adapters.harness.tasks.splits import load_split
from pals_adapters.harness.tasks.user_tasks import custom_task

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
