"""CA-MTL in mixed batches and compositions, and what trains."""

import pytest
import torch
from adapters import AdapterSetup, AutoAdapterModel
from adapters.composition import Average, BatchSplit, Fuse, MultiTask, Parallel, Stack
from ca_mtl_models import encoder, plain_copy, reference_forward, with_tasks
from helpers import batch, tiny_bert_config
from tiny_models import bert

from pals_adapters.ca_mtl import (
    trainable_shared_parameters,
)

# --- mixed batches and compositions -------------------------------------------------------------------


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_a_mixed_batch_equals_its_per_task_parts_in_outputs_and_gradients(attn):
    model = with_tasks(bert(attn), "a", "b", "c")
    model.train_adapter(MultiTask("a", "b", "c"))
    for module in model.modules():
        module.training = False  # no dropout: the two runs must see the same function
    ids, mask = batch(size=6)
    task_ids = torch.tensor([2, 0, 1, 0, 2, 2])
    target = torch.randn(6, ids.shape[1], model.config.hidden_size)
    with AdapterSetup(MultiTask("a", "b", "c")):
        mixed = encoder(model, ids, mask, task_ids=task_ids)
    ((mixed - target) ** 2).sum().backward()
    mixed_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    parts = torch.zeros_like(mixed)
    for index, name in enumerate("abc"):
        rows = task_ids == index
        with AdapterSetup(name):
            out = encoder(model, ids[rows], mask[rows])
        ((out - target[rows]) ** 2).sum().backward()
        parts[rows] = out.detach()
    torch.testing.assert_close(mixed.detach(), parts, atol=1e-5, rtol=0)
    part_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert mixed_grads.keys() == part_grads.keys()
    assert {f"encoder.layer.0.ca_mtl_tasks.adapters.{t}.weight" for t in "abc"} <= mixed_grads.keys()
    for name in mixed_grads:
        torch.testing.assert_close(mixed_grads[name], part_grads[name], atol=1e-4, rtol=1e-4, msg=name)


def test_batch_split_equals_separate_runs_and_average_mixes_the_embeddings():
    model = with_tasks(bert(), "a", "b")
    ids, mask = batch()
    with torch.no_grad():
        with AdapterSetup("a"):
            out_a = encoder(model, ids[:1], mask[:1])
        with AdapterSetup("b"):
            out_b = encoder(model, ids[1:], mask[1:])
        with AdapterSetup(BatchSplit("a", "b", batch_sizes=[1, 3])):
            split = encoder(model, ids, mask)
        torch.testing.assert_close(split, torch.cat([out_a, out_b]), atol=1e-5, rtol=0)
        with AdapterSetup(Average("a", "b", weights=[0.25, 0.75])):
            averaged = encoder(model, ids, mask)
        tasks = model.encoder.layer[0].ca_mtl_tasks.adapters
        z = 0.25 * tasks["a"].weight + 0.75 * tasks["b"].weight
        expected = reference_forward(model, plain_copy(model), ids, mask, z.expand(len(ids), -1))
    torch.testing.assert_close(averaged, expected, atol=2e-5, rtol=0)


@pytest.mark.parametrize(
    "block, says",
    [
        (Stack("a", "b"), "stacked on another CA-MTL adapter"),
        (Parallel("a", "b"), "Parallel"),
        (Fuse("a", "b"), "Fuse"),
    ],
)
def test_compositions_without_a_meaning_for_ca_mtl_are_refused(block, says):
    model = with_tasks(bert(), "a", "b")
    ids, mask = batch()
    with pytest.raises(ValueError, match=says), AdapterSetup(block):
        encoder(model, ids, mask)


def test_rows_without_a_ca_mtl_task_are_refused():
    model = with_tasks(bert(), "a")
    model.add_adapter("h", config="double_seq_bn")
    ids, mask = batch()
    with (
        pytest.raises(ValueError, match="without a CA-MTL task"),
        AdapterSetup(BatchSplit("a", "h", batch_sizes=[2, 2])),
    ):
        encoder(model, ids, mask)


def test_gradient_checkpointing_recomputes_with_the_condition():
    torch.manual_seed(0)
    model = AutoAdapterModel.from_config(tiny_bert_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    with_tasks(model, "a")
    model.train_adapter("a")
    ids, mask = batch()
    grads = []
    for checkpointing in (False, True):
        if checkpointing:
            model.gradient_checkpointing_enable()
        model.zero_grad()
        encoder(model, ids, mask).pow(2).mean().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-6, rtol=1e-5, msg=name)


# --- what trains ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("film_trains", [True, False])
def test_train_adapter_freezes_the_bottom_half_and_trains_the_rest(film_trains):
    model = with_tasks(
        bert(), "a", "b", config=f"ca_mtl[max_seq_length=16,num_blocks=4,train_frozen_attention_film={film_trains}]"
    )
    model.add_adapter("h", config="double_seq_bn")  # another method's adapter inside the upper layers
    model.train_adapter("a")
    trains = {n for n, p in model.named_parameters() if p.requires_grad}
    expected = {"encoder.layer.0.ca_mtl_tasks.adapters.a.weight"}
    expected |= {f"ca_mtl.{n}" for n, _ in model.ca_mtl.named_parameters()}
    if not film_trains:  # the reference code's quirk: the attention FiLM of the frozen layers stays as initialised
        expected -= {f"ca_mtl.layers.{i}.attention.film.projection.{p}" for i in (0, 1) for p in ("weight", "bias")}
    for i in (2, 3):  # the upper half (4 layers)
        expected |= {
            n for n, _ in model.named_parameters() if n.startswith(f"encoder.layer.{i}.") and ".adapters.h." not in n
        }
    expected |= {n for n, _ in model.named_parameters() if n.startswith("pooler.")}
    assert trains == expected
    assert {n for n, _ in trainable_shared_parameters(model)} == expected - {
        "encoder.layer.0.ca_mtl_tasks.adapters.a.weight"
    }


def test_training_leaves_the_embeddings_and_bottom_layers_as_pretrained():
    model = with_tasks(bert(), "a")
    model.train_adapter("a")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    ids, mask = batch()
    encoder(model, ids, mask).pow(2).mean().backward()
    optimizer.step()
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert not any(
        n.startswith(("embeddings.", "encoder.layer.0.", "encoder.layer.1.")) and "ca_mtl_tasks" not in n
        for n in changed
    )
    assert "encoder.layer.0.ca_mtl_tasks.adapters.a.weight" in changed
    assert any(n.startswith("encoder.layer.3.") for n in changed) and any(n.startswith("ca_mtl.") for n in changed)
