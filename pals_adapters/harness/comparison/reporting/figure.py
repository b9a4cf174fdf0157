"""``comparison.png``: each row's average and task scores with their 95% t intervals over seeds (clipped to
the score's range), each task's majority-class floor, the reference row marked, and beside it the dev
curves of the rows that evaluated during training (a note names the rows without one)."""

from __future__ import annotations

import io
import logging

from .stats import mean_half_width

logger = logging.getLogger(__name__)

FIGURE_MARK = b"pals-bench compare"  # in the PNG's metadata: how compare knows its own figure
FULL_RANGE = (0.0, 100.0)


def plot(data: dict) -> bytes | None:
    """The PNG's bytes; None without matplotlib."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        logger.warning("no comparison.png: matplotlib is not installed (pip install 'pals-adapters[plot]')")
        return None
    rows, tasks = data["rows"], data["tasks"]
    curves = [(row["name"], row["curve"]) for row in rows if row["curve"]]
    wide = bool(curves)  # a second panel for the curves, when any row has one
    figure = Figure(figsize=(13 if wide else 8, 0.5 * len(rows) + 3))
    FigureCanvasAgg(figure)
    left = figure.add_subplot(1, 2 if wide else 1, 1)
    keys = ["average", *tasks]
    ranges = _ranges(data)
    for k, key in enumerate(keys):
        for i, row in enumerate(rows):
            values = [scores[key] for scores in _per_seed(row)]
            mean, half = row["mean"][key], mean_half_width(values) or 0.0
            low, high = ranges[key]
            # clipped to the range; never below zero (a mean outside it, e.g. an average under 0, draws no bar there)
            error = [[max(0.0, mean - max(mean - half, low))], [max(0.0, min(mean + half, high) - mean)]]
            flags = row["flags"].get(key, {})
            hollow = flags.get("near_floor") or flags.get("one_class_seeds")
            y = i + (k - (len(keys) - 1) / 2) * 0.8 / len(keys)
            left.errorbar(
                mean,
                y,
                xerr=error,
                fmt="o" if key == "average" else ".",
                color=f"C{k}",
                markerfacecolor="none" if hollow else f"C{k}",
            )
        left.plot([], [], "o", color=f"C{k}", label=key)
        floor = _floor(data, key)
        if floor is not None:
            left.axvline(floor, color=f"C{k}", linestyle="--", linewidth=0.8, alpha=0.7)
    if data["floor"]:
        left.plot([], [], "k--", linewidth=0.8, label="majority-class floor")
    left.plot([], [], "ko", markerfacecolor="none", label="at the floor or one class")
    names = [row["name"] + (" (reference)" if row["name"] == data["reference"] else "") for row in rows]
    left.set_yticks(range(len(rows)), names)
    for label, row in zip(left.get_yticklabels(), rows):
        if row["name"] == data["reference"]:
            label.set_fontweight("bold")
    left.invert_yaxis()
    left.set_xlabel("dev score (points), 95% t interval over seeds")
    left.legend(fontsize="small")
    if wide:
        _curves(figure.add_subplot(1, 2, 2), rows, curves)
    figure.tight_layout()
    out = io.BytesIO()
    figure.savefig(out, format="png", dpi=100, metadata={"Description": FIGURE_MARK.decode() + " report"})
    return out.getvalue()


def _curves(axes, rows: list[dict], curves: list) -> None:
    for i, (name, curve) in enumerate(curves):  # ten colours, then the next line style
        style = ("-", "--", ":")[i // 10 % 3]
        axes.plot([int(s) for s in curve], list(curve.values()), style, marker=".", color=f"C{i % 10}", label=name)
    axes.set_xlabel("step")
    axes.set_ylabel("dev average (points), mean over seeds")
    without = [
        row["name"] + (" (one run per task)" if row["method"] == "separate" else "") for row in rows if not row["curve"]
    ]
    if curves:
        axes.legend(fontsize="small")
    if without:
        axes.text(
            0.01,
            0.01,
            "no curve (no dev scores during training): " + "; ".join(without),
            transform=axes.transAxes,
            fontsize="small",
            wrap=True,
            verticalalignment="bottom",
        )


def _ranges(data: dict) -> dict[str, tuple[float, float]]:
    """Each task's score range in points (correlations go below 0); the average's spans them all."""
    ranges = {task: tuple(data["floor"].get(task, {}).get("range", FULL_RANGE)) for task in data["tasks"]}
    ranges["average"] = (min(low for low, _ in ranges.values()), FULL_RANGE[1])
    return ranges


def _floor(data: dict, key: str) -> float | None:
    if not data["floor"]:
        return None
    scores = [data["floor"][task]["score"] for task in data["tasks"]]
    return sum(scores) / len(scores) if key == "average" else data["floor"][key]["score"]


def _per_seed(row: dict) -> list[dict]:
    """Scores per seed from a row's runs (separate models: a seed's runs together)."""
    seeds: dict[int, dict] = {}
    for run in row["runs"]:
        seeds.setdefault(run["seed"], {}).update({k: v for k, v in run["scores"].items() if k != "average"})
    for scores in seeds.values():
        scores["average"] = sum(scores.values()) / len(scores)
    return list(seeds.values())
