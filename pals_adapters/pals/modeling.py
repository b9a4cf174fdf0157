"""The math of a Projected Attention Layer, in plain torch (no adapters or transformers glue here).

``TS(h) = act(V_D · inner(V_E · h))`` where ``inner`` is multi-head self-attention in the
projected space without an output matrix (PALs) or the identity (low-rank layers).
"""

from collections.abc import Mapping
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from pals_adapters.pals.dropout_attention import attention_with_dropout

_ACTIVATIONS = {
    "gelu": nn.GELU,
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "identity": nn.Identity,
}


class Projections(NamedTuple):
    """Weights of ``V_E`` (down: d -> d_s) and ``V_D`` (up: d_s -> d), as ``F.linear`` takes them."""

    down_weight: torch.Tensor
    down_bias: torch.Tensor
    up_weight: torch.Tensor
    up_bias: torch.Tensor


def seeded_generator(seed: int | None, index: int) -> torch.Generator | None:
    """A generator for the weights at ``index`` (a layer, or -1 for shared ones) given a seed; None without seed.

    A private generator, unlike a global ``torch.manual_seed``, leaves the caller's random stream alone and
    gives the same weights whatever was created before.
    """
    if seed is None:
        return None
    return torch.Generator().manual_seed((seed * 1_000_003 + index + 1) % 2**63)


INIT_SCHEMES = ("bert", "zero_output")


def init_std(scheme: str, init_range: float, fan_in: int, output: bool = False) -> float:
    """Standard deviation of a fresh PAL weight matrix under ``scheme``.

    ``"bert"`` (the authors' code): every matrix N(0, init_range). ``"zero_output"``: ``V_D`` is zero, so a
    new PAL adds exactly nothing, and the matrices before it are N(0, 1/fan_in), so the projected features
    and the small attention's scores start at the scale of the hidden states instead of ~50x below it.
    """
    if scheme == "bert":
        return init_range
    return 0.0 if output else fan_in**-0.5


def init_projections(
    hidden_size: int,
    projected_size: int,
    init_range: float,
    generator: torch.Generator | None = None,
    scheme: str = "bert",
) -> nn.ParameterDict:
    """Fresh ``V_E``/``V_D`` parameters (normal weights, zero biases, as in the authors' code by default)."""
    down_std = init_std(scheme, init_range, hidden_size)
    up_std = init_std(scheme, init_range, projected_size, output=True)
    # both are drawn whatever the scheme, so that the generator's later draws do not depend on it
    down = torch.randn(projected_size, hidden_size, generator=generator) * down_std
    up = torch.randn(hidden_size, projected_size, generator=generator) * up_std
    return nn.ParameterDict(
        {
            "down_weight": nn.Parameter(down),
            "down_bias": nn.Parameter(torch.zeros(projected_size)),
            "up_weight": nn.Parameter(up),
            "up_bias": nn.Parameter(torch.zeros(hidden_size)),
        }
    )


def projections_from(weights: Mapping[str, torch.Tensor]) -> Projections:
    """The four ``V_E``/``V_D`` tensors of a ParameterDict, indexed one by one: torch 2.11's dynamo cannot
    unpack a ParameterDict as keywords, and broke the graph there in every layer."""
    return Projections(*(weights[name] for name in Projections._fields))


class ProjectedSelfAttention(nn.Module):
    """Multi-head self-attention inside the projected space, with no output matrix."""

    def __init__(self, size: int, num_heads: int, dropout: float):
        super().__init__()
        if size % num_heads:
            raise ValueError(f"projected size {size} is not divisible by {num_heads} heads")
        self.num_heads = num_heads
        self.dropout = dropout
        # One fused matrix for query, key and value: a single matmul instead of three.
        self.qkv = nn.Linear(size, 3 * size)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        batch, length, size = x.shape
        head_size = size // self.num_heads
        query, key, value = self.qkv(x).view(batch, length, 3, self.num_heads, head_size).permute(2, 0, 3, 1, 4)
        context = attend(query, key, value, attention_mask, self.dropout if self.training else 0.0)
        return context.transpose(1, 2).reshape(batch, length, size)


def attend(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None, dropout: float
) -> torch.Tensor:
    """``dropout(softmax(q kᵀ/√d + mask)) v`` over (batch, heads, length, head size), by the fastest route
    on the tensors' device. ``attention_mask`` is additive and broadcastable to (batch, heads, length, length):
    (B, 1, 1, T) from eager BERT, (B, 1, T, T) from SDPA BERT, or None without padding."""
    attention_mask = mask_in_dtype(attention_mask, query.dtype)
    if query.device.type != "cpu":  # a GPU's SDPA has fused kernels, with dropout, for aligned head sizes
        return fused_attention(query, key, value, attention_mask, dropout)
    if dropout:
        return attention_with_dropout(query, key, value, attention_mask, dropout)
    # the CPU's fused SDPA kernel takes any head size
    return F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask)


# SDPA's fused GPU kernels (flash, memory-efficient, cuDNN) take heads whose size is a multiple of this.
FUSED_HEAD_MULTIPLE = 8


def fused_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, dropout: float
) -> torch.Tensor:
    """SDPA with the heads zero-padded to a multiple of 8, so that a fused GPU kernel can run them.

    A PAL's heads are small and often of an odd size (BERT-base: 204 / 12 = 17); SDPA then falls back to
    its op-by-op math path. Zeros appended to q and k leave every q·k unchanged, zeros appended to v give
    zero columns that are cut off, and the scale stays 1/√(true head size): the same attention.
    """
    head_size = query.shape[-1]
    pad = -head_size % FUSED_HEAD_MULTIPLE
    if not pad:
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout)
    query, key, value = (F.pad(t, (0, pad)) for t in (query, key, value))
    context = F.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, dropout_p=dropout, scale=head_size**-0.5
    )
    return context[..., :head_size]


def mask_in_dtype(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """An additive mask in ``dtype``, its most negative value still finite (e.g. a float32 mask in a bfloat16
    PAL); the mask itself when it already is in ``dtype``."""
    if mask is None or mask.dtype == dtype:
        return mask
    return mask.to(dtype).clamp(min=torch.finfo(dtype).min)


class ProjectedAttentionLayer(nn.Module):
    """One task's PAL in one layer: ``act(V_D · inner(V_E · h))``.

    With ``own_projections=False`` the ``V_E``/``V_D`` weights live outside (shared across layers)
    and are passed to ``forward``; this module then holds only the layer's small attention.
    """

    def __init__(
        self,
        hidden_size: int,
        projected_size: int,
        *,
        inner: str = "attention",
        num_heads: int = 6,
        attention_dropout: float = 0.1,
        activation: str = "gelu",
        own_projections: bool = False,
        init_range: float = 0.02,
        generator: torch.Generator | None = None,
        init_weights: str = "bert",
    ):
        super().__init__()
        # With a generator, torch's default Linear init must not draw from the global stream (it is overwritten below).
        with torch.random.fork_rng(devices=[], enabled=generator is not None):
            self.inner = (
                ProjectedSelfAttention(projected_size, num_heads, attention_dropout) if inner == "attention" else None
            )
        self.projections = (
            init_projections(hidden_size, projected_size, init_range, generator, init_weights)
            if own_projections
            else None
        )
        self.activation = _ACTIVATIONS[activation]()
        if self.inner is not None:
            std = init_std(init_weights, init_range, projected_size)
            nn.init.normal_(self.inner.qkv.weight, std=std, generator=generator)
            nn.init.zeros_(self.inner.qkv.bias)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        shared: Projections | None = None,
    ) -> torch.Tensor:
        p = projections_from(self.projections) if self.projections is not None else shared
        if p is None:
            raise RuntimeError("this PAL shares V_E/V_D across layers: pass them as `shared`")
        # Computed in the PAL's own dtype, returned in the model's (e.g. a float32 PAL on a bfloat16 model);
        # no cast at all when they agree, the usual case.
        pal_dtype, model_dtype = p.down_weight.dtype, hidden_states.dtype
        x = F.linear(
            hidden_states if model_dtype == pal_dtype else hidden_states.to(pal_dtype), p.down_weight, p.down_bias
        )
        if self.inner is not None:
            x = self.inner(x, attention_mask)
        out = self.activation(F.linear(x, p.up_weight, p.up_bias))
        return out if out.dtype == model_dtype else out.to(model_dtype)
