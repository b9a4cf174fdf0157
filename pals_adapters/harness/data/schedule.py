"""A sampler's schedule: the task probabilities over the steps, as rows, a table or a plot."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# --------------------------------------------------------------------------
# Schedule inspection
# --------------------------------------------------------------------------
from .sampling import TaskSampler, check_positive_int


def schedule(sampler: TaskSampler, total_steps: int, every: int | None = None) -> list[dict[str, Any]]:
    """Rows ``{step, epoch, [alpha], p_<task>...}`` at steps ``0, every, 2*every, ...``.

    Steps stop before ``total_steps``; ``every`` defaults to ``sampler.steps_per_epoch`` (one row per epoch).
    ``epoch`` is 1-based; ``alpha`` appears only for size-based strategies.
    """
    total_steps = check_positive_int("total_steps", total_steps)
    every = sampler.steps_per_epoch if every is None else check_positive_int("every", every)
    rows: list[dict[str, Any]] = []
    for step in range(0, total_steps, every):
        row: dict[str, Any] = {"step": step, "epoch": step // sampler.steps_per_epoch + 1}
        alpha = sampler.alpha_at(step)
        if alpha is not None:
            row["alpha"] = alpha
        for name, p in zip(sampler.task_names, sampler.probabilities(step)):
            row[f"p_{name}"] = float(p)
        rows.append(row)
    return rows


def format_schedule(rows: Sequence[Mapping[str, Any]]) -> str:
    """Render `schedule` rows as a fixed-width text table (header, rule, one line per row)."""
    if not rows:
        return ""
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.4f}"
        return "" if value is None else str(value)

    table = [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in table)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in table)
    return "\n".join(lines)


def plot_schedule(sampler: TaskSampler, total_steps: int, path: str | Path) -> Path:
    """Write a PNG of each task's probability (and alpha, if any) over ``total_steps``."""
    try:
        # Optional (the plot extra), so imported here. Figure + Agg canvas directly: no pyplot, so the
        # caller's backend is untouched.
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "plot_schedule needs matplotlib: pip install 'matplotlib>=3.7' (or pip install 'pals-adapters[plot]')"
        ) from exc

    total_steps = check_positive_int("total_steps", total_steps)
    rows = schedule(sampler, total_steps, every=max(1, total_steps // 200))
    steps = [r["step"] for r in rows]

    fig = Figure(figsize=(7, 4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for name in sampler.task_names:
        # Probabilities change only at epoch boundaries: draw them as steps.
        ax.plot(steps, [r[f"p_{name}"] for r in rows], label=name, drawstyle="steps-post")
    ax.set_xlabel("step")
    ax.set_ylabel("sampling probability")
    ax.set_ylim(0.0, 1.0)
    ax.set_title(f"task sampling: {sampler.strategy}")
    if "alpha" in rows[0]:
        ax_alpha = ax.twinx()
        ax_alpha.plot(steps, [r["alpha"] for r in rows], "k--", drawstyle="steps-post")
        ax_alpha.set_ylabel("alpha (dashed)")
        ax_alpha.set_ylim(0.0, max(1.05, max(r["alpha"] for r in rows) * 1.05))
    ax.legend(loc="upper right", fontsize="small")
    fig.tight_layout()

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path
