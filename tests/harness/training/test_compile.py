"""Compile tests: a torch.compile'd `MultiTaskModel` gives the eager outputs and training step, compiles each
task once, and ``compile: true`` reaches the Trainer.

They use the ``aot_eager`` backend (dynamo's full capture of the model, its hooks and its backward,
without C++ code generation, which takes about a minute per model on a small shared CPU); the
inductor path is the one `python -m benchmarks run speed --compile` measures.
"""

import copy
import json
import os

import pytest
import torch
from helpers import batch, tiny_bert_config, tiny_run_config
from transformers import BertModel

from pals_adapters.harness.methods.model import MultiTaskModel
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.harness.tasks.glue import GLUE_TASKS
from pals_adapters.harness.training.compiling import allow_task_graphs, compile_model

pytestmark = pytest.mark.compile

TASKS = {"rte": GLUE_TASKS["rte"], "stsb": GLUE_TASKS["stsb"]}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test starts without the graphs (and graph counts) of the tests before it."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def model_without_dropout(method, tasks=TASKS, layers=2):
    """Dropout off everywhere: compiled code may draw its random numbers in another order."""
    torch.manual_seed(0)
    config = tiny_bert_config("sdpa", layers=layers, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = MultiTaskModel(BertModel(config), tasks, get_method(method), "finetune")
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        elif isinstance(getattr(module, "dropout", None), float):  # the PAL's attention dropout
            module.dropout = 0.0
    return model


def labelled(task, seed=0):
    ids, mask = batch(seed=seed)
    labels = torch.tensor([0.5, 1.0, 3.0, 4.5]) if task == "stsb" else torch.tensor([0, 1, 1, 0])
    return {"task": task, "input_ids": ids, "attention_mask": mask, "labels": labels}


@pytest.mark.parametrize("method", ["pals", "ca_mtl", "houlsby", "lora"])
def test_compiled_model_gives_the_eager_outputs_and_training_step(method):
    eager = model_without_dropout(method)
    twin = copy.deepcopy(eager)
    compiled = compile_model(twin, backend="aot_eager")
    eager.eval(), compiled.eval()
    with torch.no_grad():
        for task in TASKS:
            inputs = {k: v for k, v in labelled(task).items() if k != "labels"}
            torch.testing.assert_close(compiled(**inputs)["logits"], eager(**inputs)["logits"], atol=1e-5, rtol=1e-5)
    eager.train(), compiled.train()
    for model in (eager, twin):
        optimizer = torch.optim.SGD(model.trainable_parameters(), lr=0.1)
        loss = (compiled if model is twin else eager)(**labelled("rte", seed=1))["loss"]
        loss.backward()
        optimizer.step()
        model.loss_after_step = float(loss.detach())
    assert abs(eager.loss_after_step - twin.loss_after_step) < 1e-5
    for (name, p), q in zip(eager.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q, p, atol=1e-5, rtol=1e-4, msg=f"{name} after one step")
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in twin.trainable_parameters())


class CountingBackend:
    """A torch.compile backend that counts the graphs it is given and runs them as they are."""

    def __init__(self):
        self.graphs = 0

    def __call__(self, graph_module, example_inputs):
        self.graphs += 1
        return graph_module.forward


def test_changing_the_task_does_not_recompile_every_step():
    names = [f"task{i}" for i in range(9)]  # more tasks than torch keeps graphs of by default (8)
    model = model_without_dropout("pals", {name: GLUE_TASKS["rte"] for name in names}, layers=1).eval()
    backend = CountingBackend()
    compiled = compile_model(model, backend=backend)

    def one_round():
        with torch.no_grad():
            for name in names:  # a new task every step
                compiled(**{k: v for k, v in labelled(name).items() if k != "labels"})

    one_round()
    first_round = backend.graphs
    # Each task compiled (none left to eager Python by the graph limit), one graph each ...
    assert first_round == len(names)
    one_round()
    one_round()
    assert backend.graphs == first_round  # ... and later steps reuse them


def test_compiled_models_draw_random_numbers_with_torch_kernels():
    with torch._inductor.config.patch(fallback_random=False):
        compile_model(model_without_dropout("pals"), backend="aot_eager")
        assert torch._inductor.config.fallback_random  # inductor's CPU generator is slower than eager's


def test_graph_room_grows_with_the_tasks_and_never_shrinks():
    with torch._dynamo.config.patch(recompile_limit=8, accumulated_recompile_limit=256):
        allow_task_graphs(10)
        assert torch._dynamo.config.recompile_limit >= 2 * 10
        allow_task_graphs(1)
        assert torch._dynamo.config.recompile_limit >= 2 * 10


def test_compile_setting_reaches_the_trainer_and_leaves_no_switch_behind(tmp_path, tiny_model_dir, monkeypatch):
    from pals_adapters.harness.training.runner import run

    compiled_modules = []
    original_compile = torch.compile

    def recording_compile(model, *args, **kwargs):
        kwargs["backend"] = "aot_eager"  # as test_compiled_model_...: capture without code generation
        compiled_modules.append((type(model).__name__, kwargs.pop("mode", None)))  # aot_eager takes no mode
        return original_compile(model, *args, **kwargs)

    monkeypatch.setattr(torch, "compile", recording_compile)
    monkeypatch.delenv("ACCELERATE_DYNAMO_BACKEND", raising=False)
    # compile_mode goes to the Trainer's torch_compile_mode, and from there (accelerate) to torch.compile
    settings = dict(tasks=["rte", "stsb"], max_steps=2, compile=True, compile_mode="reduce-overhead")
    results = run(tiny_run_config(tiny_model_dir, tmp_path / "run", **settings))
    assert compiled_modules == [("MultiTaskModel", "reduce-overhead")]
    assert results["config"]["compile"] is True and results["config"]["compile_mode"] == "reduce-overhead"
    assert all(entry["loss"] == entry["loss"] for entry in results["log_history"] if "loss" in entry)  # not NaN
    assert not [key for key in os.environ if key.startswith("ACCELERATE_DYNAMO_")]

    # evaluate / predict --compile: the exported task's model is compiled and scores as the run scored it.
    from pals_adapters.harness.cli import main

    compiled_modules.clear()
    report = tmp_path / "eval.json"
    rte = str(tmp_path / "run" / "export" / "rte")
    assert main(["evaluate", rte, "--compile", "--compile-mode", "max-autotune", "--out", str(report)]) == 0
    assert compiled_modules == [("MultiTaskModel", "max-autotune")]
    scores = json.loads(report.read_text())
    accuracy = scores["tasks"]["rte"]["metrics"]["rte_accuracy"]
    assert accuracy == pytest.approx(results["metrics"]["rte_accuracy"], abs=1e-9)
    compiled_modules.clear()
    requests = tmp_path / "requests.jsonl"
    requests.write_text(json.dumps({"task": "rte", "text": "A man walks.", "text_b": "Someone walks."}) + "\n")
    answers = tmp_path / "answers.jsonl"
    assert main(["predict", str(tmp_path / "run" / "export"), "--input", str(requests), "--out", str(answers)]) == 0
    assert compiled_modules == []
    assert (
        main(
            ["predict", str(tmp_path / "run" / "export"), "--input", str(requests), "--out", str(answers), "--compile"]
        )
        == 0
    )
    assert compiled_modules == [("MultiTaskModel", None)]  # torch's default mode
