"""Training step time in fp32 and in bf16 autocast on the CPU, on the main job's own batches.

Both precisions train one model (the main job's method, base and tasks) through the harness's
Trainer on the same stretches of the main job's batch stream: its sampler, batch size and
length-grouped batches, from a config file (default: ``benchmarks/main_job/main_job.yaml``). The
rounds take their stretches from evenly spaced points of the whole run, so that the task mix of
annealed sampling (short CoLA / SST-2 sentences early, more long RTE / MRPC pairs later) is
represented. The two precisions alternate round by round in one process, so the load of a shared
machine hits both alike: only their ratio is meaningful. A step is the interval between consecutive
``on_step_end`` calls of the Trainer; the first step of each stretch (optimiser state allocation)
is left out. bf16 keeps float32 master weights; the dev evaluation runs in float32 either way.

    python -m benchmarks run speed precision --glue-dir ../shared/glue
"""

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

import torch
import yaml
from transformers import AutoTokenizer

from benchmarks.common import command_line, machine_info, markdown_table, results_dir, write_results
from pals_adapters.harness.methods.model import build_model, resolve_model
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.harness.precision import cpu_has_native_bf16
from pals_adapters.harness.training.runner import RunConfig, build_trainer, load_train_sets

from .throughput import StepClock, timed_stretch

PRECISIONS = ("fp32", "bf16")
DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "main_job" / "main_job.yaml"  # the main job's batches


def stretches(total_steps: int, rounds: int, steps: int) -> list[list[int]]:
    """``rounds`` runs of ``steps`` consecutive step indices, starting at evenly spaced points."""
    if steps > total_steps // rounds:
        raise SystemExit(f"--rounds {rounds} x --steps {steps} does not fit in the run's {total_steps} steps")
    return [list(range(r * total_steps // rounds, r * total_steps // rounds + steps)) for r in range(rounds)]


def summarise(raw: dict, command: str) -> tuple[dict, str]:
    seconds = raw["step_seconds"]
    batch = raw["batch_size"]
    per_round = {p: [statistics.mean(r) for r in seconds[p]] for p in PRECISIONS}
    mean = {p: statistics.mean(s for r in seconds[p] for s in r) for p in PRECISIONS}
    speedup = mean["fp32"] / mean["bf16"]
    round_ratios = [f / b for f, b in zip(per_round["fp32"], per_round["bf16"])]
    rows = [
        [p, f"{batch / mean[p]:.1f}", f"{mean[p]:.3f}", ", ".join(f"{s:.3f}" for s in per_round[p])] for p in PRECISIONS
    ]
    md = [
        f"# CPU training step: fp32 and bf16 autocast ({raw['config_file']})",
        "",
        f"`{command}`",
        "",
        f"{raw['method']} with the base {raw['base']}, {raw['model']}, tasks {', '.join(raw['tasks'])}, "
        f"{raw['sampler']} sampling, batch {batch}, length-grouped. {len(seconds['fp32'])} rounds of "
        f"{raw['steps'] - 1} timed steps per precision, from evenly spaced points of the run's {raw['total_steps']} "
        f"steps, interleaved in one process; {raw['threads']} torch thread(s). Wall time per step.",
        "",
        markdown_table(["precision", "examples/s", "s/step", "s/step per round"], rows),
        "",
        f"bf16 / fp32 examples per second: **{speedup:.2f}x** (total), median over rounds "
        f"{statistics.median(round_ratios):.2f}x (rounds: {', '.join(f'{r:.2f}' for r in round_ratios)}).",
        "",
        f"CPU: {raw['cpu_bf16']}. No GPU figures: this measures the CPU path.",
    ]
    data = {
        "command": command,
        "bf16_speedup": speedup,
        "median_round_speedup": statistics.median(round_ratios),
        "round_speedups": round_ratios,
        "mean_step_seconds": mean,
        **raw,
    }
    return data, "\n".join(md)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=str(DEFAULT_CONFIG), help="a pals-bench train config file")
    parser.add_argument("--glue-dir", default="../shared/glue")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=31, help="steps per precision per round (the first not timed)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out-dir", default=None)
    parser.add_argument("--name", default="cpu_precision")
    args = parser.parse_args(argv)
    if args.steps < 2:
        raise SystemExit("--steps must be at least 2 (the first step of a stretch is not timed)")

    settings = yaml.safe_load(Path(args.config).read_text())
    overrides = dict(precision="fp32", output_dir="runs/cpu_precision", glue_dir=args.glue_dir, export=False)
    config = RunConfig(**{**settings, **overrides, "logging_steps": 10**6, "eval_steps": None})
    specs = config.validate()
    torch.set_num_threads(args.threads)
    model_path = resolve_model(config.model)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    train = load_train_sets(config, specs, tokenizer)
    model = build_model(model_path, specs, get_method(config.method), config.base)

    trainers = {}
    for precision in PRECISIONS:
        trainer = build_trainer(dataclasses.replace(config, precision=precision), model, tokenizer, train, {})
        trainer.args.disable_tqdm = True
        trainer.add_callback(StepClock())
        trainers[precision] = trainer
    stream = trainers["fp32"].train_dataset  # the run's own batch stream (the same for both precisions)
    seconds = {p: [] for p in PRECISIONS}
    for r, steps in enumerate(stretches(config.max_steps, args.rounds, args.steps)):
        for precision, trainer in trainers.items():
            seconds[precision].append([wall for wall, _ in timed_stretch(trainer, stream, steps)])
        print(
            f"round {r + 1}/{args.rounds} (steps {steps[0]}-{steps[-1]}): s/step "
            + ", ".join(f"{p} {statistics.mean(seconds[p][-1]):.3f}" for p in PRECISIONS),
            flush=True,
        )

    raw = {
        "config_file": Path(args.config).name,
        "model": config.model,
        "method": config.method,
        "base": config.base,
        "tasks": list(specs),
        "sampler": config.sampler,
        "batch_size": config.batch_size,
        "total_steps": config.max_steps,
        "steps": args.steps,
        "threads": args.threads,
        # what precision auto goes by (pals_adapters/harness/precision.py)
        "cpu_bf16": f"native bfloat16 (AVX512-BF16 or AMX) {'yes' if cpu_has_native_bf16() else 'no'}",
        "step_seconds": seconds,
    }
    data, md = summarise(raw, command_line("speed precision", argv))
    data["machine"] = machine_info()
    kwargs = {"out_dir": args.out_dir or results_dir("speed")}
    paths = write_results(args.name, data, md, **kwargs)
    print(md)
    print("wrote", *paths)
    return 0
