"""CA-MTL's modules against a plain re-statement of their formulas, the identity modulation and
dynamic padding."""

import pytest
import torch
from adapters import AdapterSetup
from ca_mtl_models import (
    CONFIG,
    UNEVEN,
    encoder,
    identity_modulation,
    plain_copy,
    reference_block_bias,
    reference_forward,
    task_z,
    with_tasks,
)
from helpers import batch
from tiny_models import bert

from pals_adapters.ca_mtl import (
    CAMTLConfig,
    ConditionalAttentionBias,
)


@pytest.mark.parametrize("config", [CONFIG, UNEVEN])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("padded", [True, False])
def test_forward_matches_plain_formula(config, attn, padded):
    model = with_tasks(bert(attn), "a", config=config)
    ids, mask = batch(padded)
    with torch.no_grad(), AdapterSetup("a"):
        out = encoder(model, ids, mask)
        expected = reference_forward(model, plain_copy(model), ids, mask, task_z(model, "a", len(ids)))
    torch.testing.assert_close(out, expected, atol=2e-5, rtol=0)


@pytest.mark.parametrize("length, blocks", [(16, 4), (16, 3), (10, 3), (7, 1), (9, 9)])
def test_block_bias_is_the_reference_block_diagonal(length, blocks):
    config = CAMTLConfig(max_seq_length=length, num_blocks=blocks)
    sizes = config.sizes(hidden_size=24, num_layers=2)
    attention = ConditionalAttentionBias(24, length, sizes.block_size)
    with torch.no_grad():
        attention.blocks.normal_()
        attention.film.projection.bias.normal_()
    z = torch.randn(3, 24)
    for t in (length, length - 2, 1):
        if t < 1:
            continue
        got = attention(z, t)
        assert got.shape == (3, 1, t, t)
        torch.testing.assert_close(got[:, 0], reference_block_bias(z, attention, t))
    # off the diagonal blocks the bias is 0 (it is a bias, not a mask)
    full = attention(z, length)[:, 0]
    block = torch.arange(length) // sizes.block_size
    assert torch.all(full[:, block[:, None] != block[None, :]] == 0)


def test_sizes_scale_with_the_model_as_documented():
    bert_base = CAMTLConfig().sizes(768, 12)
    assert (bert_base.num_blocks, bert_base.block_size, bert_base.bottleneck_size) == (6, 22, 256)
    assert (bert_base.num_frozen_layers, bert_base.first_conditional_norm_layer) == (6, 6)
    minilm = CAMTLConfig().sizes(384, 6)
    assert (minilm.num_blocks, minilm.block_size, minilm.bottleneck_size) == (3, 43, 128)
    assert (minilm.num_frozen_layers, minilm.first_conditional_norm_layer) == (3, 3)
    tiny = CAMTLConfig().sizes(48, 4)
    assert (tiny.num_blocks, tiny.block_size) == (1, 128)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_at_identity_modulation_every_layer_below_the_bottleneck_is_the_pretrained_one(attn):
    model = with_tasks(bert(attn), "a")
    identity_modulation(model)
    ids, mask = batch()
    with torch.no_grad():
        base = model.base_model(ids, attention_mask=mask, output_hidden_states=True).hidden_states
        with AdapterSetup("a"):
            ours = model.base_model(ids, attention_mask=mask, output_hidden_states=True).hidden_states
        plain = plain_copy(model, attn)
        top = plain.encoder.layer[-1]
        a = top.attention(base[-2], attention_mask=(1.0 - mask[:, None, None, :].float()) * -1e9)[0]
        bottleneck = model.base_model.ca_mtl.layers[-1].bottleneck
        z = model.base_model.ca_mtl.task_transform(task_z(model, "a", len(ids)))
        expected_top = bottleneck(top.output(top.intermediate(a), a), a, z)
    # embeddings (alignment), attention with M = 0, conditional LayerNorms at BERT's own weights
    for level in range(len(base) - 1):
        torch.testing.assert_close(ours[level], base[level], atol=1e-5, rtol=0, msg=f"hidden states {level}")
    # the top layer = BERT's top layer, then the conditional bottleneck (residual: the attention output)
    torch.testing.assert_close(ours[-1], expected_top, atol=1e-5, rtol=0)


def test_an_inactive_ca_mtl_adapter_leaves_the_model_as_it_was():
    model = bert()
    ids, mask = batch()
    with torch.no_grad():
        before = encoder(model, ids, mask)
        with_tasks(model, "a")
        assert torch.equal(encoder(model, ids, mask), before)
        with AdapterSetup("a"):
            assert not torch.allclose(encoder(model, ids, mask), before)


# --- dynamic padding ----------------------------------------------------------------------------------


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_dynamic_padding_equals_padding_to_the_block_layout(attn):
    model = with_tasks(bert(attn), "a")
    ids, mask = batch(padded=True, length=9)
    full_ids = torch.cat([ids, torch.zeros(len(ids), 16 - 9, dtype=ids.dtype)], dim=1)
    full_mask = torch.cat([mask, torch.zeros(len(ids), 16 - 9, dtype=mask.dtype)], dim=1)
    with torch.no_grad(), AdapterSetup("a"):
        short = encoder(model, ids, mask)
        full = encoder(model, full_ids, full_mask)
    real = mask.bool()
    torch.testing.assert_close(short[real], full[:, :9][real], atol=1e-5, rtol=0)


def test_a_sequence_longer_than_the_block_layout_is_refused():
    model = with_tasks(bert(), "a")
    ids, mask = batch(padded=False, length=17)
    with pytest.raises(ValueError, match="max_seq_length=16"), AdapterSetup("a"):
        encoder(model, ids, mask)
