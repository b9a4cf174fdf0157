"""One base serving many tasks: exports loaded together, requests that name their task, one forward."""

import csv
import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, BertModel

from pals_adapters.errors import AdapterLoadError, ConfigError
from pals_adapters.harness.cli import main
from pals_adapters.harness.export import export_run, load_task, load_tasks
from pals_adapters.harness.export.fingerprint import tokenizer_fingerprint
from pals_adapters.harness.methods.model import MultiTaskModel
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.harness.serving.predictor import MultiTaskPredictor
from pals_adapters.harness.tasks.glue import GLUE_TASKS
from pals_adapters.harness.tasks.user_tasks import load_task_specs

TASKS = {name: GLUE_TASKS[name] for name in ("rte", "cola", "stsb")}
REQUESTS = [
    {"task": "cola", "text": "The book was read by the girl."},
    {"task": "rte", "text": "A man sleeps on a sofa.", "text_b": "Nobody is sleeping."},
    {"task": "stsb", "text": "A dog runs.", "text_b": "A dog is running."},
    {"task": "cola", "text": "Book the read girl was."},
    {"task": "rte", "text": "It rains.", "text_b": "The street is wet and people carry umbrellas."},
]


def exported(tmp_path, model_dir, method="pals", seed=0, name="export"):
    torch.manual_seed(seed)
    model = MultiTaskModel(BertModel.from_pretrained(model_dir), TASKS, get_method(method), "finetune")
    with torch.no_grad():  # a trained-looking model: not the initial weights
        for param in model.trainable_parameters():
            param.add_(torch.randn_like(param) * 0.02)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    export_run(model, tmp_path / name, base_model_name=str(model_dir), tokenizer=tokenizer, max_length=40)
    return tmp_path / name


@pytest.mark.parametrize("method", ["pals", "peft_lora"])
def test_mixed_requests_get_the_answers_of_each_task_loaded_alone(tmp_path, tiny_model_dir, method):
    out = exported(tmp_path, tiny_model_dir, method)
    predictor = MultiTaskPredictor.from_exports(out)
    assert set(predictor.model.tasks) == set(TASKS)
    assert predictor.one_forward == (method == "pals")
    answers = predictor.predict(REQUESTS)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    for request, answer in zip(REQUESTS, answers):
        task = request["task"]
        alone = load_task(out / task)
        texts = [request["text"]] + ([request["text_b"]] if TASKS[task].is_pair else [])
        inputs = tokenizer(*texts, truncation=True, max_length=40, return_tensors="pt")
        with torch.no_grad():
            expected = alone(task=task, **inputs)["logits"][0]
        assert answer.task == task
        torch.testing.assert_close(torch.tensor(answer.logits), expected, atol=1e-5, rtol=1e-5)
        if TASKS[task].is_regression:
            assert isinstance(answer.label, float) and 0.0 <= answer.label <= 5.0
        else:
            assert answer.label == TASKS[task].labels[int(expected.argmax())]


def test_tasks_of_different_runs_cannot_share_a_model(tmp_path, tiny_model_dir):
    a = exported(tmp_path, tiny_model_dir, seed=0, name="a")
    b = exported(tmp_path, tiny_model_dir, seed=1, name="b")
    with pytest.raises(AdapterLoadError, match="base fingerprint"):
        load_tasks([a / "rte", b / "cola"])
    with pytest.raises(AdapterLoadError, match="given twice"):
        load_tasks([a / "rte", a / "rte"])


def test_a_request_for_a_task_not_served_names_it(tmp_path, tiny_model_dir):
    predictor = MultiTaskPredictor.from_exports(exported(tmp_path, tiny_model_dir))
    with pytest.raises(ConfigError, match="'mrpc' is not served"):
        predictor.predict([{"task": "mrpc", "text": "a", "text_b": "b"}])
    with pytest.raises(ConfigError, match="needs 'text' and 'text_b'"):
        predictor.predict([{"task": "rte", "text": "only one"}])
    bad = [{"task": "rte", "text": "a"}, {"task": "rte", "text": "a", "text_b": "b"}, {"task": "mrpc", "text": "c"}]
    with pytest.raises(ConfigError, match=r"2 requests to fix:\nrequest 0: .*needs 'text' and 'text_b'.*\nrequest 2: "):
        predictor.predict(bad)  # every bad request, not only the first
    answer = predictor.predict([bad[1]])[0]
    assert answer.by_label == dict(zip(("entailment", "not_entailment"), answer.probabilities))


def test_a_request_file_names_every_bad_line(tmp_path, tiny_model_dir, capsys):
    from pals_adapters.harness.cli import main

    out = exported(tmp_path, tiny_model_dir)
    requests = tmp_path / "requests.jsonl"
    lines = [{"task": "rte", "text": "a"}, {"id": 1.5, "task": "rte", "text": "a", "text_b": "b"}, {"task": "x"}]
    requests.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(SystemExit):  # the bad id first (reading the file), then every bad request
        main(["predict", str(out), "--input", str(requests), "--out", str(tmp_path / "answers.tsv")])
    assert "1 requests to fix" in capsys.readouterr().err
    lines[1]["id"] = 1
    requests.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(SystemExit):
        main(["predict", str(out), "--input", str(requests), "--out", str(tmp_path / "answers.tsv")])
    err = capsys.readouterr().err
    assert "2 requests to fix" in err and "line 1: task 'rte' needs" in err and "line 3: task 'x' is not served" in err


def test_cli_predict_over_a_file_with_a_task_column(tmp_path, tiny_model_dir, capsys):
    out = exported(tmp_path, tiny_model_dir)
    requests = tmp_path / "requests.tsv"
    rows = ["id\ttask\ttext\ttext_b"] + [
        f"r{i}\t{r['task']}\t{r['text']}\t{r.get('text_b', '')}" for i, r in enumerate(REQUESTS)
    ]
    requests.write_text("\n".join(rows) + "\n")
    assert main(["predict", str(out), "--input", str(requests), "--out", str(tmp_path / "answers.tsv")]) == 0
    lines = (tmp_path / "answers.tsv").read_text().splitlines()
    assert lines[0] == "id\ttask\tprediction\tprobability"
    assert [line.split("\t")[:2] for line in lines[1:]] == [[f"r{i}", r["task"]] for i, r in enumerate(REQUESTS)]
    expected = MultiTaskPredictor.from_exports(out).predict(REQUESTS)
    for line, answer in zip(lines[1:], expected):
        got, probability = line.split("\t")[2:]
        assert got == (f"{answer.label:.3f}" if isinstance(answer.label, float) else answer.label)
        if TASKS[answer.task].is_regression:
            assert probability == "" and answer.probability is None
        else:
            assert float(probability) == pytest.approx(max(answer.probabilities), abs=1e-4)
            assert sum(answer.probabilities) == pytest.approx(1.0)
            assert answer.label == TASKS[answer.task].labels[answer.probabilities.index(answer.probability)]

    requests.write_text("id\ttask\ttext\ttext_b\nr0\tqnli\ta\tb\n")
    with pytest.raises(SystemExit) as info:
        main(["predict", str(out), "--input", str(requests), "--out", str(tmp_path / "x.tsv")])
    assert info.value.code == 2
    assert "line 2" in capsys.readouterr().err


# Written by hand, as users write them: single-text and pair tasks mixed, the first record without an
# id or text_b, ids with a tab, a line break, a quote, a number, and missing ids.
HAND_WRITTEN = [
    {"task": "cola", "text": "The book was read by the girl."},
    {"id": "a\tb", "task": "rte", "text": "A man sleeps on a sofa.", "text_b": "Nobody is sleeping."},
    {"id": 7, "task": "stsb", "text": "A dog runs.", "text_b": "A dog is running."},
    {"task": "rte", "text": "It rains.", "text_b": "The street is wet."},
    {"id": 'two\nlines, "quoted"', "task": "cola", "text": "Book the read girl was."},
]
IDS = [0, "a\tb", 7, 3, 'two\nlines, "quoted"']


@pytest.fixture
def hand_written(tmp_path):
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in HAND_WRITTEN))
    return path


def test_each_jsonl_request_stands_alone_and_every_given_id_comes_back_exactly(
    tmp_path, tiny_model_dir, hand_written, capfd
):
    out = exported(tmp_path, tiny_model_dir)
    expected = MultiTaskPredictor.from_exports(out).predict(HAND_WRITTEN)
    capfd.readouterr()
    for name in ("answers.jsonl", "answers.tsv", "answers.csv"):
        assert main(["predict", str(out), "--input", str(hand_written), "--out", str(tmp_path / name)]) == 0
    # transformers' advice about padding with a fast tokenizer does not reach the user
    assert "You're using a" not in capfd.readouterr().err

    answers = [json.loads(line) for line in (tmp_path / "answers.jsonl").read_text().splitlines()]
    assert [a["id"] for a in answers] == IDS  # a number stays a number, text stays exact
    assert [a["task"] for a in answers] == [r["task"] for r in HAND_WRITTEN]
    for got, answer in zip(answers, expected):
        assert got["prediction"] == answer.label  # exact (a regression score unrounded)
        if answer.probabilities is None:
            assert got["probability"] is None and got["probabilities"] is None
        else:
            assert got["probabilities"] == dict(zip(TASKS[answer.task].labels, answer.probabilities))
            assert got["probability"] == answer.probability
    for name, delimiter in (("answers.tsv", "\t"), ("answers.csv", ",")):
        with open(tmp_path / name, newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle, delimiter=delimiter))
        assert rows[0] == ["id", "task", "prediction", "probability"]
        assert [row[0] for row in rows[1:]] == [str(i) for i in IDS]  # one row per request, none split
        assert [row[1] for row in rows[1:]] == [r["task"] for r in HAND_WRITTEN]


def test_predict_refuses_a_max_length_the_base_cannot_take(tmp_path, tiny_model_dir):
    out = exported(tmp_path, tiny_model_dir)
    with pytest.raises(ConfigError, match="max_length 129: give 1 to 128"):
        MultiTaskPredictor.from_exports(out, max_length=129)
    predictor = MultiTaskPredictor.from_exports(out)
    for length in (129, -5, 0, 2.5):
        with pytest.raises(ConfigError, match=f"max_length of task 'rte' {length!r}: give"):
            MultiTaskPredictor(predictor.model, predictor.tokenizer, {**predictor.max_length, "rte": length})


@pytest.mark.parametrize("batch_size", [-1, 0, 2.5, None, True, "8"])
def test_the_batch_size_is_a_whole_number_of_requests(tmp_path, tiny_model_dir, batch_size):
    out = exported(tmp_path, tiny_model_dir)
    with pytest.raises(ConfigError, match=f"batch_size={batch_size!r}: give a whole number >= 1"):
        MultiTaskPredictor.from_exports(out, batch_size=batch_size)
    predictor = MultiTaskPredictor.from_exports(out)
    with pytest.raises(ConfigError, match="batch_size"):
        MultiTaskPredictor(predictor.model, predictor.tokenizer, batch_size=batch_size)
    assert len(MultiTaskPredictor(predictor.model, predictor.tokenizer, 40, batch_size=1).predict(REQUESTS)) == 5


def test_every_task_is_checked_against_the_tokenizer(tmp_path, tiny_model_dir):
    """A task added after the base's tokenizer changed records the new tokenizer; the older tasks record the
    old one, and serving them with the new one would change their answers without a word."""
    pretrained = Path(shutil.copytree(tiny_model_dir, tmp_path / "pretrained"))
    model = MultiTaskModel(BertModel.from_pretrained(pretrained), TASKS, get_method("pals"), "frozen")
    export_run(
        model, tmp_path / "export", base_model_name=str(pretrained), tokenizer=AutoTokenizer.from_pretrained(pretrained)
    )
    config = json.loads((pretrained / "tokenizer_config.json").read_text())
    (pretrained / "tokenizer_config.json").write_text(json.dumps({**config, "padding_side": "left"}))
    # "cola" (the first folder) as if added later, trained with the changed tokenizer
    manifest = tmp_path / "export" / "cola" / "manifest.json"
    record = json.loads(manifest.read_text())
    record["tokenizer_files"] = tokenizer_fingerprint(AutoTokenizer.from_pretrained(pretrained))
    manifest.write_text(json.dumps(record))
    with pytest.raises(AdapterLoadError, match="export/rte was trained with"):
        MultiTaskPredictor.from_exports(tmp_path / "export")


def user_task_files(folder: Path) -> Path:
    """Two user tasks: "reviews" with a test file whose id column has gaps, a tab and a line break, and
    "pairs" with no test file."""
    folder.mkdir()
    rows = "".join(f"review {i},{'pos' if i % 2 else 'neg'}\n" for i in range(8))
    (folder / "train.csv").write_text("text,label\n" + rows)
    (folder / "dev.csv").write_text("id,text,label\nd1,fine,pos\n,dull,neg\n")
    (folder / "test.csv").write_text('id,text\nr-1,great\n,awful\n"tab\there",meh\n"two\nlines",ok\n')
    (folder / "pairs.csv").write_text("a,b,label\n" + "".join(f"x{i},y{i},{i % 2}\n" for i in range(8)))
    (folder / "tasks.yaml").write_text(
        "tasks:\n"
        "  - {name: reviews, train: train.csv, validation: dev.csv, test: test.csv, text_columns: [text]}\n"
        "  - {name: pairs, train: pairs.csv, validation: pairs.csv, text_columns: [a, b]}\n"
    )
    return folder / "tasks.yaml"


def test_predict_on_an_export_predicts_the_tasks_that_have_the_split_and_names_the_others(
    tmp_path, tiny_model_dir, capsys
):
    specs = {spec.name: spec for spec in load_task_specs(user_task_files(tmp_path / "data"))}
    model = MultiTaskModel(BertModel.from_pretrained(tiny_model_dir), specs, get_method("pals"), "finetune")
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    export_run(model, tmp_path / "export", base_model_name=str(tiny_model_dir), tokenizer=tokenizer, max_length=32)

    assert main(["predict", str(tmp_path / "export"), "--out", str(tmp_path / "pred")]) == 0
    printed = capsys.readouterr().out
    assert "reviews-test.tsv: 4 predictions" in printed
    assert "skipped pairs: it has no test file" in printed
    assert sorted(p.name for p in (tmp_path / "pred").iterdir()) == ["reviews-test.tsv"]
    with open(tmp_path / "pred" / "reviews-test.tsv", newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle, delimiter="\t"))
    assert rows[0] == ["id", "prediction", "probability"]
    assert [row[0] for row in rows[1:]] == ["r-1", "1", "tab\there", "two\nlines"]  # given ids kept, gaps numbered
    assert {row[1] for row in rows[1:]} <= {"neg", "pos"}
    assert all(0.5 <= float(row[2]) <= 1 for row in rows[1:])

    argv = ["predict", str(tmp_path / "export"), "--split", "validation", "--format", "jsonl"]
    assert main([*argv, "--out", str(tmp_path / "dev")]) == 0
    dev = [json.loads(line) for line in (tmp_path / "dev" / "reviews-validation.jsonl").read_text().splitlines()]
    assert [row["id"] for row in dev] == ["d1", 1]
    assert set(dev[0]["probabilities"]) == {"neg", "pos"}
    pairs = (tmp_path / "dev" / "pairs-validation.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in pairs] == list(range(8))  # no id column: the row numbers

    (tmp_path / "data" / "tasks.yaml").write_text(
        "tasks:\n  - {name: pairs, train: pairs.csv, validation: pairs.csv, text_columns: [a, b]}\n"
    )
    with pytest.raises(SystemExit):
        main(["predict", str(tmp_path / "export" / "pairs"), "--out", str(tmp_path / "none")])
    assert "no task has a test split to predict (pairs: add 'test: FILE'" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()
