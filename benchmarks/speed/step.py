"""Speed and memory of PALs and other adapters against the base model, measured in one process.

For the base model and each method: one inference forward (eval, no_grad), one training step
(forward, backward, AdamW step) with the base frozen, and one with the base fine-tuned too,
plus the peak memory of each. Measurements are interleaved round-robin over methods, so noise
from the machine hits every row alike; ratios are taken within a round, then the median.
Then: N task adapters in one `Parallel` forward against N separate forwards.
Methods are named as the harness names them (`pals-bench train --method`).

    python -m benchmarks run speed                          # bundled MiniLM, batch 32 x 128 tokens
    python -m benchmarks run speed --model bert-base --batch 8 --warmup 1 --repeats 3
    python -m benchmarks run speed --quick --model tiny     # smoke test, seconds
    python -m benchmarks run speed --threads 1 --compile    # + every row compiled (torch.compile, inductor)

Writes benchmarks/results/speed/speed_memory_<model>.{json,md} and prints PASS/FAIL for the targets, for
the eager rows and (with --compile) for the compiled rows against the compiled base. On a CPU:
PALs forward <= 1.09x the base forward, a PALs full fine-tuning step <= 1.12x the base's, and a
frozen-base PALs training step <= 0.72x the base's full fine-tuning step. On a GPU: PALs forward
<= 1.15x the base forward, and a frozen-base PALs step cheaper than the base's full step (< 1x).
On a GPU each row also gets its model FLOP rate and MFU (against the device's data-sheet bf16
peak, or --peak-tflops):

    python -m benchmarks run speed --model bert-base --dtype bf16 --batch 128 --compile
"""

import argparse
import logging
import os
import sys
import time

import torch

import pals_adapters  # noqa: F401  (registers the "pals" presets)
from benchmarks.common import (
    MODELS,
    comma_list,
    command_line,
    machine_info,
    results_dir,
    typed_methods,
    write_results,
)

from .flops import base_layer_flops, bf16_peak_tflops, extra_flops, flops_ratio
from .jobs import (
    ALL_METHODS,
    bench_job,
    build_benches,
    build_multitask_models,
    checked_methods,
    make_workload,
    parallel_errors,
    parallel_forward,
    pick_device,
    separate_forwards,
)
from .measure import autocast_job, measure_memory, paired_ratio, time_rounds
from .report import check_line, plumbing_line, report_lines
from .rows import job_flops, method_rows, multitask_summary
from .targets import target_checks


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="minilm", choices=MODELS)
    parser.add_argument("--device", default="auto", help="cpu, cuda, or auto (cuda when available)")
    parser.add_argument(
        "--dtype",
        default="fp32",
        choices=("fp32", "bf16"),
        help="fp32, or bf16 autocast (weights and AdamW state stay fp32, as in mixed-precision training)",
    )
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128, help="tokens per sequence")
    parser.add_argument(
        "--pad", action="store_true", help="every other sequence padded: its last quarter masked (default: no padding)"
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="also time every row through torch.compile (a second model per row), side by side with the eager rows",
    )
    parser.add_argument(
        "--compile-mode",
        default=None,
        choices=("default", "reduce-overhead", "max-autotune"),
        help="torch.compile mode of the compiled rows (reduce-overhead: CUDA graphs on a GPU)",
    )
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    parser.add_argument("--methods", default=",".join(ALL_METHODS), help="comma-separated subset of the methods")
    parser.add_argument("--tasks", default="cola,sst2,mrpc,stsb,rte", help="PAL adapters for the Parallel test")
    parser.add_argument(
        "--parallel-configs",
        default="pals,pals_top_layers",
        help="PAL presets for the Parallel test (pals_top_layers leaves the bottom half shared)",
    )
    parser.add_argument("--no-memory", action="store_true", help="skip the memory round")
    parser.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="the device's peak TFLOP/s for MFU (default on a GPU: its data-sheet dense bf16 peak, if known)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke test: batch 8, length 64, 1 warm-up, 2 repeats, 1 thread"
    )
    parser.add_argument("--out-dir", default=str(results_dir("speed")), help="where to write the results")
    parser.add_argument("--name", default=None, help="result file name (default speed_memory_<model>)")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch, args.length, args.warmup, args.repeats = 8, 64, 1, 2
        # One thread unless asked: on a busy machine, threads waiting for each other at every small op
        # can make a tiny model 100x slower, and a smoke test should finish in seconds.
        args.threads = args.threads or 1
    if args.compile and args.warmup < 1:
        parser.error("--compile needs --warmup 1 or more: the first call of a compiled row compiles it")
    # a method may carry settings, e.g. "pals[attention_dropout=0.0]": a row of its own
    args.methods = checked_methods(parser, args.methods)
    args.tasks = comma_list(args.tasks)
    args.parallel_configs = typed_methods(args.parallel_configs)
    return args


def make_jobs(benches, multitask_models, tasks, work, dtype="fp32"):
    """(row, mode) -> a function that runs one measurement (under bf16 autocast if asked)."""
    jobs = {}
    for name, bench in benches.items():
        for mode in bench.modes:
            jobs[(name, mode)] = bench_job(bench, mode, work)
    for preset, model in multitask_models.items():
        jobs[(f"multitask_{preset}", "parallel")] = lambda m=model: parallel_forward(m, tasks, work)
        jobs[(f"multitask_{preset}", "separate")] = lambda m=model: separate_forwards(m, tasks, work)
    if dtype == "bf16":
        return {key: autocast_job(job, work.device) for key, job in jobs.items()}
    return jobs


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    # adapters warns "adapters available but none are activated" whenever it switches adapters.
    logging.getLogger("adapters.model_mixin").setLevel(logging.ERROR)
    load_at_start = os.getloadavg()
    threads = args.threads or len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    device = pick_device(args.device)
    work = make_workload(args.model, args.batch, args.length, device, args.pad)
    config = work.config
    print(
        f"{args.model}: d={config.hidden_size}, {config.num_hidden_layers} layers | "
        f"batch {args.batch} x {args.length} tokens{' (padded)' if args.pad else ''} | {device}, {threads} threads"
    )

    compile_options = None
    if args.compile:
        compile_options = {} if args.compile_mode in (None, "default") else {"mode": args.compile_mode}
    if args.compile and args.compile_mode == "reduce-overhead":
        torch._logging.set_logs(cudagraphs=True)  # why inductor leaves a graph out of CUDA graphs, if it does
    benches = build_benches(args.model, args.methods, device, compile_options)
    multitask_models = build_multitask_models(args.model, args.parallel_configs, args.tasks, device)
    errors = parallel_errors(multitask_models, args.tasks, work)
    jobs = make_jobs(benches, multitask_models, args.tasks, work, args.dtype)

    flops = job_flops(jobs, benches)
    start = time.perf_counter()
    first_calls = {}
    times = time_rounds(jobs, args.warmup, args.repeats, device, start, first_calls)
    memory, memory_method = ({}, None) if args.no_memory else measure_memory(jobs, device, start)

    peak_tflops = args.peak_tflops
    if peak_tflops is None and device.type == "cuda" and args.dtype == "bf16":
        peak_tflops = bf16_peak_tflops(torch.cuda.get_device_name(device))
    rows = method_rows(benches, times, memory, work, first_calls, flops, peak_tflops)
    has_pals = ("pals", "forward") in times
    results = {
        "command": command_line("speed", argv),
        "machine": machine_info(device),
        "settings": {
            "model": args.model,
            "hidden_size": config.hidden_size,
            "num_layers": config.num_hidden_layers,
            "batch": args.batch,
            "length": args.length,
            "padding": "every other sequence, its last quarter" if args.pad else False,
            "compile": args.compile,
            "compile_mode": args.compile_mode,
            "warmup": args.warmup,
            "repeats": args.repeats,
            "threads": threads,
            "device": str(device),
            "dtype": args.dtype,
            "attn_implementation": benches["base"].model.config._attn_implementation,
            "memory_method": memory_method,
            "peak_tflops": peak_tflops,
            "peak_source": "--peak-tflops" if args.peak_tflops else ("data sheet, dense bf16" if peak_tflops else None),
        },
        "flops": {
            "base_layer_per_token": base_layer_flops(config, args.length),
            "extra_per_token": {m: extra_flops(m, config, args.length) for m in args.methods},
            "forward_ratio": {m: flops_ratio(m, config, args.length) for m in args.methods},
        },
        "rows": rows,
        "multitask": multitask_summary(args.parallel_configs, args.tasks, errors, times, memory),
        "checks": target_checks(times, work),
        # How much of the PALs forward is the adapters library's plumbing (present with any adapter)?
        "pals_forward_over_adapters_init_forward": (
            paired_ratio(times, ("pals", "forward"), ("adapters_init", "forward"))["median"] if has_pals else None
        ),
        "elapsed_seconds": time.perf_counter() - start,
        "load_average_1_5_15min": {"start": load_at_start, "end": os.getloadavg()},
    }

    lines = report_lines(results)
    print()
    print("\n".join(lines[lines.index("## Speed") :]).replace("## ", ""))
    for check in results["checks"]:
        print(check_line(check))
        lines.append(f"- **{check_line(check)}**")
    info = plumbing_line(results)
    if info is not None:
        print(info)
        lines.append(f"- {info}")
    print(f"elapsed {results['elapsed_seconds']:.0f}s")
    name = args.name or f"speed_memory_{args.model.replace('-', '_')}"
    json_path, md_path = write_results(name, results, "\n".join(lines), args.out_dir)
    print(f"wrote {json_path} and {md_path}")
    return 0
