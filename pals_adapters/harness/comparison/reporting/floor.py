"""The floor of a comparison: each task's dev score without training, by always predicting the training
set's most frequent class (a regression task: the training labels' mean), on the dev examples the runs
are scored on; and the flags of a row at the floor."""

from __future__ import annotations

import statistics
from collections import Counter

import numpy as np

from ...scoring.metrics import compute_metrics, task_score
from ...tasks.spec import TaskSpec
from ...tasks.splits import load_split
from .rows import RowResult
from .stats import mean_half_width

SIGNED_METRICS = ("matthews", "pearson", "spearman")  # from -1 to 1; the others from 0 to 1
SAME_SCORE = 0.05  # points: one seed (no noise to compare with) is at the floor when it shows the same score


def majority_score(
    spec: TaskSpec, glue_dir: str | None = None, source: str = "auto", max_eval_examples: int | None = None
) -> dict:
    """``{"predictor", "metrics", "score", "range"}`` of the constant predictor on the task's first dev split
    (its first ``max_eval_examples`` rows where set, as the runs score it); score and range in points. A
    constant regression prediction has correlations of 0 (the metrics' convention)."""
    train = load_split(spec, "train", glue_dir=glue_dir, source=source)
    dev = load_split(spec, spec.dev_splits[0], glue_dir=glue_dir, source=source)
    if max_eval_examples:
        dev = dev.select(range(min(max_eval_examples, len(dev))))
    references = np.asarray(dev["label"])
    if spec.is_regression:
        predictions = np.full(len(references), float(np.mean(train["label"])))
        what = "constant (train mean)"
    else:
        label = Counter(train["label"]).most_common(1)[0][0]
        predictions = np.full(len(references), label)
        what = f"always {spec.labels[label]!r}"
    metrics = compute_metrics(spec, predictions, references)
    low = -100.0 if any(metric in SIGNED_METRICS for metric in spec.metrics) else 0.0
    return {"predictor": what, "metrics": metrics, "score": 100 * task_score(spec, metrics), "range": [low, 100.0]}


def floor_flags(row: RowResult, floor: dict) -> dict[str, dict]:
    """``{task|"average": {"near_floor", "one_class_seeds"}}``: ``near_floor`` when the 95% t interval of the
    row's mean over seeds holds the floor (one seed, or seeds all alike: the same score to 0.1 point);
    ``one_class_seeds``: the seeds whose run predicts one class on every dev example of the task."""
    if not floor:
        return {}
    per_seed = list(row.seed_scores().values())
    one_class = row.one_class_seeds()
    floors = {task: floor[task]["score"] for task in row.tasks}
    floors["average"] = statistics.fmean(floors.values())
    flags = {}
    for key, level in floors.items():
        values = [scores[key] for scores in per_seed]
        mean, half = statistics.fmean(values), mean_half_width(values) or 0.0
        near = abs(mean - level) <= max(half, SAME_SCORE)
        flags[key] = {"near_floor": near, "one_class_seeds": one_class.get(key, [])}
    return flags
