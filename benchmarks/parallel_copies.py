"""What the `adapters` library's no-op q/k/v copies cost a model with adapters, measured in one process.

Every self-attention of a model wrapped by `adapters` passes its query, key and value through
``adapters.composition.match_attn_matrices_for_parallel``, which repeats each one to the largest batch of
the three so that a ``Parallel`` block can widen the batch. It calls ``Tensor.repeat`` even when the batches
already match (the usual case, and always outside ``Parallel``), and ``repeat`` with a factor of 1 still copies:
three copies of (batch, heads, length, head size) per layer and call, forward and backward. The library's own
``adjust_tensors_for_parallel`` repeats only when the batches differ.

This script times each row's model with the library's function and with one that returns q, k and v as they
are when their batches match (and calls the library's otherwise), swapped in and out of the library's model
modules round by round, interleaved, after checking that both give the same outputs. It changes nothing
outside its own process: `pals_adapters` does not patch this function (importing it changes nothing for the
library's own methods), so this is a measurement for the library's maintainers and for this project's speed
figures, which all include the copies.

    python benchmarks/parallel_copies.py --threads 1                   # bundled MiniLM, 16 x 128, padded
    python benchmarks/parallel_copies.py --model tiny --rounds 2 --methods pals --name probe   # smoke test
"""

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

import adapters.composition
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import MODELS, comma_list, command_line, machine_info, markdown_table, print_and_write  # noqa: E402
from _speed_jobs import bench_job, build_benches, make_workload, pick_device, set_mode  # noqa: E402
from _speed_measure import paired_ratio, time_rounds  # noqa: E402

LIBRARY = adapters.composition.match_attn_matrices_for_parallel
MODES = ("forward", "train_full")


def without_no_op_copies(query, key, value):
    """q, k and v unchanged when their batches match; the library's repeats otherwise."""
    if query.shape[0] == key.shape[0] == value.shape[0]:
        return query, key, value
    return LIBRARY(query, key, value)


def use(function):
    """Puts ``function`` where the library's model modules look up match_attn_matrices_for_parallel."""
    for name, module in list(sys.modules.items()):
        if name.startswith("adapters.models.") and hasattr(module, "match_attn_matrices_for_parallel"):
            module.match_attn_matrices_for_parallel = function


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="minilm", choices=MODELS)
    parser.add_argument("--device", default="cpu", help="cpu, cuda, or auto (cuda when available)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--methods", type=comma_list, default=["pals", "lora", "houlsby"])
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out-dir", default=None, help="where to write the results (default benchmarks/results)")
    parser.add_argument("--name", default=None, help="result file name (default parallel_copies_<model>)")
    args = parser.parse_args(argv)
    args.device = pick_device(args.device)
    return args


def variant_job(job, function):
    """``job`` with ``function`` in the library's place, set before the clock starts (with the job's own set-up)."""

    def run():
        return job()

    def prepare():
        use(function)
        job.prepare()

    run.prepare = prepare
    return run


def same_outputs(benches, work):
    """Whether each row's forward gives the same last hidden states (bit for bit) with either function."""
    same = {}
    for name, bench in benches.items():
        outputs = []
        for function in (LIBRARY, without_no_op_copies):
            use(function)
            set_mode(bench, "forward")
            with torch.no_grad():
                outputs.append(bench.model(input_ids=work.input_ids, attention_mask=work.attention_mask)[0])
        same[name] = torch.equal(*outputs)
    use(LIBRARY)
    return same


def main(argv=None):
    args = parse_args(argv)
    logging.getLogger("adapters.model_mixin").setLevel(logging.ERROR)  # "none are activated": adapters_init's row
    torch.set_num_threads(args.threads)
    work = make_workload(args.model, args.batch, args.length, args.device, pad=True)
    benches = {k: v for k, v in build_benches(args.model, args.methods, args.device).items() if k != "base"}
    same = same_outputs(benches, work)
    jobs = {}
    for name, bench in benches.items():
        for mode in MODES if "train_full" in bench.modes else MODES[:1]:
            job = bench_job(bench, mode, work)
            jobs[(name, mode, "library")] = variant_job(job, LIBRARY)
            jobs[(name, mode, "no-op copies skipped")] = variant_job(job, without_no_op_copies)
    start = time.perf_counter()
    try:
        times = time_rounds(jobs, args.warmup, args.rounds, args.device, start)
    finally:
        use(LIBRARY)
    rows = []
    for (name, mode, variant), own in times.items():
        if variant == "library":
            continue
        ratio = paired_ratio(times, (name, mode, variant), (name, mode, "library"))
        rows.append(
            {
                "row": name,
                "mode": mode,
                "library_ms": 1000 * statistics.median(times[(name, mode, "library")]),
                "skipped_ms": 1000 * statistics.median(own),
                "ratio": ratio["median"],
                "ratio_min_max": [ratio["min"], ratio["max"]],
                "same_outputs": same[name],
            }
        )
    results = {
        "command": command_line(__file__, argv),
        "machine": machine_info(args.device),
        "settings": {"model": args.model, "batch": args.batch, "length": args.length, "threads": args.threads},
        "rows": rows,
    }
    machine = results["machine"]
    lines = [
        "# The adapters library's no-op q/k/v copies",
        "",
        f"`{results['command']}`",
        "",
        f"{machine['cpu_model']}, {args.device}, {args.threads} thread(s), torch {machine['torch']}, adapters "
        f"{adapters.__version__}; {machine['date']}. {args.model}, batch {args.batch} x {args.length} tokens, every "
        f"other row's last quarter padded. {args.warmup} warm-up and {args.rounds} timed rounds, interleaved; median "
        "ms, and the median (min-max) over rounds of the time without the copies over the time with them.",
        "",
        markdown_table(
            ["row", "step", "library ms", "copies skipped ms", "skipped / library", "same outputs"],
            [
                [
                    r["row"],
                    r["mode"],
                    f"{r['library_ms']:.1f}",
                    f"{r['skipped_ms']:.1f}",
                    "{:.3f} ({:.2f}-{:.2f})".format(r["ratio"], *r["ratio_min_max"]),
                    "yes" if r["same_outputs"] else "NO",
                ]
                for r in rows
            ],
        ),
    ]
    print_and_write(args.name or f"parallel_copies_{args.model}", results, lines, args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
