"""Human-readable summaries of a run: the per-task dev table and the parameter counts."""

from __future__ import annotations


def parameter_summary(model) -> dict:
    """Parameters per task, shared and trainable, of a `MultiTaskModel`."""
    per_task = {task: sum(p.numel() for _, p in model.task_parameters(task)) for task in model.tasks}
    shared = sum(p.numel() for _, p in model.shared_parameters())
    trainable = sum(p.numel() for p in model.trainable_parameters())
    return {"shared": shared, "per_task": per_task, "trainable": trainable}


def task_metrics(metrics: dict[str, float], task: str, tasks) -> dict[str, float]:
    """The metrics of ``task`` from the flat ``<task>_<metric>`` dict, its prefix removed. A key belongs
    to the longest task name it starts with, so task ``a`` never picks up the metrics of task ``a_b``."""
    out = {}
    for key, value in metrics.items():
        owners = [t for t in tasks if key.startswith(f"{t}_")]
        if owners and max(owners, key=len) == task:
            out[key[len(task) + 1 :]] = value
    return out


def results_table(results: dict) -> str:
    """A Markdown table of per-task dev scores (percent) and the average."""
    metrics = results["metrics"]
    tasks = list(results["train_sizes"])
    rows = ["| task | metrics | score |", "|---|---|---|"]
    for task in tasks:
        own = task_metrics(metrics, task, tasks)
        detail = ", ".join(f"{k} {100 * v:.1f}" for k, v in own.items() if k != "score")
        rows.append(f"| {task} | {detail} | {100 * own['score']:.1f} |")
    rows.append(f"| **average** | | **{100 * metrics['average']:.1f}** |")
    return "\n".join(rows)
