"""Users' own tasks from CSV, TSV and JSONL files: formats, labels, skipped rows, ids, moved files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from task_files import write

from pals_adapters.errors import ConfigError, DataError
from pals_adapters.harness.tasks.splits import load_split, load_task
from pals_adapters.harness.tasks.user_tasks import custom_task, load_task_specs

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


# --------------------------------------------------------------------------- files that move, bad rows, ids

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
def test_task_file_options_are_checked(tmp_path, entry, fragment):
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
