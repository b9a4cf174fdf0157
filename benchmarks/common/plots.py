"""Figures for docs/benchmarks.md, drawn from the benchmark results committed in benchmarks/results/.

python -m benchmarks.common.plots   # docs/figures/{quality_vs_params,speed_ratios,learning_curves_medium}.png
"""

import argparse
import json
from pathlib import Path

from matplotlib.figure import Figure  # no pyplot: no GUI backend, nothing global to close

RESULTS = Path("benchmarks/results")
FIGURES = Path("docs/figures")


def _subplots(*grid, figsize, **options):
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(*grid, **options)


def quality_vs_params(report: dict, path: Path) -> None:
    """Average dev score against the parameter multiplier, one point per row (mean ± s.e.)."""
    fig, ax = _subplots(figsize=(7, 4.5))
    markers = {"2": "o", "3": "s", "frozen": "^", "sampling": "D"}
    labels = {
        "2": "base fine-tuned",
        "3": "base fine-tuned (Table 3 family)",
        "frozen": "base frozen",
        "sampling": "PALs, other samplers",
    }
    seen = set()
    for row in report["rows"]:
        avg = row["summary"]["average"]
        table = row["table"]
        ax.errorbar(
            row["multiplier"],
            avg["mean"],
            yerr=avg["stderr"] or 0,
            fmt=markers[table],
            capsize=3,
            label=labels[table] if table not in seen else None,
            color=f"C{list(markers).index(table)}",
        )
        seen.add(table)
        if table != "sampling":  # the sampler rows share one x: the legend names them as a group
            ax.annotate(
                row["name"], (row["multiplier"], avg["mean"]), textcoords="offset points", xytext=(6, -3), fontsize=7
            )
    ax.set_xscale("log")
    ax.set_xticks([1, 1.1, 1.25, 1.5, 2, 3, 5], ["1", "1.1", "1.25", "1.5", "2", "3", "5"])
    ax.minorticks_off()
    ax.set_xlabel("parameters of the multi-task system / base model (log scale)")
    ax.set_ylabel("average dev score (%)")
    settings = report["settings"]
    ax.set_title(
        f"{settings['model']}, {len(settings['tasks'])} GLUE tasks, {settings['max_steps']} steps "
        f"({report['profile']} profile)",
        fontsize=9,
    )
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def speed_ratios(report: dict, path: Path) -> None:
    """Forward time of each method over the base model's, measured vs the FLOPs estimate."""
    rows = [r for r in report["rows"] if r["method"] not in ("base", "adapters_init") and not r.get("compiled")]
    names = [r["method"] for r in rows]
    measured = [r["forward"]["ratio_to_base"]["median"] for r in rows]
    low = [m - r["forward"]["ratio_to_base"]["min"] for m, r in zip(measured, rows)]
    high = [r["forward"]["ratio_to_base"]["max"] - m for m, r in zip(measured, rows)]
    flops = [report["flops"]["forward_ratio"].get(n, float("nan")) for n in names]
    fig, ax = _subplots(figsize=(7, 3.8))
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], measured, width=0.4, yerr=[low, high], capsize=3, label="measured (median, min-max)")
    ax.bar([i + 0.2 for i in x], flops, width=0.4, label="matmul FLOPs estimate")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(1.12, color="red", linewidth=0.8, linestyle="--", label="target for PALs: 1.12x")
    ax.set_xticks(list(x), names, rotation=20, fontsize=8)
    ax.set_ylabel("forward time / base model")
    s = report["settings"]
    ax.set_title(
        f"{s['model']}, batch {s['batch']} x {s['length']} tokens, {report['machine']['device']}, "
        f"{s['threads']} thread(s)",
        fontsize=9,
    )
    ax.set_ylim(0.8, max(max(m + h for m, h in zip(measured, high)), 1.2) + 0.05)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def learning_curves(report: dict, path: Path) -> None:
    """Dev scores against training step for the seeded rows (mean over seeds): the average and each task.
    Separate models are one run per task (their own step counts); their average is drawn as a level."""
    tasks = report["settings"]["tasks"]
    fig, axes = _subplots(2, 3, figsize=(11, 6), sharex=False)
    panels = ["average"] + tasks
    rows = [r for r in report["rows"] if r["summary"]["average"]["n"] > 1]
    for colour, row in enumerate(rows):
        points = {}  # (panel, step) -> scores over seeds
        for seed in row["per_seed"]:
            for curve in seed.get("curves", {}).values():
                for entry in curve:
                    for panel in panels:
                        key = "eval_average" if panel == "average" else f"eval_{panel}_score"
                        joint = all(f"eval_{t}_score" in entry for t in tasks)  # not a one-task run
                        if key in entry and (panel != "average" or joint):
                            points.setdefault((panel, entry["step"]), []).append(100 * entry[key])
        for ax, panel in zip(axes.flat, panels):
            steps = sorted(step for p, step in points if p == panel)
            if steps:
                ax.plot(
                    steps,
                    [sum(points[(panel, s)]) / len(points[(panel, s)]) for s in steps],
                    marker="o",
                    markersize=3,
                    color=f"C{colour}",
                    label=row["name"],
                )
            elif panel == "average":
                ax.axhline(
                    row["summary"]["average"]["mean"],
                    color=f"C{colour}",
                    linestyle="--",
                    label=f"{row['name']} (final)",
                )
    for ax, panel in zip(axes.flat, panels):
        ax.set_title(panel, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
    axes.flat[0].set_ylabel("dev score (%)")
    axes.flat[0].legend(fontsize=6)
    fig.suptitle(f"Dev learning curves, {report['profile']} profile (mean over seeds)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quality", default=str(RESULTS / "quality" / "quick" / "quality.json"))
    parser.add_argument("--speed", default=str(RESULTS / "speed" / "speed_memory_minilm_b16_padded_amd_setup.json"))
    parser.add_argument("--medium", default=str(RESULTS / "quality" / "medium" / "quality.json"))
    parser.add_argument("--out", default=str(FIGURES))
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for source, draw, name in (
        (args.quality, quality_vs_params, "quality_vs_params.png"),
        (args.speed, speed_ratios, "speed_ratios.png"),
        (args.medium, learning_curves, "learning_curves_medium.png"),
    ):
        if Path(source).is_file():
            draw(json.loads(Path(source).read_text()), out / name)
            print(f"{out / name} (from {source})")
        else:
            print(f"skipped {name}: {source} not found (run the benchmark first)")


if __name__ == "__main__":
    main()
