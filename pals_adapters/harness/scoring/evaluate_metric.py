"""The harness's task metrics as a Hugging Face `evaluate` module, usable offline.

``evaluate.load("glue", "mrpc")`` needs the Hub; `task_metric` gives an `evaluate.Metric` with the
same ``add_batch`` / ``compute`` API that computes exactly `compute_metrics` (scikit-learn / SciPy),
for GLUE tasks and for the user's own tasks::

    metric = task_metric("mrpc")
    metric.add_batch(predictions=[1, 0], references=[1, 1])
    metric.compute()  # {"accuracy": 0.5, "f1": 0.666...}
"""

from __future__ import annotations

import datasets
import evaluate

from ..tasks.glue import get_task
from ..tasks.spec import TaskSpec
from .metrics import compute_metrics


class TaskMetric(evaluate.Metric):
    """`evaluate.Metric` of one task: class indices (or floats for regression) in, its metrics out."""

    def __init__(self, spec: TaskSpec, **kwargs):
        self.spec = spec
        super().__init__(config_name=spec.name, **kwargs)

    def _info(self) -> evaluate.MetricInfo:
        value = datasets.Value("float64" if self.spec.is_regression else "int64")
        return evaluate.MetricInfo(
            description=f"Dev metrics of task {self.spec.name!r}: {', '.join(self.spec.metrics)}",
            citation="",
            inputs_description="predictions: class indices (or scores for regression); references: the same",
            features=datasets.Features({"predictions": value, "references": value}),
        )

    def _compute(self, predictions, references) -> dict[str, float]:
        return compute_metrics(self.spec, predictions, references)


def task_metric(task: str | TaskSpec, **kwargs) -> TaskMetric:
    """The metric of a GLUE task by name (``"sst2"``, ``"STS-B"`` ...) or of a `TaskSpec`."""
    return TaskMetric(get_task(task), **kwargs)
