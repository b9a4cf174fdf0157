"""PAL adapters' life cycle (what trains, delete, summary), composition and supported models."""

import pytest
import torch
from adapters import AutoAdapterModel
from adapters.composition import Average, BatchSplit, Fuse, Parallel, Stack
from helpers import batch, tiny_bert_config, tiny_roberta_config
from tiny_models import PRESETS, bert, wrapped
from transformers import BertForSequenceClassification, GPT2Config, GPT2Model, RobertaModel

from pals_adapters import UnsupportedModelError

# --- adapter life cycle -----------------------------------------------------------------------------


def trainable(model):
    return {n for n, p in model.named_parameters() if p.requires_grad}


def test_train_adapter_trains_only_pal_and_head():
    model = AutoAdapterModel.from_config(tiny_bert_config())
    for task in ("a", "b"):
        model.add_adapter(task, config="pals")
        model.add_classification_head(task, num_labels=2)
    model.train_adapter("a")
    names = trainable(model)
    # adapters leaves every head trainable (an inactive head gets no gradient); the base and PAL "b" are frozen
    assert names and all(".adapters.a." in n or "shared_parameters.a." in n or n.startswith("heads.") for n in names)
    assert any("shared_parameters.a.down_weight" in n for n in names)
    assert any(n.startswith("heads.a.") for n in names)


def test_fine_tuning_the_base_with_pals_updates_both():
    model = AutoAdapterModel.from_config(tiny_bert_config())
    model.add_adapter("a", config="pals")
    model.add_classification_head("a", num_labels=2)
    model.set_active_adapters("a")
    model.train()
    ids, mask = batch()
    labels = torch.tensor([0, 1, 1, 0])
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(5):
        loss = model(ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert any("encoder.layer.0.attention" in n for n in changed)  # base trained
    assert any(".pals.adapters.a." in n for n in changed) and any("shared_parameters.a" in n for n in changed)
    assert losses[-1] < losses[0]


def test_delete_adapter_removes_every_weight():
    model = bert()
    n_before = sum(p.numel() for p in model.parameters())
    model.add_adapter("t", config="pals")
    model.delete_adapter("t")
    assert sum(p.numel() for p in model.parameters()) == n_before
    assert "t" not in model.shared_parameters and "t" not in model.adapters_config


@pytest.mark.parametrize("preset", PRESETS)
def test_adapter_summary_counts_match_added_parameters(preset):
    model = bert()
    n_before = sum(p.numel() for p in model.parameters())
    model.add_adapter("t", config=preset)
    added = sum(p.numel() for p in model.parameters()) - n_before
    (row,) = [r for r in model.adapter_summary(as_dict=True) if r["name"] == "t"]
    assert row["#param"] == added > 0
    assert row["architecture"] == "pals"


def test_several_pal_adapters_are_independent():
    model = bert()
    model.add_adapter("a", config="pals")
    model.add_adapter("b", config="pals_no_share")
    ids, mask = batch()
    with torch.no_grad():
        model.set_active_adapters("a")
        out_a = model(ids, attention_mask=mask).last_hidden_state
        model.delete_adapter("b")
        assert torch.equal(model(ids, attention_mask=mask).last_hidden_state, out_a)


# --- composition -----------------------------------------------------------------------------


def outputs_per_adapter(model, names, ids, mask):
    out = {}
    for name in names:
        model.set_active_adapters(name)
        out[name] = model(ids, attention_mask=mask).last_hidden_state
    return out


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("padded", [True, False])
def test_parallel_and_batch_split_equal_separate_runs(attn, padded):
    model = bert(attn)
    names = ["a", "b", "c"]
    for name, preset in zip(names, ["pals", "pals_top_layers", "low_rank"]):
        model.add_adapter(name, config=preset)
    ids, mask = batch(padded, size=6)
    with torch.no_grad():
        single = outputs_per_adapter(model, names, ids, mask)
        model.set_active_adapters(Parallel(*names))
        par = model(ids, attention_mask=mask).last_hidden_state
        model.set_active_adapters(BatchSplit(*names, batch_sizes=[1, 3, 2]))
        split = model(ids, attention_mask=mask).last_hidden_state
    for i, name in enumerate(names):
        assert torch.allclose(par[6 * i : 6 * (i + 1)], single[name], atol=1e-6)
    for name, rows in zip(names, [slice(0, 1), slice(1, 4), slice(4, 6)]):
        assert torch.allclose(split[rows], single[name][rows], atol=1e-6)


def test_parallel_heads_on_adapter_model_equal_separate_runs():
    model = AutoAdapterModel.from_config(tiny_bert_config()).eval()
    for name, labels in (("a", 2), ("b", 3)):
        model.add_adapter(name, config="pals")
        model.add_classification_head(name, num_labels=labels)
    ids, mask = batch()
    with torch.no_grad():
        single = {}
        for name in ("a", "b"):
            model.set_active_adapters(name)
            model.active_head = name
            single[name] = model(ids, attention_mask=mask).logits
        model.set_active_adapters(Parallel("a", "b"))
        outputs = model(ids, attention_mask=mask)
    assert torch.allclose(outputs[0].logits, single["a"], atol=1e-6)
    assert torch.allclose(outputs[1].logits, single["b"], atol=1e-6)


def test_average_weights_the_pal_outputs():
    model = bert()
    model.add_adapter("a", config="pals")
    model.add_adapter("b", config="pals")
    ids, mask = batch()
    with torch.no_grad():
        model.set_active_adapters(Average("a", "b", weights=[1.0, 0.0]))
        avg = model(ids, attention_mask=mask).last_hidden_state
        model.set_active_adapters("a")
        assert torch.allclose(avg, model(ids, attention_mask=mask).last_hidden_state, atol=1e-6)


@pytest.mark.parametrize("block", [Fuse("a", "b"), Stack(Fuse("a", "b"))])
def test_unsupported_composition_names_the_block(block):
    model = bert()
    model.add_adapter("a", config="pals")
    model.add_adapter("b", config="pals")
    model.set_active_adapters(block)
    ids, mask = batch()
    with pytest.raises(ValueError, match="Fuse block"):
        model(ids, attention_mask=mask)


def test_pals_with_houlsby_on_one_model():
    model = bert()
    model.add_adapter("p", config="pals")
    model.add_adapter("h", config="double_seq_bn")
    model.add_adapter("u", config="pals|double_seq_bn")  # one adapter with both
    ids, mask = batch()
    with torch.no_grad():
        out = outputs_per_adapter(model, ["p", "h", "u"], ids, mask)
        model.set_active_adapters(Stack("h", "p"))
        both = model(ids, attention_mask=mask).last_hidden_state
    assert not torch.allclose(both, out["p"]) and not torch.allclose(both, out["h"])
    assert torch.isfinite(both).all() and torch.isfinite(out["u"]).all()
    model.train_adapter("u")
    names = trainable(model)
    assert any(".pals.adapters.u." in n for n in names) and any(".adapters.u.adapter_down" in n for n in names)


# --- models ------------------------------------------------------------------------------------


def test_roberta_and_sequence_classification_models_work():
    for model in (
        wrapped(RobertaModel(tiny_roberta_config("sdpa"))),
        wrapped(BertForSequenceClassification(tiny_bert_config())),
    ):
        ids, mask = batch()
        with torch.no_grad():
            base = model(ids, attention_mask=mask)[0]
            model.add_adapter("t", config="pals", set_active=True)
            assert not torch.allclose(model(ids, attention_mask=mask)[0], base)


def test_unsupported_architecture_is_a_clear_error():
    model = wrapped(GPT2Model(GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=99)))
    with pytest.raises(UnsupportedModelError, match="model_type 'gpt2'"):
        model.add_adapter("t", config="pals")
    assert "t" not in model.adapters_config
    model.add_adapter("lora", config="lora")  # the model itself still works


def test_feed_forward_chunking_is_refused():
    model = bert(chunk_size_feed_forward=2)
    with pytest.raises(UnsupportedModelError, match="chunk_size_feed_forward"):
        model.add_adapter("t", config="pals")
