"""The host's work per forward of a model with adapters, eager and compiled, measured where arithmetic is nil.

On a GPU at BERT-base's batch 32 a PALs forward is launch-bound (docs/benchmarks.md, section 2): the kernels
took 2.2 ms (base) and 3.3 ms (PALs) of a compiled call that took 4.7 and 9.1 ms with CUDA graphs. What the
host does per call does not depend on the width of the model, so it can be measured on any machine with a
model of BERT-base's depth and modules whose arithmetic is negligible (``bert-base-thin``: d=48, 1 x 8
tokens). Rows: the base, the base wrapped by ``adapters.init`` without adapters (the library's per-layer
plumbing), and one task's adapter of each method; each eager and through torch.compile, interleaved round by
round in one process (median time per call, and its ratio to the base's in the same round).

For the compiled rows a second, profiled pass splits a call with torch.profiler's own events: the guard
evaluation that picks the compiled graph ("TorchDynamo Cache Lookup"), the compiled region, and inside it
the graph's code ("## Call CompiledFxGraph"). The profiler adds its own cost to each event, so read those
columns against each other, not against the unprofiled times.

    python benchmarks/host_overhead.py --threads 1                                  # CPU, BERT-base's depth
    python benchmarks/host_overhead.py --device cuda --compile-mode reduce-overhead  # on a GPU, CUDA graphs
    python benchmarks/host_overhead.py --model tiny --rounds 1 --calls 2 --no-compile --name probe
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import adapters
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    MODELS,
    command_line,
    load_model,
    machine_info,
    markdown_table,
    print_and_write,
)
from _speed_jobs import COMPILED, checked_methods, make_workload, method_model, pick_device  # noqa: E402
from _speed_measure import paired_ratio, time_rounds  # noqa: E402

from pals_adapters.harness.training.compiling import prepare_compile  # noqa: E402

# torch.profiler's events of a compiled call (their names in torch 2.11-2.13)
GUARDS_EVENT = "TorchDynamo Cache Lookup"
REGION_PREFIX = "Torch-Compiled Region"
GRAPH_PREFIX = "## Call CompiledFxGraph"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="bert-base-thin", choices=MODELS)
    parser.add_argument("--methods", default="pals,lora,houlsby,peft_lora", help="comma-separated")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, or auto (cuda when available)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--length", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=50, help="forwards per timed job")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds (the first compiles)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-compile", action="store_true", help="eager rows only")
    parser.add_argument(
        "--compile-mode",
        default=None,
        choices=("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
        help="torch.compile's mode (reduce-overhead: CUDA graphs on a GPU)",
    )
    parser.add_argument("--out-dir", default=None, help="where to write the results (default benchmarks/results)")
    parser.add_argument("--name", default="host_overhead")
    args = parser.parse_args(argv)
    if min(args.calls, args.rounds, args.batch, args.length) < 1 or args.warmup < 1:
        parser.error("--calls, --rounds, --batch, --length and --warmup must be at least 1")
    if args.no_compile and args.compile_mode:
        parser.error("--compile-mode needs the compiled rows: leave out --no-compile")
    args.methods = checked_methods(parser, args.methods)
    args.device = pick_device(args.device)
    if args.device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: this torch sees no GPU")
    return args


def build_models(args):
    """Row name -> the model in eval mode (base, base under adapters.init, one adapter of each method)."""
    models = {"base": load_model(args.model)}
    wrapped = load_model(args.model)
    adapters.init(wrapped)
    models["adapters_init"] = wrapped
    for method in args.methods:
        models[method] = method_model(args.model, method)[0]
    return {name: model.to(args.device).eval() for name, model in models.items()}


def make_jobs(args, models, work):
    """Row -> one timed job: ``args.calls`` forwards without gradients; compiled twins unless --no-compile."""
    runners = dict(models)
    if not args.no_compile:
        prepare_compile(num_tasks=1)
        runners.update({name + COMPILED: torch.compile(m, mode=args.compile_mode) for name, m in models.items()})

    def job(runner):
        def run():
            with torch.no_grad():
                for _ in range(args.calls):
                    runner(input_ids=work.input_ids, attention_mask=work.attention_mask)

        return run

    return {name: job(runner) for name, runner in runners.items()}


def compiled_breakdown(events, calls):
    """Microseconds per call of the guard evaluation, the compiled region and the compiled graph, from
    torch.profiler's ``key_averages()`` (None for an event this torch does not record)."""
    totals = {"guards_us": None, "region_us": None, "graph_us": None}
    for event in events:
        key = None
        if event.key == GUARDS_EVENT:
            key = "guards_us"
        elif event.key.startswith(REGION_PREFIX):
            key = "region_us"
        elif event.key.startswith(GRAPH_PREFIX):
            key = "graph_us"
        if key is not None:
            totals[key] = (totals[key] or 0.0) + event.cpu_time_total / calls
    return totals


def profile_compiled(jobs, args):
    """Each compiled job once more under torch.profiler (CPU events), split as compiled_breakdown does."""
    found = {}
    for name, job in jobs.items():
        if name.endswith(COMPILED):
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                job()
            found[name] = compiled_breakdown(prof.key_averages(), args.calls)
    return found


def summarise(times, calls):
    """Row -> median ms per call and the median (min, max) over rounds of its ratio to the base (eager rows)
    or to the compiled base (compiled rows) in the same round."""
    rows = {}
    for name, seconds in times.items():
        ratio = paired_ratio(times, name, "base" + (COMPILED if name.endswith(COMPILED) else ""))
        rows[name] = {
            "ms_per_call": statistics.median(seconds) * 1e3 / calls,
            "x_base": ratio["median"],
            "x_base_range": [ratio["min"], ratio["max"]],
        }
    return rows


def report(args, info, rows, breakdown, argv):
    lines = [
        "# Host work per forward of a model with adapters",
        "",
        f"`{command_line(__file__, argv)}`",
        "",
        f"{info['cpu_model']}, {info['torch_threads']} thread(s), {info['device']}"
        + (f" ({info['gpu']})" if info["gpu"] else "")
        + f"; torch {info['torch']}, transformers {info['transformers']}, adapters {info['adapters']}, peft "
        f"{info['peft']}; {info['date']}. Model {args.model}, batch {args.batch} x {args.length} tokens, no "
        f"gradients; {args.calls} forwards per job, {args.warmup} warm-up and {args.rounds} timed rounds, "
        "interleaved. x base: median (min-max) over rounds of the row's time over the base's in the same round "
        "(compiled rows over the compiled base)"
        + (f"; torch.compile mode {args.compile_mode}" if args.compile_mode else "")
        + ".",
        "",
    ]
    table = []
    for name, row in rows.items():
        low, high = row["x_base_range"]
        cells = [name, f"{row['ms_per_call']:.3f}", f"{row['x_base']:.3f} ({low:.2f}-{high:.2f})"]
        split = breakdown.get(name)
        if split is None:
            cells += ["", "", ""]
        else:
            cells += [f"{split[key]:.0f}" if split[key] is not None else "n/a" for key in split]
        table.append(cells)
    header = ["Row", "ms per call", "x base", "guards µs (profiled)", "compiled region µs", "graph µs"]
    lines.append(markdown_table(header, table))
    return lines


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    work = make_workload(args.model, args.batch, args.length, args.device)
    models = build_models(args)
    jobs = make_jobs(args, models, work)
    first_calls = {}
    times = time_rounds(jobs, args.warmup, args.rounds, args.device, start, first_calls)
    breakdown = profile_compiled(jobs, args)
    rows = summarise(times, args.calls)
    info = machine_info(args.device)
    data = {
        "command": command_line(__file__, argv),
        "machine": info,
        "settings": {k: str(v) if isinstance(v, torch.device) else v for k, v in vars(args).items()},
        "rows": rows,
        "compiled_breakdown": breakdown,
        "first_call_seconds": first_calls,
        "times_seconds": times,
    }
    print_and_write(args.name, data, report(args, info, rows, breakdown, argv), args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
