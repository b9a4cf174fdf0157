"""One base serving many tasks: exports loaded together, requests that name their task, one forward."""

import pytest
import torch
from transformers import AutoTokenizer, BertModel

from pals_adapters.errors import AdapterLoadError, ConfigError
from pals_adapters.harness.cli import main
from pals_adapters.harness.export import export_run, load_task, load_tasks
from pals_adapters.harness.methods import get_method
from pals_adapters.harness.model import MultiTaskModel
from pals_adapters.harness.serving import MultiTaskPredictor
from pals_adapters.harness.tasks import GLUE_TASKS

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


def test_cli_predict_over_a_file_with_a_task_column(tmp_path, tiny_model_dir, capsys):
    out = exported(tmp_path, tiny_model_dir)
    requests = tmp_path / "requests.tsv"
    rows = ["id\ttask\ttext\ttext_b"] + [
        f"r{i}\t{r['task']}\t{r['text']}\t{r.get('text_b', '')}" for i, r in enumerate(REQUESTS)
    ]
    requests.write_text("\n".join(rows) + "\n")
    assert main(["predict", str(out), "--input", str(requests), "--out", str(tmp_path / "answers.tsv")]) == 0
    lines = (tmp_path / "answers.tsv").read_text().splitlines()
    assert lines[0] == "id\ttask\tprediction"
    assert [line.split("\t")[:2] for line in lines[1:]] == [[f"r{i}", r["task"]] for i, r in enumerate(REQUESTS)]
    expected = MultiTaskPredictor.from_exports(out).predict(REQUESTS)
    for line, answer in zip(lines[1:], expected):
        got = line.split("\t")[2]
        assert got == (f"{answer.label:.3f}" if isinstance(answer.label, float) else answer.label)

    requests.write_text("id\ttask\ttext\ttext_b\nr0\tqnli\ta\tb\n")
    with pytest.raises(SystemExit) as info:
        main(["predict", str(out), "--input", str(requests), "--out", str(tmp_path / "x.tsv")])
    assert info.value.code == 2
    assert "line 2" in capsys.readouterr().err
