"""Human-readable summaries of a run: the per-task dev table, the per-class view, the parameter counts
and a picture of the training."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)


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


def class_table(task: str, split: str, report: dict) -> str:
    """A Markdown table of one classification task's per-class view (`metrics.class_report`): precision,
    recall and F1 per class, then the confusion matrix (row: true label, column: predicted label)."""
    labels = report["labels"]
    head = ["class", "precision", "recall", "F1", "rows", "predicted", *(f"→ {label}" for label in labels)]
    rows = [
        f"{task} {split}: per class (the → columns: how the rows of each true class were predicted)",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for i, label in enumerate(labels):
        cells = [
            label,
            f"{100 * report['precision'][i]:.1f}",
            f"{100 * report['recall'][i]:.1f}",
            f"{100 * report['f1'][i]:.1f}",
            str(report["support"][i]),
            str(report["predicted"][i]),
            *(str(n) for n in report["confusion"][i]),
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def never_predicted(per_class: dict) -> list[str]:
    """One line per class that no dev row was predicted as (``{task: {split: class_report}}``)."""
    lines = []
    for task, splits in per_class.items():
        for split, report in splits.items():
            total = sum(report["predicted"])
            for label in report["never_predicted"]:
                rows = report["support"][report["labels"].index(label)]
                lines.append(
                    f"{task} {split}: class {label!r} is never predicted (0 of {total} predictions; "
                    f"{rows} rows have it)"
                )
    return lines


def plot_training(log_history: list[dict], path: str | Path) -> Path | None:
    """Writes a PNG of the run: each task's training loss over the steps (the overall loss where the log
    has no per-task losses) and, when the run evaluated more than once (``eval_steps``), each task's dev
    score and the average. Returns the path, or None when it cannot (matplotlib is missing, or the log
    holds no loss): a warning says why, and the run goes on."""
    try:
        # Optional (the plot extra). Figure + Agg canvas directly: the caller's backend is untouched.
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        logger.warning("matplotlib is not installed (pip install 'pals-adapters[plot]'): no plot of the run written")
        return None
    train = [row for row in log_history if "loss" in row and "step" in row]
    evals = [row for row in log_history if "eval_average" in row and "step" in row]
    if not train:
        logger.warning("the log holds no training loss (fewer steps than logging_steps?): no plot of the run written")
        return None
    losses = sorted({key for row in train for key in row if key.startswith("loss_")}) or ["loss"]
    scores = sorted({key for row in evals for key in row if key.startswith("eval_") and key.endswith("_score")})
    fig = Figure(figsize=(7, 7 if len(evals) > 1 else 4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(2 if len(evals) > 1 else 1, 1, 1)
    for key in losses:
        points = [(row["step"], row[key]) for row in train if key in row]
        ax.plot(*zip(*points), marker=".", label=key[len("loss_") :] or "all tasks")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (mean over the logging interval)")
    ax.set_title("training loss per task")
    ax.legend(fontsize="small")
    if len(evals) > 1:
        dev = fig.add_subplot(2, 1, 2)
        for key in [*scores, "eval_average"]:
            points = [(row["step"], 100 * row[key]) for row in evals if key in row]
            style = "k--" if key == "eval_average" else "-"
            dev.plot(*zip(*points), style, marker=".", label=key[len("eval_") :].removesuffix("_score"))
        dev.set_xlabel("step")
        dev.set_ylabel("dev score")
        dev.set_title("dev scores (every eval_steps)")
        dev.legend(fontsize="small")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


DEV_PREDICTIONS_FILE = "dev_predictions.jsonl"


def write_dev_predictions(predictions: dict, path: Path) -> None:
    """One JSON line per dev row: ``{"task", "split", "row", "prediction", "label"}`` (class index, or a
    regression task's value), what a paired bootstrap between two runs resamples."""
    written = path.with_name(f".{path.name}.tmp-{os.getpid()}")  # then renamed: never half a file
    with open(written, "w", encoding="utf-8") as out:
        for task, splits in predictions.items():
            for split, (values, labels) in splits.items():
                for row, (value, label) in enumerate(zip(values.tolist(), labels.tolist())):
                    line = {"task": task, "split": split, "row": row, "prediction": value, "label": label}
                    out.write(json.dumps(line) + "\n")
    os.replace(written, path)
