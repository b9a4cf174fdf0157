"""The floor of a comparison: each task's dev score without training, by always predicting the training
set's most frequent class (a regression task: the training labels' mean)."""

from __future__ import annotations

from collections import Counter

import numpy as np

from ..scoring.metrics import compute_metrics, task_score
from ..tasks.spec import TaskSpec
from ..tasks.splits import load_split


def majority_score(spec: TaskSpec, glue_dir: str | None = None, source: str = "auto") -> dict:
    """``{"predictor", "metrics", "score"}`` of the constant predictor on the task's first dev split; score
    in points (0-100). A constant regression prediction has correlations of 0 (the metrics' convention)."""
    train = load_split(spec, "train", glue_dir=glue_dir, source=source)
    dev = load_split(spec, spec.dev_splits[0], glue_dir=glue_dir, source=source)
    references = np.asarray(dev["label"])
    if spec.is_regression:
        predictions = np.full(len(references), float(np.mean(train["label"])))
        what = "constant (train mean)"
    else:
        label = Counter(train["label"]).most_common(1)[0][0]
        predictions = np.full(len(references), label)
        what = f"always {spec.labels[label]!r}"
    metrics = compute_metrics(spec, predictions, references)
    return {"predictor": what, "metrics": metrics, "score": 100 * task_score(spec, metrics)}
