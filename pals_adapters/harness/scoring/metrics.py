"""Offline GLUE metrics (scikit-learn / scipy only).

All values are plain fractions (accuracy 0..1, correlations -1..1), never
percentages. Correlations of a constant input (undefined) are reported as 0.0,
without warnings, like ``matthews`` of constant predictions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import stats
from sklearn.metrics import confusion_matrix, f1_score, matthews_corrcoef, precision_recall_fscore_support

from ..tasks.glue import get_task
from ..tasks.spec import TaskSpec


def _as_array(values: object, what: str) -> np.ndarray:
    if hasattr(values, "detach"):  # torch tensor
        values = values.detach().cpu().numpy()
    array = np.asarray(values)
    if array.dtype == bool:
        array = array.astype(np.int64)
    if array.size == 0:
        raise ValueError(f"{what} is empty")
    if not np.issubdtype(array.dtype, np.number):
        raise ValueError(f"{what} must be numeric, got dtype {array.dtype}")
    return array


def _class_predictions(predictions: object, num_labels: int) -> np.ndarray:
    preds = _as_array(predictions, "predictions")
    if preds.ndim == 2:
        if preds.shape[1] != num_labels:
            raise ValueError(
                f"logits have {preds.shape[1]} columns but the task has {num_labels} labels "
                f"(predictions shape {preds.shape})"
            )
        return preds.argmax(axis=1)
    if preds.ndim != 1:
        raise ValueError(f"classification predictions must be 1-D class indices or 2-D logits, got shape {preds.shape}")
    if not np.all(np.equal(np.mod(preds, 1), 0)):
        raise ValueError("1-D classification predictions must be integer class indices; pass 2-D logits instead")
    preds = preds.astype(np.int64)
    if preds.min() < 0 or preds.max() >= num_labels:
        raise ValueError(f"class indices must be in 0..{num_labels - 1}, got {preds.min()}..{preds.max()}")
    return preds


def _correlation(fn, a: np.ndarray, b: np.ndarray) -> float:
    if np.all(a == a[0]) or np.all(b == b[0]):
        return 0.0
    return float(fn(a, b)[0])


def compute_metrics(spec: TaskSpec | str, predictions: object, references: object) -> dict[str, float]:
    """Metrics of ``spec.metrics`` as fractions.

    Classification: ``predictions`` are class indices (n,) or logits (n, num_labels);
    ``references`` are class indices. F1 is binary F1 of label index 1.
    Regression: ``predictions`` are floats (n,) or (n, 1).
    """
    spec = get_task(spec)
    refs = _as_array(references, "references")
    if refs.ndim != 1:
        raise ValueError(f"references must be 1-D, got shape {refs.shape}")
    if spec.is_regression:
        preds = _as_array(predictions, "predictions").astype(np.float64)
        if preds.ndim == 2 and preds.shape[1] == 1:
            preds = preds[:, 0]
        if preds.ndim != 1:
            raise ValueError(f"regression predictions must have shape (n,) or (n, 1), got {preds.shape}")
        refs = refs.astype(np.float64)
        if not (np.all(np.isfinite(preds)) and np.all(np.isfinite(refs))):
            raise ValueError("predictions and references must be finite (no NaN/inf)")
    else:
        preds = _class_predictions(predictions, spec.num_labels)
        if not np.all(np.equal(np.mod(refs, 1), 0)) or refs.min() < 0 or refs.max() >= spec.num_labels:
            raise ValueError(
                f"references must be class indices in 0..{spec.num_labels - 1} (unlabelled -1 rows cannot be scored)"
            )
        refs = refs.astype(np.int64)
    if preds.shape[0] != refs.shape[0]:
        raise ValueError(
            f"predictions have {preds.shape[0]} rows but references have {refs.shape[0]} "
            f"(shapes {np.shape(predictions)} vs {refs.shape})"
        )
    out: dict[str, float] = {}
    for metric in spec.metrics:
        if metric == "accuracy":
            out[metric] = float(np.mean(preds == refs))
        elif metric == "f1":
            out[metric] = float(f1_score(refs, preds, pos_label=1, average="binary", zero_division=0.0))
        elif metric == "matthews":
            out[metric] = 0.0 if len(set(preds)) < 2 or len(set(refs)) < 2 else float(matthews_corrcoef(refs, preds))
        elif metric == "pearson":
            out[metric] = _correlation(stats.pearsonr, preds, refs)
        elif metric == "spearman":
            out[metric] = _correlation(stats.spearmanr, preds, refs)
    return out


def class_report(spec: TaskSpec | str, predictions: object, references: object) -> dict:
    """The per-class view of a classification task: for each label (in the task's order) precision, recall
    and F1 (fractions; 0.0 where undefined: a class never predicted has precision 0), how many rows have it
    (``support``) and how many were predicted as it (``predicted``); the confusion matrix (row: true label,
    column: predicted label); and ``never_predicted``, the labels no row was predicted as."""
    spec = get_task(spec)
    if spec.is_regression:
        raise ValueError(f"task {spec.name!r} is a regression task: it has no classes")
    preds = _class_predictions(predictions, spec.num_labels)
    refs = _as_array(references, "references").astype(np.int64)
    if preds.shape[0] != refs.shape[0]:
        raise ValueError(f"predictions have {preds.shape[0]} rows but references have {refs.shape[0]}")
    classes = list(range(spec.num_labels))
    precision, recall, f1, support = precision_recall_fscore_support(
        refs, preds, labels=classes, average=None, zero_division=0.0
    )
    predicted = np.bincount(preds, minlength=spec.num_labels)
    return {
        "labels": list(spec.labels),
        "precision": [float(v) for v in precision],
        "recall": [float(v) for v in recall],
        "f1": [float(v) for v in f1],
        "support": [int(v) for v in support],
        "predicted": [int(v) for v in predicted],
        "confusion": confusion_matrix(refs, preds, labels=classes).tolist(),
        "never_predicted": [label for label, n in zip(spec.labels, predicted) if n == 0],
    }


def task_score(spec: TaskSpec | str, metrics: Mapping[str, float]) -> float:
    """GLUE-style score of one task: the mean of its metrics (a fraction).

    For MNLI, average the scores of the matched and mismatched splits yourself.
    """
    spec = get_task(spec)
    missing = [m for m in spec.metrics if m not in metrics]
    if missing:
        raise ValueError(f"task {spec.name!r} needs metrics {list(spec.metrics)}; missing {missing} in {dict(metrics)}")
    return float(np.mean([float(metrics[m]) for m in spec.metrics]))


def glue_average(scores: Mapping[str, float] | Sequence[float]) -> float:
    """Unweighted mean of per-task scores (fractions), as the GLUE leaderboard averages tasks."""
    values = list(scores.values()) if isinstance(scores, Mapping) else list(scores)
    if not values:
        raise ValueError("glue_average needs at least one task score")
    values = [float(v) for v in values]
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"task scores must be finite, got {scores}")
    return float(np.mean(values))
