"""quality.py's tables: per-row means and spreads over seeds, paired differences against a reference row
with 95% t intervals, and the markdown report."""

import math
import statistics
from pathlib import Path

T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571}  # Student t quantiles for 95% intervals


def paired_differences(rows, reference_name, tasks):
    """Reference row minus each other seeded row, seed by seed: mean and 95% t interval, in points."""
    by_name = {r["name"]: r for r in rows}
    if reference_name not in by_name:
        return {}
    ref = {s["seed"]: s["metrics"] for s in by_name[reference_name]["per_seed"]}
    out = {}
    for row in rows:
        other = {s["seed"]: s["metrics"] for s in row["per_seed"]}
        seeds = sorted(set(ref) & set(other))
        if row["name"] == reference_name or len(seeds) < 2:
            continue
        out[row["name"]] = {}
        for key in [f"{t}_score" for t in tasks] + ["average"]:
            diffs = [100 * (ref[s][key] - other[s][key]) for s in seeds]
            mean, sd = statistics.mean(diffs), statistics.stdev(diffs)
            half = T_975[len(diffs) - 1] * sd / math.sqrt(len(diffs))
            out[row["name"]][key] = {"mean": mean, "low": mean - half, "high": mean + half, "n": len(diffs)}
    return out


def summarise(per_seed, tasks):
    """Mean, standard deviation and standard error (over seeds) of every task score and the average, in percent."""
    out = {}
    for key in [f"{t}_score" for t in tasks] + ["average"]:
        values = [100 * s["metrics"][key] for s in per_seed]
        mean = statistics.mean(values)
        std = statistics.stdev(values) if len(values) > 1 else None
        out[key] = {
            "mean": mean,
            "std": std,
            "stderr": std / math.sqrt(len(values)) if std is not None else None,
            "n": len(values),
        }
    return out


def total_parameters(name, per_seed, tasks):
    """Parameters of the whole multi-task system (separate models: one base per task)."""
    p = per_seed[0]["parameters"]
    task_specific = sum(p[t] for t in tasks)
    return task_specific + p["shared"] * (len(tasks) if name.startswith("separate") else 1), p["shared"]


def markdown(rows, tasks, spread="stderr", paired=None, majority=None) -> str:
    """Tables of mean ± ``spread`` (standard error for quick, standard deviation for medium) per row,
    the paired differences of PALs against the other seeded rows, and each run's wall time."""
    lines = []
    if majority:
        scores = [100 * majority[t]["score"] for t in tasks]
        lines += [
            "Without training (the majority class of the training set; STS-B: its mean): "
            + ", ".join(f"{t} {score:.1f}" for t, score in zip(tasks, scores))
            + f"; average {statistics.mean(scores):.1f}.",
            "",
        ]
    for table, title in (
        ("2", "Table 2 style: separate vs shared vs PALs (base fine-tuned)"),
        ("budget", "Other methods at the PALs parameter budget (base fine-tuned)"),
        ("3", "Table 3 style: other task-specific layers (base fine-tuned)"),
        ("frozen", "Base frozen"),
        ("sampling", "PALs with each task sampler"),
    ):
        selected = [r for r in rows if r["table"] == table]
        if not selected:
            continue
        lines += [
            f"### {title}",
            "",
            "| row | params (x base) | " + " | ".join(tasks) + " | avg |",
            "|---|---:|" + "---:|" * (len(tasks) + 1),
        ]
        for r in selected:
            cells = []
            for key in [f"{t}_score" for t in tasks] + ["average"]:
                s = r["summary"][key]
                cells.append(f"{s['mean']:.1f}" + (f" ± {s[spread]:.1f}" if s.get(spread) is not None else ""))
            lines.append(
                f"| {r['name']} (n={r['summary']['average']['n']}) | {r['multiplier']:.2f} | "
                + " | ".join(cells)
                + " |"
            )
        lines.append("")
    if paired:
        lines += [
            "### PALs + annealed minus each row, same seeds (points, mean and 95% t interval)",
            "",
            "| row | " + " | ".join(tasks) + " | avg |",
            "|---|" + "---:|" * (len(tasks) + 1),
        ]
        for name, diffs in paired.items():
            cells = [
                f"{d['mean']:+.1f} [{d['low']:+.1f}, {d['high']:+.1f}]" for d in (diffs[f"{t}_score"] for t in tasks)
            ] + [f"{diffs['average']['mean']:+.1f} [{diffs['average']['low']:+.1f}, {diffs['average']['high']:+.1f}]"]
            lines.append(f"| {name} (n={diffs['average']['n']}) | " + " | ".join(cells) + " |")
        lines.append("")
    walls = [(run_id, w) for r in rows for seed in r["per_seed"] for run_id, w in seed.get("runs", {}).items()]
    if any(w["seconds"] for _, w in walls):
        lines += [
            "### Wall time of every run (start to the dev table; several runs shared the machine at a time)",
            "",
            "| run | steps | seconds | device |",
            "|---|---:|---:|---|",
        ]
        lines += [
            f"| {run_id} | {w['steps']} | {w['seconds']:.0f}{resumed_note(w)} | {w.get('device', 'not recorded')} |"
            for run_id, w in walls
            if w["seconds"]
        ]
        lines.append("")
    return "\n".join(lines)


def resumed_note(wall):
    """A run continued from a checkpoint reports the time after resuming only."""
    checkpoint = wall.get("resumed_from")
    return f" (after resuming from {Path(checkpoint).name})" if checkpoint else ""
