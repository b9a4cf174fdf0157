"""The report of a comparison: ``comparison.json`` (the shape other tools read), ``.md`` (the table the
command prints), ``.csv`` and ``comparison.png``, each with the command line that made it."""

from __future__ import annotations

import csv
import json
import logging
import os
from pathlib import Path

from .collect import RowResult
from .stats import mean_half_width, mean_sd

logger = logging.getLogger(__name__)

REPORT_NAME = "comparison"


def comparison_data(
    tasks: list[str],
    reference: str,
    rows: list[RowResult],
    paired: dict,
    notes: dict,
    floor: dict,
    command: str,
    output_dir: Path,
) -> dict:
    """The whole report as JSON values; ``run_dir`` relative to ``output_dir``."""
    keys = [*tasks, "average"]
    out_rows = []
    for row in rows:
        if not row.runs:
            continue
        per_seed = row.seed_scores()
        stats = {key: mean_sd([scores[key] for scores in per_seed.values()]) for key in keys}
        out_rows.append(
            {
                "name": row.name,
                "method": row.method,
                "base": row.base,
                "seeds": row.seeds,
                "runs": [_run_entry(run, output_dir) for run in row.runs],
                "mean": {key: stats[key][0] for key in keys},
                "sd": {key: stats[key][1] for key in keys},
                "params_x_base": row.params_x_base(),
                "seconds_per_seed": row.seconds_per_seed(),
                "examples_per_second": row.examples_per_second(),
                "curve": {str(step): value for step, value in row.curve().items()},
            }
        )
    return {
        "tasks": tasks,
        "reference": reference,
        "rows": out_rows,
        "paired": paired,
        "paired_notes": notes,
        "floor": floor,
        "missing": {row.name: row.missing for row in rows if row.missing},
        "command": command,
    }


def _run_entry(run, output_dir: Path) -> dict:
    scores = run.scores()
    scores["average"] = sum(scores.values()) / len(scores)
    return {
        "seed": run.seed,
        "run_dir": os.path.relpath(run.folder, output_dir),
        "tasks": run.tasks,
        "scores": scores,
        "seconds": run.results.get("wall_seconds"),
    }


def _cell(mean: float, sd: float | None) -> str:
    return f"{mean:.1f}" + (f" ± {sd:.1f}" if sd is not None else "")


def _interval(d: dict) -> str:
    return f"{d['mean']:+.1f} [{d['low']:+.1f}, {d['high']:+.1f}]"


def markdown(data: dict) -> str:
    """The tables: scores per row (mean ± sd over seeds), the floor, and the reference minus each row."""
    tasks, keys = data["tasks"], [*data["tasks"], "average"]
    lines = [
        f"Command: `{data['command']}`",
        "",
        "Dev scores in points (0-100), mean ± standard deviation over seeds; avg: the mean over tasks.",
        "",
        "| row | seeds | params (x base) | " + " | ".join(tasks) + " | avg | s per seed | examples/s |",
        "|---|---:|---:|" + "---:|" * (len(keys) + 2),
    ]
    for row in data["rows"]:
        cells = [_cell(row["mean"][k], row["sd"][k]) for k in keys]
        seconds = f"{row['seconds_per_seed']:.0f}" if row["seconds_per_seed"] is not None else "-"
        rate = f"{row['examples_per_second']:.1f}" if row["examples_per_second"] is not None else "-"
        lines.append(
            f"| {row['name']} | {len(row['seeds'])} | {row['params_x_base']:.2f} | "
            + " | ".join(cells)
            + f" | {seconds} | {rate} |"
        )
    if data["floor"]:
        floor = [data["floor"][t]["score"] for t in tasks]
        lines.append(
            "| majority class (floor) | - | - | "
            + " | ".join(f"{s:.1f}" for s in floor)
            + f" | {sum(floor) / len(floor):.1f} | - | - |"
        )
    if data["paired"]:
        lines += [
            "",
            f"{data['reference']} minus each row (points): the mean difference and its 95% interval; "
            "t: Student-t over the common seeds; bootstrap: paired bootstrap over the dev examples of one run "
            "each. An interval that excludes 0 is a difference beyond the seeds' noise.",
            "",
            "| row | seeds (n) | interval | " + " | ".join(tasks) + " | avg |",
            "|---|---:|---|" + "---:|" * len(keys),
        ]
        for name, diffs in data["paired"].items():
            first = diffs["average"]
            cells = " | ".join(_interval(diffs[k]) for k in keys)
            lines.append(f"| {name} | {first['n']} | {first['interval']} | {cells} |")
    reasons: dict[str, list[str]] = {}
    for name, why in data["paired_notes"].items():
        reasons.setdefault(why, []).append(name)
    for why, names in reasons.items():
        lines.append(f"\nNo interval ({why}): {'; '.join(names)}.")
    for name, folders in data["missing"].items():
        lines.append(f"\nNot done yet ({name}): {len(folders)} runs, e.g. {folders[0]}.")
    return "\n".join(lines) + "\n"


def write_csv(data: dict, path: Path) -> None:
    """One line per row and task (and the average): mean, sd, and the paired difference with its interval."""
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["row", "task", "mean", "sd", "seeds", "params_x_base", "diff", "low", "high", "interval"])
        for row in data["rows"]:
            for key in [*data["tasks"], "average"]:
                diff = data["paired"].get(row["name"], {}).get(key, {})
                writer.writerow(
                    [
                        row["name"],
                        key,
                        row["mean"][key],
                        row["sd"][key],
                        len(row["seeds"]),
                        row["params_x_base"],
                        *(diff.get(k) for k in ("mean", "low", "high", "interval")),
                    ]
                )


def plot(data: dict, rows: list[RowResult], path: Path) -> Path | None:
    """The average and each task per row, with the 95% t interval of the mean over seeds; beside it the dev
    curves per row when the runs evaluated during training. None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("no %s: matplotlib is not installed (pip install 'pals-adapters[plot]')", path.name)
        return None
    curves = [(row["name"], row["curve"]) for row in data["rows"] if row["curve"]]
    figure, axes = plt.subplots(1, 2 if curves else 1, figsize=(13 if curves else 8, 0.5 * len(rows) + 2.5))
    left = axes[0] if curves else axes
    keys = ["average", *data["tasks"]]
    for k, key in enumerate(keys):
        for i, row in enumerate(data["rows"]):
            values = [scores[key] for scores in _per_seed(row)]
            half = mean_half_width(values)
            y = i + (k - (len(keys) - 1) / 2) * 0.8 / len(keys)
            left.errorbar(row["mean"][key], y, xerr=half, fmt="o" if key == "average" else ".", color=f"C{k}")
        left.plot([], [], "o", color=f"C{k}", label=key)
    left.set_yticks(range(len(data["rows"])), [row["name"] for row in data["rows"]])
    left.invert_yaxis()
    left.set_xlabel("dev score (points), 95% t interval over seeds")
    left.legend(fontsize="small")
    if curves:
        for i, (name, curve) in enumerate(curves):  # ten colours, then the next line style
            style = ("-", "--", ":")[i // 10 % 3]
            axes[1].plot([int(s) for s in curve], list(curve.values()), style, marker=".", label=name)
        axes[1].set_xlabel("step")
        axes[1].set_ylabel("dev average (points), mean over seeds")
        axes[1].legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def _per_seed(row: dict) -> list[dict]:
    """Scores per seed from a row's runs (separate models: a seed's runs together)."""
    seeds: dict[int, dict] = {}
    for run in row["runs"]:
        seeds.setdefault(run["seed"], {}).update({k: v for k, v in run["scores"].items() if k != "average"})
    for scores in seeds.values():
        scores["average"] = sum(scores.values()) / len(scores)
    return list(seeds.values())


def write_report(data: dict, rows: list[RowResult], output_dir: Path) -> dict[str, Path]:
    """``comparison.{json,md,csv,png}`` in ``output_dir``; returns the paths written."""
    output_dir.mkdir(parents=True, exist_ok=True)
    paths = {ext: output_dir / f"{REPORT_NAME}.{ext}" for ext in ("json", "md", "csv")}
    paths["json"].write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    paths["md"].write_text(markdown(data), encoding="utf-8")
    write_csv(data, paths["csv"])
    if data["rows"]:
        figure = plot(data, rows, output_dir / f"{REPORT_NAME}.png")
        if figure is not None:
            paths["png"] = figure
    return paths
