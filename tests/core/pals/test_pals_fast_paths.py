"""The PAL's fast paths compute what the paper's formula computes.

The reference below is the projected attention written out op by op; with dropout, it drops the
elements that `dropped_positions` draws from the same seed the way ``F.dropout`` does (zero, or scale by
1 / (1 - p)). The drawing itself is checked for what dropout needs: each element dropped with probability
p, independently, and a seeded run repeated exactly.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from pals_adapters.pals.dropout_attention import attention_with_dropout, dropped_positions
from pals_adapters.pals.modeling import (
    ProjectedAttentionLayer,
    ProjectedSelfAttention,
    fused_attention,
    mask_in_dtype,
)

HIDDEN, PROJECTED, HEADS = 48, 24, 4


def reference_attention(layer: ProjectedSelfAttention, x, mask, dropout_seed=None):
    """softmax(q kᵀ/√d + mask) v over heads, no output matrix, in float32; with a seed, the probabilities
    dropped as F.dropout does, with the mask drawn from that seed."""
    batch, length, size = x.shape
    head = size // layer.num_heads
    q, k, v = (layer.qkv(x)).split(size, dim=-1)
    q, k, v = (t.reshape(batch, length, layer.num_heads, head).transpose(1, 2).float() for t in (q, k, v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(head) + (0 if mask is None else mask.float())
    probs = scores.softmax(-1)
    if dropout_seed is not None:
        torch.manual_seed(dropout_seed)
        keep = torch.ones(probs.numel(), dtype=torch.bool)
        keep[dropped_positions(probs.numel(), layer.dropout)] = False
        probs = torch.where(keep.view(probs.shape), probs / (1 - layer.dropout), 0.0)
    context = (probs @ v).to(x.dtype)
    return context.transpose(1, 2).reshape(batch, length, size)


def reference_pal(pal: ProjectedAttentionLayer, h, mask, dropout_seed=None):
    """TS(h) = GELU(V_D · MH_small(V_E · h))."""
    p = pal.projections
    x = h @ p["down_weight"].T + p["down_bias"]
    x = reference_attention(pal.inner, x, mask, dropout_seed)
    return F.gelu(x @ p["up_weight"].T + p["up_bias"])


def inputs(dtype, padded=True, batch=3, length=10):
    generator = torch.Generator().manual_seed(0)
    h = torch.randn(batch, length, HIDDEN, generator=generator).to(dtype).requires_grad_()
    if not padded:
        return h, None
    keep = torch.ones(batch, length)
    keep[1, 7:] = 0
    keep[2, 4:] = 0
    mask = (1.0 - keep[:, None, None, :]) * torch.finfo(torch.float32).min  # float32, as BERT passes it
    return h, mask


def pal_layer(dtype, dropout=0.1):
    generator = torch.Generator().manual_seed(1)
    pal = ProjectedAttentionLayer(
        HIDDEN, PROJECTED, num_heads=HEADS, attention_dropout=dropout, own_projections=True, generator=generator
    )
    with torch.no_grad():  # non-zero biases and peaked attention, so a dropped bias or a wrong scale would show
        for name, param in pal.named_parameters():
            if name.endswith("bias"):
                param.normal_(0, 0.02, generator=generator)
        pal.inner.qkv.weight.normal_(0, 0.5, generator=generator)
    return pal.to(dtype)


TOLERANCE = {torch.float32: 2e-6, torch.bfloat16: 2e-2}


def gradients(out, params):
    return torch.autograd.grad(out.float().square().sum(), params)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("padded", [True, False])
def test_inference_forward_matches_the_formula(dtype, padded):
    pal = pal_layer(dtype).eval()
    h, mask = inputs(dtype, padded)
    with torch.no_grad():
        out = pal(h, mask)
        expected = reference_pal(pal, h, mask)
    assert out.dtype == dtype
    assert torch.allclose(out.float(), expected.float(), atol=TOLERANCE[dtype]), (out - expected).abs().max()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_training_with_dropout_matches_the_formula_with_the_seeds_mask(dtype):
    pal = pal_layer(dtype, dropout=0.3).train()
    h, mask = inputs(dtype)
    params = [h, *pal.parameters()]
    torch.manual_seed(7)
    out = pal(h, mask)
    expected = reference_pal(pal, h, mask, dropout_seed=7)
    # The same seed must give the same dropout pattern: a different one would differ by far more than rounding.
    assert torch.allclose(out.float(), expected.float(), atol=TOLERANCE[dtype]), (out - expected).abs().max()
    for got, want in zip(gradients(out, params), gradients(expected, params)):
        assert torch.allclose(got.float(), want.float(), atol=TOLERANCE[dtype] * 10, rtol=1e-3)
    torch.manual_seed(8)
    assert not torch.allclose(pal(h, mask), out), "dropout should change with the seed"


def test_dropout_keeps_the_expected_value():
    """Averaged over many draws, the attention with dropout is the attention without it (1 / (1 - p) scale)."""
    pal = pal_layer(torch.float32, dropout=0.3)
    _, mask = inputs(torch.float32, batch=3, length=10)
    x = torch.randn(3, 10, PROJECTED, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        exact = pal.inner.eval()(x, mask)
        pal.inner.train()
        torch.manual_seed(0)
        mean = sum(pal.inner(x, mask) for _ in range(4000)) / 4000
    error = (mean - exact).abs().max() / exact.abs().max()
    assert error < 0.02, error  # one draw differs from the exact value by about 30% of it
    assert (pal.inner(x, mask) - exact).abs().max() / exact.abs().max() > 0.05  # so the test can tell


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
@pytest.mark.parametrize("batch", [None, 1000])
def test_dropped_positions_drop_every_element_with_probability_p(p, batch):
    """Each element dropped with probability p, independently of its neighbours; ``batch=1000`` draws the
    gaps a thousand at a time, so the drawing goes round its loop many times."""
    torch.manual_seed(0)
    count = 9 * 5 * 127 * 129
    positions = dropped_positions(count, p, batch=batch)
    assert positions.dtype == torch.int64
    assert positions[0] >= 0 and positions[-1] < count and (positions[1:] > positions[:-1]).all()  # sorted, unique
    dropped = torch.zeros(count)
    dropped[positions] = 1.0
    assert abs(dropped.mean().item() - p) < 6 * math.sqrt(p * (1 - p) / count)
    # independent: neighbours, and elements two apart, are both dropped with probability p²
    for lag in (1, 2):
        both = dropped[:-lag] * dropped[lag:]
        assert abs(both.mean().item() - p * p) < 6 * math.sqrt(p * p / both.numel())


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_the_first_and_last_elements_are_dropped_as_often_as_any(p):
    """2,000 draws over three elements: each element's drop rate is p."""
    torch.manual_seed(0)
    counts = torch.zeros(3)
    for _ in range(2000):
        counts[dropped_positions(3, p)] += 1
    assert (counts / 2000 - p).abs().max() < 6 * math.sqrt(p * (1 - p) / 2000), counts
    assert dropped_positions(0, p).numel() == 0


def test_dropped_positions_follow_the_seed_and_refuse_p_outside_0_1():
    torch.manual_seed(5)
    first = dropped_positions(4 * 33, 0.2)
    torch.manual_seed(5)
    assert torch.equal(first, dropped_positions(4 * 33, 0.2))
    assert not torch.equal(first, dropped_positions(4 * 33, 0.2))
    for p in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError, match="dropout probability"):
            dropped_positions(10, p)


def test_attention_with_dropout_has_the_formulas_gradients_in_float64():
    """gradcheck on the hand-written backward, the dropped elements fixed by reseeding before each call."""
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 7, 5, generator=generator, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = torch.zeros(2, 1, 1, 7, dtype=torch.float64)
    mask[1, ..., 5:] = torch.finfo(torch.float64).min

    def attention(q, k, v):
        torch.manual_seed(3)
        return attention_with_dropout(q, k, v, mask, 0.3)

    assert torch.autograd.gradcheck(attention, (q, k, v))
    # the backward keeps its saved tensors: a second backward over the same graph gives the same gradients
    out = attention(q, k, v)
    first = torch.autograd.grad(out.square().sum(), (q, k, v), retain_graph=True)
    again = torch.autograd.grad(out.square().sum(), (q, k, v))
    for a, b in zip(first, again):
        assert torch.equal(a, b)


def test_training_with_dropout_under_cpu_autocast_matches_float32():
    """Under bf16 autocast (the harness's ``--precision bf16`` on a CPU) the attention's own forward and
    backward stay in float32; the PAL's linear layers run in bf16, so the result is float32's to bf16 rounding."""
    pal = pal_layer(torch.float32, dropout=0.3).train()
    h, mask = inputs(torch.float32)
    params = [h, *pal.parameters()]
    torch.manual_seed(7)
    expected = pal(h, mask)
    want = gradients(expected, params)
    torch.manual_seed(7)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = pal(h, mask)
    got = gradients(out, params)
    assert torch.allclose(out.float(), expected, atol=3e-2, rtol=3e-2), (out.float() - expected).abs().max()
    for g, w in zip(got, want):
        assert torch.allclose(g.float(), w, atol=5e-2 * w.abs().max().item(), rtol=5e-2)


def test_attention_with_dropout_takes_a_mask_that_needs_its_gradient():
    """A mask that requires a gradient (not a PAL's) goes the op-by-op way, so it gets one."""
    q, k, v = (torch.randn(1, 2, 4, 3) for _ in range(3))
    mask = torch.zeros(1, 1, 1, 4, requires_grad=True)
    attention_with_dropout(q, k, v, mask, 0.2).sum().backward()
    assert mask.grad is not None and mask.grad.shape == mask.shape


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_training_without_dropout_matches_the_formula_with_gradients(dtype):
    pal = pal_layer(dtype, dropout=0.0).train()
    h, mask = inputs(dtype)
    params = [h, *pal.parameters()]
    out, expected = pal(h, mask), reference_pal(pal, h, mask)
    assert torch.allclose(out.float(), expected.float(), atol=TOLERANCE[dtype])
    for got, want in zip(gradients(out, params), gradients(expected, params)):
        assert torch.allclose(got.float(), want.float(), atol=TOLERANCE[dtype] * 10, rtol=1e-2)


def test_float32_mask_in_a_bfloat16_pal_stays_finite_and_masks():
    mask = torch.tensor([0.0, torch.finfo(torch.float32).min])
    cast = mask_in_dtype(mask, torch.bfloat16)
    assert cast.dtype == torch.bfloat16 and torch.isfinite(cast).all() and cast[1] < -1e30
    assert mask_in_dtype(mask, torch.float32) is mask  # no copy when the dtypes agree
    assert mask_in_dtype(None, torch.bfloat16) is None


def test_float32_pal_on_a_bfloat16_model_returns_the_model_dtype():
    pal = pal_layer(torch.float32).eval()
    h, mask = inputs(torch.bfloat16)
    with torch.no_grad():
        out = pal(h, mask)
        expected = reference_pal(pal, h.float(), mask)
    assert out.dtype == torch.bfloat16
    assert torch.allclose(out.float(), expected, atol=1e-2)


def test_training_off_the_cpu_keeps_sdpa_with_its_own_dropout(monkeypatch):
    from pals_adapters.pals import modeling

    calls, head_sizes = [], []
    sdpa = F.scaled_dot_product_attention

    def recording(query, *args, **kwargs):
        calls.append(kwargs.get("dropout_p", 0.0))
        head_sizes.append(query.shape[-1])
        return sdpa(query, *args, **kwargs)

    monkeypatch.setattr(modeling.F, "scaled_dot_product_attention", recording)
    pal = pal_layer(torch.float32, dropout=0.3).train()
    h, mask = inputs(torch.float32)
    pal(h, mask)
    assert calls == []  # on the CPU: the PAL's own attention with dropout
    # Elsewhere (a GPU's fused kernels draw their own dropout): SDPA with dropout_p. A meta tensor stands in.
    out = pal.to("meta")(h.detach().to("meta"), mask.to("meta"))
    assert calls == [0.3]
    assert head_sizes == [8]  # heads of 24 / 4 = 6 padded for the fused kernels, the output cut back
    assert out.shape == h.shape


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mask_shape", [None, "keys", "full"])
def test_heads_padded_for_the_fused_kernels_give_the_same_attention_and_gradients(dtype, mask_shape):
    generator = torch.Generator().manual_seed(0)
    batch, heads, length, head_size = 3, 12, 10, 17  # BERT-base's PAL heads: 204 / 12
    q, k, v = (torch.randn(batch, heads, length, head_size, generator=generator).to(dtype) for _ in range(3))
    mask = None
    if mask_shape is not None:
        shape = (batch, 1, 1, length) if mask_shape == "keys" else (batch, 1, length, length)
        mask = (torch.rand(shape, generator=generator) < 0.3) * torch.finfo(dtype).min
        mask = mask.to(dtype)
    results = []
    for attention in (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        lambda q, k, v: fused_attention(q, k, v, mask, 0.0),
    ):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = attention(*leaves)
        results.append([out, *gradients(out, leaves)])
    assert results[1][0].shape == (batch, heads, length, head_size)
    tolerance = 1e-5 if dtype == torch.float32 else TOLERANCE[dtype]  # sums of 24 terms, not 17: other rounding
    for unpadded, padded in zip(*results):
        torch.testing.assert_close(padded, unpadded, atol=tolerance, rtol=tolerance)


def test_heads_padded_for_the_fused_kernels_compile_in_one_graph():
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 12, 10, 17, generator=generator) for _ in range(3))
    mask = torch.zeros(2, 1, 1, 10)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(fused_attention)(q, k, v, mask, 0.1)
    torch._dynamo.reset()
    assert explained.graph_count == 1 and explained.graph_break_count == 0
