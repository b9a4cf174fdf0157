"""The PAL forward against a plain re-statement of the paper's formula, and its initialisation."""

import math

import pytest
import torch
import torch.nn.functional as F
from helpers import batch, tiny_bert_config
from tiny_models import PRESETS, bert
from transformers import BertModel

from pals_adapters import PALsConfig

# --- an independent, plain re-statement of the paper's formula ---------------------------------


def reference_pal(h, mask, down_w, down_b, qkv_w, qkv_b, up_w, up_b, heads, inner):
    """TS(h) = GELU(V_D · MH_small(V_E · h)), written out with matmuls and softmax."""
    x = h @ down_w.T + down_b
    if inner == "attention":
        batch_size, length, size = x.shape
        head = size // heads
        q, k, v = (x @ qkv_w.T + qkv_b).split(size, dim=-1)
        q, k, v = (t.reshape(batch_size, length, heads, head).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(head) + mask
        x = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch_size, length, size)
    return F.gelu(x @ up_w.T + up_b)


def reference_forward(model, plain, name, ids, attention_mask):
    """Encoder output of ``plain`` (an unadapted BERT with the same weights) plus the PALs of ``model``."""
    config = model.adapters_config.match(name, PALsConfig)
    mask = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
    h = plain.embeddings(input_ids=ids)
    for i, layer in enumerate(plain.encoder.layer):
        a = layer.attention(h, attention_mask=mask)[0]  # LN1(h + MH(h))
        ffn = layer.output.dense(layer.intermediate(a))
        ts = torch.zeros_like(h)
        pal_modules = model.encoder.layer[i].pals.adapters
        if name in pal_modules:
            module = pal_modules[name]
            p = module.projections if module.projections is not None else model.shared_parameters[name]
            qkv = module.inner.qkv if module.inner is not None else None
            ts = reference_pal(
                h,
                mask,
                p["down_weight"],
                p["down_bias"],
                qkv.weight if qkv else None,
                qkv.bias if qkv else None,
                p["up_weight"],
                p["up_bias"],
                config.num_attention_heads,
                config.inner,
            )
        h = layer.output.LayerNorm(ffn + a + ts)  # LN2(FFN(a) + a + TS(h))
    return h


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("padded", [True, False])
def test_forward_matches_plain_formula(preset, attn, padded):
    model = bert(attn)
    model.add_adapter("t", config=preset, set_active=True)
    plain = BertModel(tiny_bert_config("eager")).eval()
    plain.load_state_dict(model.state_dict(), strict=False)
    ids, mask = batch(padded)
    with torch.no_grad():
        out = model(ids, attention_mask=mask).last_hidden_state
        expected = reference_forward(model, plain, "t", ids, mask)
    assert torch.allclose(out, expected, atol=1e-5), (out - expected).abs().max()


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_zero_pal_output_equals_unadapted_model_exactly(attn):
    model = bert(attn)
    ids, mask = batch()
    with torch.no_grad():
        before = model(ids, attention_mask=mask).last_hidden_state
        model.add_adapter("t", config="pals", set_active=True)
        model.shared_parameters["t"]["up_weight"].zero_()
        model.shared_parameters["t"]["up_bias"].zero_()
        after = model(ids, attention_mask=mask).last_hidden_state
    assert torch.equal(before, after)


@pytest.mark.parametrize("preset", PRESETS)
def test_zero_output_init_starts_as_a_no_op_with_features_at_the_hidden_scale(preset):
    model = bert()
    ids, mask = batch()
    with torch.no_grad():
        before = model(ids, attention_mask=mask).last_hidden_state
        model.add_adapter("t", config=f"{preset}[init_weights='zero_output']", set_active=True)
        assert torch.equal(model(ids, attention_mask=mask).last_hidden_state, before)
    module = model.encoder.layer[-1 if preset != "pals_bottom_layers" else 0].pals.adapters["t"]
    p = module.projections if module.projections is not None else model.shared_parameters["t"]
    hidden, projected = p["down_weight"].shape[1], p["down_weight"].shape[0]
    assert torch.count_nonzero(p["up_weight"]) == 0
    assert p["down_weight"].std().item() == pytest.approx(hidden**-0.5, rel=0.2)
    if module.inner is not None:
        assert module.inner.qkv.weight.std().item() == pytest.approx(projected**-0.5, rel=0.2)


def test_zero_output_init_learns_every_pal_weight_after_the_first_step():
    model = bert()
    model.add_adapter("t", config="pals[init_weights='zero_output']", set_active=True)
    model.train_adapter("t")
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    ids, mask = batch()
    for _ in range(2):  # the first step moves V_D off zero; the second reaches everything before it
        optimizer.zero_grad()
        model(ids, attention_mask=mask).last_hidden_state.pow(2).mean().backward()
        optimizer.step()
    qkv = model.encoder.layer[0].pals.adapters["t"].inner.qkv.weight
    assert qkv.grad is not None and qkv.grad.abs().sum() > 0
    assert model.shared_parameters["t"]["down_weight"].grad.abs().sum() > 0


def test_default_init_draws_exactly_the_authors_weights():
    """The default ("bert") draws V_E then V_D from the seeded generator at N(0, init_range), as before the
    option existed: seeded runs keep their initial weights."""
    from pals_adapters.pals.modeling import seeded_generator

    model = bert()
    model.add_adapter("t", config=PALsConfig(init_weights_seed=3))
    shared = model.shared_parameters["t"]
    projected, hidden = shared["down_weight"].shape
    generator = seeded_generator(3, -1)
    down = torch.randn(projected, hidden, generator=generator) * 0.02
    up = torch.randn(hidden, projected, generator=generator) * 0.02
    assert torch.equal(shared["down_weight"], down) and torch.equal(shared["up_weight"], up)
    qkv = model.encoder.layer[1].pals.adapters["t"].inner.qkv.weight
    expected = torch.empty_like(qkv)
    torch.nn.init.normal_(expected, std=0.02, generator=seeded_generator(3, 1))
    assert torch.equal(qkv, expected)


def test_pal_changes_the_output_when_active_only():
    model = bert()
    ids, mask = batch()
    with torch.no_grad():
        base = model(ids, attention_mask=mask).last_hidden_state
        model.add_adapter("t", config="pals")
        assert torch.equal(model(ids, attention_mask=mask).last_hidden_state, base)
        model.set_active_adapters("t")
        assert not torch.allclose(model(ids, attention_mask=mask).last_hidden_state, base)
