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
from _quality_report import markdown, paired_differences, summarise, total_parameters  # noqa: E402
from _quality_rows import PROFILE_ROWS, PROFILES, ROWS, ROWS_MEDIUM  # noqa: E402, F401  (ROWS_MEDIUM: the tests read it here)
from common import cached_run_folder, same_settings  # noqa: E402  (benchmarks/common/)
from references import majority_score  # noqa: E402


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


def planned_runs(profile, row, glue_dir):
    """Every run of one row as (seed, run id, RunConfig): per seed, and per task for separate models."""
    settings = {k: v for k, v in profile.items() if k not in ("seeds", "tasks", "separate_epochs")}
    settings.update(row.settings)
    seeds = profile["seeds"] if row.seeded else profile["seeds"][:1]
    task_groups = [[t] for t in profile["tasks"]] if row.name.startswith("separate") else [profile["tasks"]]
    tag = f"-{row.tag}" if row.tag else ""
    planned = []
    for seed in seeds:
        for tasks in task_groups:
            config = RunConfig(
                **settings,
                tasks=tasks,
                method=row.method,
                base=row.base,
                sampler=row.sampler,
                seed=seed,
                glue_dir=glue_dir,
                export=False,
            )
            if len(tasks) == 1:
                if profile.get("separate_epochs"):  # separate models: epochs of the task's own data
                    size = min(train_size(tasks[0], glue_dir), profile.get("max_train_examples") or 10**12)
                    config.max_steps = math.ceil(profile["separate_epochs"] * size / profile["batch_size"])
                config.steps_per_epoch = config.max_steps
            run_id = f"{row.method}-{row.base}-{row.sampler}-{'+'.join(tasks)}{tag}-s{seed}"
            planned.append((seed, run_id, config))
    return planned


def row_runs(out, profile, row, glue_dir):
    """Results of every run of one row (per seed), read from the cache; None while a run is missing."""
    per_seed = {}
    for seed, run_id, config in planned_runs(profile, row, glue_dir):
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
    known = {row.name for row in PROFILE_ROWS.get(args.profile, ROWS)}
    unknown = sorted(set(args.rows or ()) - known)
    if unknown:
        parser.error(f"unknown rows {unknown}; the {args.profile} profile has: {', '.join(sorted(known))}")
    return args


def selected_rows(args):
    return [row for row in PROFILE_ROWS.get(args.profile, ROWS) if not args.rows or row.name in args.rows]


def train_runs(args, profile, out, worker=0, workers=1) -> int:
    """Trains this worker's share of the runs (every ``workers``-th, from ``worker``); a failed run is
    reported and the others go on. Returns the number of failed runs."""
    planned = [run for row in selected_rows(args) for run in planned_runs(profile, row, args.glue_dir)]
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
        per_seed = row_runs(out, profile, row, args.glue_dir)
        if per_seed is None:
            missing.append(row.name)
            continue
        total, shared = total_parameters(row.name, per_seed, profile["tasks"])
        rows.append(
            {
                "name": row.name,
                "table": row.table,
                "method": row.method,
                "base": row.base,
                "sampler": row.sampler,
                "settings": dict(row.settings),
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
        text += "\nRows not finished yet: " + "; ".join(missing) + ".\n"
    (out / "quality.md").write_text(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
