"""MT-Uncertainty sampling (CA-MTL): the examples of a candidate batch the model is least sure of."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from ...errors import ConfigError
from .sampling import is_int

# --------------------------------------------------------------------------
# MT-Uncertainty (CA-MTL)
# --------------------------------------------------------------------------


def normalised_entropy(logits: torch.Tensor, num_classes: int) -> torch.Tensor:
    # log_softmax keeps p * log p finite even where p underflows to 0.
    log_p = torch.log_softmax(logits.detach().to(torch.float64), dim=-1)
    entropy = -(log_p.exp() * log_p).sum(dim=-1)
    return (entropy / math.log(num_classes)).clamp(0.0, 1.0).cpu()


def select_uncertain(
    logits_per_task: Sequence[torch.Tensor],
    num_classes: Sequence[int],
    top_b: int,
    *,
    is_regression: Sequence[bool] | None = None,
) -> list[tuple[int, int]]:
    """Pick the ``top_b`` most uncertain candidate examples across tasks (MT-Uncertainty).

    ``logits_per_task[t]`` holds the model outputs for task ``t``'s candidate
    batch: logits of shape ``(B_t, C_t)`` for a classification task, or
    predictions of shape ``(B_t,)`` / ``(B_t, 1)`` for a regression task
    (flagged in ``is_regression``; its ``num_classes`` entry is ignored).

    Score of example ``j`` of task ``t``: ``u_tj * m_t / max_k m_k`` where
    ``u_tj = H(softmax(logits_tj)) / log C_t`` and ``m_t`` is the mean ``u``
    of task ``t``'s candidates (``k`` over the classification tasks).

    Regression outputs carry no predictive distribution, so a regression task
    is not ranked: it keeps its proportional share of the ``top_b`` rows,
    ``top_b * B_t / sum(B)`` (largest remainders, ties to the earlier task),
    taken in candidate order, as a uniform draw over all candidates would give
    it on average. (Any single stand-in score starves it instead: the top
    ``b`` of ``sum(B)`` rows are the upper tail of the classification scores,
    above any typical value such as their median.) Classification tasks fill
    the remaining rows by score.

    Returns ``(task index, example index)`` pairs: the classification picks,
    highest score first, ties in candidate order (task, then example), then
    each regression task's rows; the result is deterministic.
    """
    num_tasks = len(logits_per_task)
    if num_tasks == 0:
        raise ConfigError("logits_per_task is empty: pass one candidate batch per task")
    if len(num_classes) != num_tasks:
        raise ConfigError(f"num_classes has {len(num_classes)} entries but logits_per_task has {num_tasks}")
    if is_regression is None:
        is_regression = [False] * num_tasks
    if len(is_regression) != num_tasks:
        raise ConfigError(f"is_regression has {len(is_regression)} entries but logits_per_task has {num_tasks}")
    if not is_int(top_b) or top_b <= 0:
        raise ConfigError(f"top_b must be a positive integer, got {top_b!r}")

    per_example: list[torch.Tensor | None] = []  # u_tj, None for regression tasks
    sizes: list[int] = []
    for t, (out, classes, regression) in enumerate(zip(logits_per_task, num_classes, is_regression)):
        if not isinstance(out, torch.Tensor):
            raise ConfigError(f"logits_per_task[{t}] must be a torch.Tensor, got {type(out)}")
        if not bool(torch.isfinite(out).all()):
            raise ConfigError(f"logits_per_task[{t}] contains NaN or inf")
        if regression:
            if out.dim() == 2 and out.shape[1] == 1:
                out = out[:, 0]
            if out.dim() != 1:
                raise ConfigError(
                    f"logits_per_task[{t}] is a regression task: expected predictions of "
                    f"shape (B,) or (B, 1), got {tuple(out.shape)}"
                )
            per_example.append(None)
            sizes.append(out.shape[0])
            continue
        if not is_int(classes) or classes < 2:
            raise ConfigError(
                f"num_classes[{t}] must be an integer >= 2 for a classification task, got "
                f"{classes!r}; mark regression tasks in is_regression"
            )
        if out.dim() != 2 or out.shape[1] != classes:
            raise ConfigError(f"logits_per_task[{t}] must have shape (B, {classes}), got {tuple(out.shape)}")
        per_example.append(normalised_entropy(out, int(classes)))
        sizes.append(out.shape[0])

    total = sum(sizes)
    if top_b > total:
        raise ConfigError(
            f"top_b={top_b} exceeds the {total} candidate examples across all tasks; "
            "lower top_b or draw larger candidate batches"
        )

    quotas = _proportional_shares(sizes, top_b)
    regression_rows = [(t, j) for t, u in enumerate(per_example) if u is None for j in range(quotas[t])]
    ranked = [t for t, u in enumerate(per_example) if u is not None]
    slots = top_b - len(regression_rows)
    if not ranked or slots == 0:
        return regression_rows
    # Task means over non-empty batches; an empty batch has no candidates to scale.
    means = [float(per_example[t].mean()) if per_example[t].numel() > 0 else 0.0 for t in ranked]
    top_mean = max(means)
    factors = [m / top_mean if top_mean > 0 else 1.0 for m in means]
    scores = torch.cat([per_example[t] * f for t, f in zip(ranked, factors)]).numpy()
    pairs = [(t, j) for t in ranked for j in range(sizes[t])]
    # Stable sort on the negated score: descending, ties in candidate order.
    order = np.argsort(-scores, kind="stable")[:slots]
    return [pairs[i] for i in order] + regression_rows


def _proportional_shares(sizes: Sequence[int], total: int) -> list[int]:
    """``total`` split in proportion to ``sizes`` (largest remainders; ties to the earlier index)."""
    exact = [total * n / sum(sizes) for n in sizes]
    shares = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(sizes)), key=lambda t: -(exact[t] - shares[t]))
    for t in by_remainder[: total - sum(shares)]:
        shares[t] += 1
    return shares
