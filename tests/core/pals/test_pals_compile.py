"""Compile tests of the PAL layer: no graph breaks, for one task per batch and for a batch mixing tasks
(adapters' MultiTask), and the compiled mixed route gives the eager one's outputs and gradients."""

import adapters
import pytest
import torch
from adapters import AdapterSetup
from adapters.composition import MultiTask
from helpers import batch, tiny_bert_config
from transformers import BertModel

import pals_adapters  # noqa: F401  (registers the PAL presets)

pytestmark = pytest.mark.compile

TASKS = ("a", "b", "c")
TASK_IDS = torch.tensor([2, 0, 1, 0])


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def encoder(preset="pals", dropout=0.1):
    torch.manual_seed(0)
    config = tiny_bert_config("sdpa", layers=2, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    model = BertModel(config)
    adapters.init(model)
    for task in TASKS:
        model.add_adapter(task, config=f"{preset}[attention_dropout={dropout}]")
    return model


def one_task(model, ids, mask):
    with AdapterSetup("b"):
        return model(input_ids=ids, attention_mask=mask).last_hidden_state


def mixed(model, ids, mask, task_ids):
    with AdapterSetup(MultiTask(*TASKS)):
        return model(input_ids=ids, attention_mask=mask, task_ids=task_ids).last_hidden_state


@pytest.mark.parametrize("route", ["one task", "mixed tasks"])
@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("preset", ["pals", "pals_no_share"])  # shared V_E/V_D, and each layer's own
def test_pal_layers_compile_without_graph_breaks(route, training, preset):
    model = encoder(preset).train(training)
    ids, mask = batch()
    if route == "one task":
        explained = torch._dynamo.explain(lambda i, m: one_task(model, i, m))(ids, mask)
    else:
        explained = torch._dynamo.explain(lambda i, m, t: mixed(model, i, m, t))(ids, mask, TASK_IDS)
    reasons = [str(b.reason)[:200] for b in explained.break_reasons]
    assert explained.graph_break_count == 0, reasons
    assert explained.graph_count == 1


@pytest.mark.parametrize("preset", ["pals", "pals_no_share"])
def test_compiled_mixed_batch_gives_the_eager_rows_and_gradients(preset):
    model = encoder(preset, dropout=0.0).train()
    ids, mask = batch()
    compiled = torch.compile(lambda i, m, t: mixed(model, i, m, t), backend="aot_eager")
    out = compiled(ids, mask, TASK_IDS)
    got = torch.autograd.grad(out.square().sum(), list(model.parameters()), allow_unused=True)
    expected = mixed(model, ids, mask, TASK_IDS)
    want = torch.autograd.grad(expected.square().sum(), list(model.parameters()), allow_unused=True)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    # Row i carries task task_ids[i]'s PAL: the same as that task alone on that row.
    for row, task in enumerate(TASK_IDS.tolist()):
        with torch.no_grad(), AdapterSetup(TASKS[task]):
            alone = model(input_ids=ids[row : row + 1], attention_mask=mask[row : row + 1]).last_hidden_state
        torch.testing.assert_close(out[row : row + 1].detach(), alone, atol=1e-5, rtol=1e-5)
    for g, w in zip(got, want):
        assert (g is None) == (w is None)
        if g is not None:
            torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-4)


def test_a_compiled_pal_model_compiles_once_for_repeated_calls():
    """Per-call state (the PALs' per-thread dict of outputs) exists before the first forward: created there,
    it failed a guard of the first graph on the second call and made torch.compile compile the model again."""
    graphs = []

    def counting(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    model = encoder().eval()
    model.set_active_adapters("b")  # not AdapterSetup: its own per-thread storage is created lazily (adapters')
    ids, mask = batch()
    compiled = torch.compile(model, backend=counting)
    with torch.no_grad():
        for _ in range(3):
            compiled(input_ids=ids, attention_mask=mask)
    assert len(graphs) == 1
