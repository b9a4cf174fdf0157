"""The statistics of a comparison, all from NumPy and SciPy: means and standard deviations over seeds,
the paired Student-t interval of a difference over common seeds, and a paired bootstrap over the dev
examples of two runs where fewer than two common seeds exist."""

from __future__ import annotations

import math
import statistics

import numpy as np
from scipy import stats as scipy_stats

from ...scoring.metrics import compute_metrics, task_score
from ...tasks.spec import TaskSpec

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0  # the same interval every time the report is written


def mean_sd(values: list[float]) -> tuple[float, float | None]:
    """The mean and the sample standard deviation (None for a single value)."""
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def t_interval(differences: list[float]) -> dict:
    """Mean of paired differences with its 95% Student-t interval (``scipy.stats.t``); needs n >= 2."""
    n = len(differences)
    mean, sd = mean_sd(differences)
    half = scipy_stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1) * sd / math.sqrt(n)
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n, "interval": "t"}


def _score(spec: TaskSpec, predictions: np.ndarray, labels: np.ndarray) -> float:
    return 100 * task_score(spec, compute_metrics(spec, predictions, labels))


def bootstrap_interval(tasks: list[str], specs: dict[str, TaskSpec], reference: dict, other: dict) -> dict:
    """Reference minus other, per task and for the task average, with a 95% percentile interval of a paired
    bootstrap: the dev rows of each task are resampled (the same rows for both runs), the scores recomputed.

    ``reference`` and ``other``: ``{task: (predictions, labels)}`` of one dev split per task (row order).
    Returns ``{task|"average": {"mean", "low", "high", "n": 1, "interval": "bootstrap"}}``."""
    rows = [np.arange(len(reference[task][1])) for task in tasks]

    def difference(task: str, picked: np.ndarray) -> float:
        (ref, labels), (oth, _) = reference[task], other[task]
        picked = picked.astype(int)
        return _score(specs[task], ref[picked], labels[picked]) - _score(specs[task], oth[picked], labels[picked])

    out, distributions = {}, []
    for task, indices in zip(tasks, rows):
        out[task], distribution = _bootstrap(lambda picked, task=task: difference(task, picked), indices)
        distributions.append(distribution)
    # The tasks' dev sets are resampled independently: the average's resamples are the mean of the tasks'.
    average = np.mean(distributions, axis=0)
    tail = 100 * (1 - CONFIDENCE) / 2
    low, high = np.percentile(average, [tail, 100 - tail])
    mean = statistics.fmean(out[task]["mean"] for task in tasks)
    out["average"] = {"mean": mean, "low": float(low), "high": float(high), "n": 1, "interval": "bootstrap"}
    return out


def _bootstrap(statistic, indices: np.ndarray) -> tuple[dict, np.ndarray]:
    """The interval of ``statistic`` over resampled dev rows, and its resampled values."""
    result = scipy_stats.bootstrap(
        [indices],
        statistic,
        vectorized=False,
        n_resamples=BOOTSTRAP_RESAMPLES,
        confidence_level=CONFIDENCE,
        method="percentile",
        rng=np.random.default_rng(BOOTSTRAP_SEED),
    )
    low, high = result.confidence_interval
    mean = float(statistic(indices))
    if math.isnan(low) or math.isnan(high):  # every resample the same difference (e.g. identical predictions)
        low = high = mean
    interval = {"mean": mean, "low": float(low), "high": float(high), "n": 1, "interval": "bootstrap"}
    return interval, result.bootstrap_distribution


def mean_half_width(values: list[float]) -> float | None:
    """Half the width of the 95% Student-t interval of the mean of ``values`` (None for a single value)."""
    if len(values) < 2:
        return None
    quantile = scipy_stats.t.ppf(0.5 + CONFIDENCE / 2, len(values) - 1)
    return float(quantile * statistics.stdev(values) / math.sqrt(len(values)))
