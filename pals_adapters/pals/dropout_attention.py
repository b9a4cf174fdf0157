"""``dropout(softmax(q kᵀ/√d + mask)) v`` on the CPU, with the dropout drawn sparsely.

torch's CPU ``scaled_dot_product_attention`` has a fused kernel only without dropout; with dropout it
goes op by op (a ``bernoulli_`` draw per element, guards for rows masked entirely with -inf). A PAL's
attention in training therefore computes itself here, with two savings over the op-by-op path:

- **Sparse dropout.** With p = 0.1 only one score in ten is dropped. The dropped positions are drawn as
  geometric gaps (one uniform draw per *dropped* element instead of one per element), zeroed in place,
  and only they are kept for the backward pass: no (B, heads, T, T) keep mask is drawn, stored or
  multiplied, forward or backward. Every element is still dropped independently with probability p,
  from torch's seeded random stream.
- **A backward written out.** The softmax backward needs rowsum(P ⊙ dP); over the kept elements that is
  dC · (P_kept V), read off the (B, heads, T, d) output as flash attention does, and the dropped
  elements get their -P r from the few values saved for them.
"""

import math

import torch


def dropped_positions(
    count: int, p: float, device: torch.device | str = "cpu", batch: int | None = None
) -> torch.Tensor:
    """Sorted flat indices into ``count`` elements, each in it independently with probability ``p``.

    The gap from one dropped element to the next is geometric: ``floor(log(1 - u) / log(1 - p)) + 1``
    for a uniform ``u`` in [0, 1), drawn in float64 from torch's random stream. So a seeded run repeats
    itself, and drawing costs one number per dropped element, not one per element. ``batch``: how many
    gaps to draw at a time (default: enough to pass ``count`` but for a chance of about 1e-15).
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"a dropout probability must be in (0, 1) here, got {p}")
    if batch is None:  # the mean number of gaps to pass `count`, and 8 standard deviations more
        mean = count * p
        batch = int(mean + 8 * math.sqrt(mean * (1.0 - p)) + 16)
    if count == 0:
        return torch.empty(0, dtype=torch.int64, device=device)
    log_keep = math.log1p(-p)
    pieces, end = [], 0
    while end < count:
        uniform = torch.rand(batch, dtype=torch.float64, device=device)
        gaps = torch.floor(torch.log1p(-uniform) / log_keep).add_(1.0)  # 1 - u is in (0, 1]: no log(0)
        positions = gaps.cumsum_(0).add_(end - 1)
        pieces.append(positions)
        end = int(positions[-1].item()) + 1
    positions = pieces[0] if len(pieces) == 1 else torch.cat(pieces)
    inside = int(torch.searchsorted(positions, float(count)))  # positions are exact integers in float64
    return positions[:inside].long()


class _AttentionWithSparseDropout(torch.autograd.Function):
    """q, k, v: (B, heads, T, d) float tensors; mask: additive, broadcastable to the scores, or None. Used on
    the CPU (`attention_with_dropout`'s caller picks SDPA elsewhere)."""

    # float32 throughout, under CPU autocast too (torch runs the backward with the forward's autocast state)
    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu", cast_inputs=torch.float32)
    def forward(ctx, query, key, value, mask, p):
        scale = query.shape[-1] ** -0.5
        query = (query * scale).contiguous()  # scaled once: dk needs q·scale, dq gets the scale at the end
        key, value = key.contiguous(), value.contiguous()
        scores = torch.matmul(query, key.transpose(-1, -2))
        if mask is not None:
            scores.add_(mask)
        probs = scores.softmax(-1)
        flat = probs.view(-1)
        dropped = dropped_positions(flat.numel(), p, probs.device)
        dropped_probs = flat.index_select(0, dropped)  # what the softmax backward needs of them
        flat.index_fill_(0, dropped, 0.0)
        keep_scale = 1.0 / (1.0 - p)
        context = torch.matmul(probs, value).mul_(keep_scale)
        ctx.save_for_backward(query, key, value, probs, dropped, dropped_probs, context)
        ctx.scale, ctx.keep_scale = scale, keep_scale
        return context

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx, grad_context):
        query, key, value, kept_probs, dropped, dropped_probs, context = ctx.saved_tensors
        grad = (grad_context * ctx.keep_scale).contiguous()  # the gradient of kept_probs @ value
        grad_value = torch.matmul(kept_probs.transpose(-1, -2), grad)
        grad_probs = torch.matmul(grad, value.transpose(-1, -2))  # of the kept probabilities
        # Softmax backward: dS = P ⊙ (dP - r), r = Σ P ⊙ dP. dP is zero where dropped, so
        # r = grad · (P_kept v) = grad_context · context (the two 1 / (1 - p) cancel).
        rowsums = torch.linalg.vecdot(grad_context, context)
        grad_scores = grad_probs.sub_(rowsums.unsqueeze(-1)).mul_(kept_probs)  # zero where dropped
        length = kept_probs.shape[-1]
        dropped_grads = dropped_probs * rowsums.view(-1).index_select(0, dropped // length)
        grad_scores.view(-1).index_copy_(0, dropped, dropped_grads.neg_())  # P ⊙ (0 - r) there
        grad_query = torch.matmul(grad_scores, key).mul_(ctx.scale)
        grad_key = torch.matmul(grad_scores.transpose(-1, -2), query)
        return grad_query, grad_key, grad_value, None, None


def attention_with_dropout(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, dropout: float
) -> torch.Tensor:
    """``dropout(softmax(q kᵀ / √d + mask)) v``, as ``scaled_dot_product_attention`` with ``dropout_p``.

    Half precision is computed in float32, as there. The mask must be finite (a PAL's masks are), since
    the -inf guards of SDPA's generic path are skipped. Under ``torch.compile`` (which traces neither the
    custom backward nor the data-dependent number of dropped elements) the same formula runs op by op
    with a dense mask.
    """
    dtype = query.dtype
    if dtype in (torch.float16, torch.bfloat16):
        query, key, value = query.float(), key.float(), value.float()
        mask = mask.float() if mask is not None else None
    if torch.compiler.is_compiling() or (mask is not None and mask.requires_grad):
        context = attention_with_dense_dropout(query, key, value, mask, dropout)
    else:
        context = _AttentionWithSparseDropout.apply(query, key, value, mask, dropout)
    return context if context.dtype == dtype else context.to(dtype)


def attention_with_dense_dropout(query, key, value, mask, dropout):
    """The same formula op by op, with a dense keep mask from ``torch.rand``: what ``torch.compile`` traces."""
    scores = torch.matmul(query * query.shape[-1] ** -0.5, key.transpose(-1, -2))
    if mask is not None:
        scores = scores + mask
    keep = torch.rand(scores.shape, device=scores.device) >= dropout
    return torch.matmul(scores.softmax(-1) * keep, value) * (1.0 / (1.0 - dropout))
