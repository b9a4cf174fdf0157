"""Speed and memory of PALs and other adapters against the base model, measured in one process.

For the base model and each method: one inference forward (eval, no_grad), one training step
(forward, backward, AdamW step) with the base frozen, and one with the base fine-tuned too,
plus the peak memory of each. Measurements are interleaved round-robin over methods, so noise
from the machine hits every row alike; ratios are taken within a round, then the median.
Then: N task adapters in one `Parallel` forward against N separate forwards.

    python benchmarks/speed_memory.py                       # bundled MiniLM, batch 32 x 128 tokens
    python benchmarks/speed_memory.py --model bert-base --batch 8 --warmup 1 --repeats 3
    python benchmarks/speed_memory.py --quick --model tiny  # smoke test, seconds

Writes benchmarks/results/speed_memory_<model>.{json,md} and prints PASS/FAIL for two targets:
PALs forward <= 1.12x the base model, and a frozen-base PALs training step <= 0.80x a full
fine-tuning step.
"""

import argparse
import ctypes
import gc
import logging
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import adapters
import torch
import torch.nn.functional as F
from adapters import AdapterSetup
from adapters.composition import Parallel
from peft import LoraConfig as PeftLoraConfig
from peft import get_peft_model

import pals_adapters  # noqa: F401  (registers the "pals" presets)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import MODELS, command_line, load_model, machine_info, markdown_table, model_config, write_results  # noqa: E402

ALL_METHODS = ("pals", "pals_no_share", "low_rank", "pals_top", "houlsby", "lora", "peft_lora")
ADAPTER_CONFIGS = {
    "pals": "pals",
    "pals_no_share": "pals_no_share",
    "low_rank": "low_rank",
    "pals_top": "pals_top",
    "houlsby": "double_seq_bn",
    "lora": "lora",
}
FORWARD_TARGET = 1.12  # PALs forward / base forward
FROZEN_TARGET = 0.80  # PALs step with the base frozen / full fine-tuning step

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--model", default="minilm", choices=MODELS)
parser.add_argument("--device", default="auto", help="cpu, cuda, or auto (cuda when available)")
parser.add_argument("--batch", type=int, default=32)
parser.add_argument("--length", type=int, default=128, help="tokens per sequence (no padding)")
parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
parser.add_argument("--repeats", type=int, default=5, help="timed rounds")
parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
parser.add_argument("--methods", default=",".join(ALL_METHODS), help="comma-separated subset of the methods")
parser.add_argument("--tasks", default="cola,sst2,mrpc,stsb,rte", help="PAL adapters for the Parallel test")
parser.add_argument("--parallel-configs", default="pals,pals_top",
                    help="PAL presets for the Parallel test (pals_top leaves the bottom half shared)")
parser.add_argument("--no-memory", action="store_true", help="skip the memory round")
parser.add_argument("--quick", action="store_true", help="smoke test: batch 8, length 64, 1 warm-up, 2 repeats, 1 thread")
parser.add_argument("--out-dir", default=None, help="where to write the results (default benchmarks/results)")
parser.add_argument("--name", default=None, help="result file name (default speed_memory_<model>)")
args = parser.parse_args()
if args.quick:
    args.batch, args.length, args.warmup, args.repeats = 8, 64, 1, 2
    # One thread unless asked: on a busy machine, threads waiting for each other at every small op
    # can make a tiny model 100x slower, and a smoke test should finish in seconds.
    args.threads = args.threads or 1
methods = [m.strip() for m in args.methods.split(",") if m.strip()]
unknown = sorted(set(methods) - set(ALL_METHODS))
if unknown:
    raise SystemExit(f"unknown methods {unknown}; choose from {', '.join(ALL_METHODS)}")
tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
parallel_configs = [c.strip() for c in args.parallel_configs.split(",") if c.strip()]
# adapters warns "adapters available but none are activated" whenever it switches adapters.
logging.getLogger("adapters.model_mixin").setLevel(logging.ERROR)
load_at_start = os.getloadavg()

threads = args.threads or len(os.sched_getaffinity(0))
torch.set_num_threads(threads)
device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                      "cpu" if args.device == "auto" else args.device)
on_cuda = device.type == "cuda"
torch.manual_seed(0)
config = model_config(args.model)
if args.length > config.max_position_embeddings:
    raise SystemExit(f"--length {args.length} exceeds the model's {config.max_position_embeddings} positions")
B, T, d, L = args.batch, args.length, config.hidden_size, config.num_hidden_layers
tokens = B * T
print(f"{args.model}: d={d}, {L} layers | batch {B} x {T} tokens | {device}, {threads} threads")

input_ids = torch.randint(min(1000, config.vocab_size // 2), config.vocab_size, (B, T), device=device)
attention_mask = torch.ones(B, T, dtype=torch.long, device=device)
labels = torch.randint(0, 2, (B,), device=device)

# --- analytic matmul FLOPs per token (forward) ----------------------------------------------------
# Base layer: Q/K/V, attention scores and context, output projection, feed-forward.
# A PAL: V_E, small Q/K/V, small scores and context, V_D. Softmax, LayerNorm, GELU, biases ignored.


def base_layer_flops():
    return 2 * d * 3 * d + 2 * 2 * T * d + 2 * d * d + 2 * 2 * d * config.intermediate_size


def extra_flops(method):
    """Extra forward matmul FLOPs per token of ``method`` over the whole encoder."""
    if method in ("pals", "pals_no_share", "low_rank", "pals_top"):
        pal = adapters.AdapterConfig.load(method)
        ds = pal.projected_size(d)
        per_layer = 2 * 2 * d * ds
        if pal.inner == "attention":
            per_layer += 2 * ds * 3 * ds + 2 * 2 * T * ds
        return len(pal.layer_indices(L)) * per_layer
    if method == "houlsby":
        bottleneck = d // adapters.AdapterConfig.load("double_seq_bn").reduction_factor
        return L * 2 * (2 * 2 * d * bottleneck)  # two bottlenecks per layer, down and up each
    if method in ("lora", "peft_lora"):
        lora = adapters.AdapterConfig.load("lora")
        r, matrices = (lora.r, len(lora.attn_matrices)) if method == "lora" else (8, 2)
        return L * matrices * 2 * 2 * d * r  # A then B, unmerged
    return 0


def flops_ratio(method):
    return 1 + extra_flops(method) / (L * base_layer_flops())


# --- the models: one per method, all alive at once so rounds can interleave -----------------------


class Bench:
    """A model, a task head, and an AdamW optimiser for each training mode."""

    def __init__(self, model, adapter_params, modes):
        self.model = model.to(device)
        self.head = torch.nn.Linear(d, 2).to(device)
        self.modes = modes
        self.params = list(self.model.parameters()) + list(self.head.parameters())
        frozen = list(adapter_params) + list(self.head.parameters())
        self.trainable = {"train_frozen": {id(p) for p in frozen}, "train_full": {id(p) for p in self.params}}
        self.optimizers = {}
        if "train_frozen" in modes:
            self.optimizers["train_frozen"] = torch.optim.AdamW(frozen, lr=1e-5)
        if "train_full" in modes:
            self.optimizers["train_full"] = torch.optim.AdamW(self.params, lr=1e-5)

    def count(self, mode):
        ids = self.trainable[mode]
        return sum(p.numel() for p in self.params if id(p) in ids)


def adapter_model(config_name):
    model = load_model(args.model)
    adapters.init(model)
    model.add_adapter("task", config=config_name)
    model.train_adapter("task")  # activates it and freezes the base; we set requires_grad per step anyway
    return model, [p for p in model.parameters() if p.requires_grad]


benches = {"base": Bench(load_model(args.model), [], ("forward", "train_full"))}
wrapped = load_model(args.model)
adapters.init(wrapped)  # no adapter: the cost of the adapters library's plumbing alone
benches["adapters_init"] = Bench(wrapped, [], ("forward",))
for method in methods:
    if method == "peft_lora":
        model = get_peft_model(load_model(args.model), PeftLoraConfig(r=8, target_modules=["query", "value"]))
        params = [p for p in model.parameters() if p.requires_grad]
    else:
        model, params = adapter_model(ADAPTER_CONFIGS[method])
    benches[method] = Bench(model, params, ("forward", "train_frozen", "train_full"))

# One model per PAL preset, holding one adapter per task, for Parallel(*tasks) vs one forward per task.
multitask_models = {}
for preset in parallel_configs:
    model = load_model(args.model)
    adapters.init(model)
    for task in tasks:
        model.add_adapter(task, config=preset)
    multitask_models[preset] = model.to(device).eval()


# --- one measurement of each kind ----------------------------------------------------------------


def forward(bench):
    bench.model.eval()
    with torch.no_grad():
        bench.model(input_ids=input_ids, attention_mask=attention_mask)


def train_step(bench, mode):
    bench.model.train()
    trainable = bench.trainable[mode]
    for p in bench.params:
        p.requires_grad_(id(p) in trainable)
    hidden = bench.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    loss = F.cross_entropy(bench.head(hidden[:, 0]), labels)
    loss.backward()
    optimizer = bench.optimizers[mode]
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)  # here, so no gradients linger between measurements


def parallel_forward(model):
    with torch.no_grad(), AdapterSetup(Parallel(*tasks)):
        return model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def separate_forwards(model):
    outputs = []
    with torch.no_grad():
        for task in tasks:
            with AdapterSetup(task):
                outputs.append(model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state)
    return outputs


# Parallel must give each task what its own forward gives (the batch is repeated once per task).
parallel_errors = {}
for preset, model in multitask_models.items():
    parallel_errors[preset] = (parallel_forward(model) - torch.cat(separate_forwards(model))).abs().max().item()
    print(f"{preset}: Parallel({', '.join(tasks)}) vs separate forwards: max abs difference "
          f"{parallel_errors[preset]:.2e}")


jobs = {}
for name, bench in benches.items():
    for mode in bench.modes:
        jobs[(name, mode)] = (lambda b=bench: forward(b)) if mode == "forward" else (
            lambda b=bench, m=mode: train_step(b, m)
        )
for preset, model in multitask_models.items():
    jobs[(f"multitask_{preset}", "parallel")] = lambda m=model: parallel_forward(m)
    jobs[(f"multitask_{preset}", "separate")] = lambda m=model: separate_forwards(m)


def sync():
    if on_cuda:
        torch.cuda.synchronize()


# --- timing: round-robin, the starting job rotates each round ------------------------------------

keys = list(jobs)
times = {key: [] for key in keys}
rounds = args.warmup + args.repeats
start = time.perf_counter()
for r in range(rounds):
    order = keys[r % len(keys):] + keys[: r % len(keys)]
    for key in order:
        sync()
        t0 = time.perf_counter()
        jobs[key]()
        sync()
        if r >= args.warmup:
            times[key].append(time.perf_counter() - t0)
    label = "warm-up" if r < args.warmup else "timed"
    print(f"round {r + 1}/{rounds} ({label}) done, {time.perf_counter() - start:.0f}s elapsed", flush=True)

# --- memory: one more round, each job alone, peak over what was allocated before it ---------------
# CPU: resident set size sampled by a thread while the job runs. glibc is told to serve every
# allocation over 128 KiB with mmap and to return freed memory at once, so RSS follows live tensors
# (its defaults keep freed memory around, and the first job would look like the only one that
# allocates). CUDA: torch.cuda.max_memory_allocated.


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_extra_bytes(job):
    gc.collect()
    if on_cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        job()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    if libc is not None:
        libc.malloc_trim(0)
    before = rss_bytes()
    peak = [before]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_bytes())
            time.sleep(0.0005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    job()
    done.set()
    sampler.join()
    return max(peak[0], rss_bytes()) - before


libc = None
memory = {}
memory_method = None
if not args.no_memory:
    if on_cuda:
        memory_method = "torch.cuda.max_memory_allocated - memory_allocated before the job"
    elif Path("/proc/self/statm").exists():
        memory_method = "peak resident set size (sampled every 0.5 ms) - RSS before the job"
        try:
            libc = ctypes.CDLL("libc.so.6")
            libc.mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD: fixed, so freed big blocks are unmapped
            libc.mallopt(-1, 128 * 1024)  # M_TRIM_THRESHOLD
            memory_method += "; glibc mallopt mmap/trim threshold 128 KiB"
        except (OSError, AttributeError):
            libc = None
    if memory_method:
        for key in keys:
            memory[key] = peak_extra_bytes(jobs[key])
        print(f"memory round done, {time.perf_counter() - start:.0f}s elapsed")
    else:
        print("no way to measure memory on this platform: skipped")

# --- summarise ----------------------------------------------------------------------------------


def stats(values):
    values = sorted(values)
    q = statistics.quantiles(values, n=4) if len(values) >= 2 else [values[0]] * 3
    return {"median": statistics.median(values), "min": values[0], "max": values[-1], "q1": q[0], "q3": q[2]}


def paired_ratio(key, reference):
    """Median and range over rounds of time[key] / time[reference] within the same round."""
    ratios = [a / b for a, b in zip(times[key], times[reference])]
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}


def optimizer_state_bytes(bench, mode):
    total = 0
    for state in bench.optimizers[mode].state.values():
        total += sum(v.numel() * v.element_size() for v in state.values() if torch.is_tensor(v) and v.dim() > 0)
    return total


def mb(n):
    return n / 2**20


rows = []
for name, bench in benches.items():
    row = {"method": name, "params_total": sum(p.numel() for p in bench.params)}
    if name not in ("base", "adapters_init"):
        row["forward_flops_ratio"] = flops_ratio(name)
    for mode in bench.modes:
        key = (name, mode)
        reference = ("base", "forward") if mode == "forward" else ("base", "train_full")
        entry = {
            "seconds": stats(times[key]),
            "times": times[key],
            "tokens_per_second": tokens / statistics.median(times[key]),
            "ratio_to_base": paired_ratio(key, reference),
            "ratio_reference": f"base {reference[1]}",
        }
        if mode != "forward":
            entry["trainable_params"] = bench.count(mode)
            entry["optimizer_state_mb"] = mb(optimizer_state_bytes(bench, mode))
        if mode == "train_frozen":
            entry["ratio_to_own_full_step"] = paired_ratio(key, (name, "train_full"))
        if key in memory:
            entry["peak_extra_mb"] = mb(memory[key])
        row[mode] = entry
    rows.append(row)

multi = {"tasks": tasks}
for preset in multitask_models:
    name = f"multitask_{preset}"
    entry = {
        "max_abs_difference": parallel_errors[preset],
        "parallel": {"seconds": stats(times[(name, "parallel")])},
        "separate": {"seconds": stats(times[(name, "separate")])},
        "parallel_over_separate": paired_ratio((name, "parallel"), (name, "separate")),
    }
    for mode in ("parallel", "separate"):
        if (name, mode) in memory:
            entry[mode]["peak_extra_mb"] = mb(memory[(name, mode)])
    multi[preset] = entry

checks = []
if "pals" in benches:
    fwd = paired_ratio(("pals", "forward"), ("base", "forward"))["median"]
    checks.append(
        {
            "what": "PALs forward / base forward",
            "value": fwd,
            "target": f"<= {FORWARD_TARGET}",
            "flops_estimate": flops_ratio("pals"),
            "passed": fwd <= FORWARD_TARGET,
        }
    )
    frozen = paired_ratio(("pals", "train_frozen"), ("base", "train_full"))["median"]
    checks.append(
        {
            "what": "PALs training step with the base frozen / full fine-tuning step (base, all weights)",
            "value": frozen,
            "target": f"<= {FROZEN_TARGET}",
            "passed": frozen <= FROZEN_TARGET,
        }
    )

# How much of the PALs forward is the adapters library's plumbing (present with any adapter)?
pals_over_plumbing = (
    paired_ratio(("pals", "forward"), ("adapters_init", "forward"))["median"] if "pals" in benches else None
)

machine = machine_info(device)
results = {
    "command": command_line(),
    "machine": machine,
    "settings": {
        "model": args.model,
        "hidden_size": d,
        "num_layers": L,
        "batch": B,
        "length": T,
        "padding": False,
        "warmup": args.warmup,
        "repeats": args.repeats,
        "threads": threads,
        "device": str(device),
        "attn_implementation": benches["base"].model.config._attn_implementation,
        "memory_method": memory_method,
    },
    "flops": {
        "base_layer_per_token": base_layer_flops(),
        "extra_per_token": {m: extra_flops(m) for m in methods},
        "forward_ratio": {m: flops_ratio(m) for m in methods},
    },
    "rows": rows,
    "multitask": multi,
    "checks": checks,
    "pals_forward_over_adapters_init_forward": pals_over_plumbing,
    "elapsed_seconds": time.perf_counter() - start,
    "load_average_1_5_15min": {"start": load_at_start, "end": os.getloadavg()},
}

# --- print and tabulate ---------------------------------------------------------------------------


def ms(entry):
    s = entry["seconds"]
    return f"{1000 * s['median']:.0f} ({1000 * s['min']:.0f}-{1000 * s['max']:.0f})"


def ratio(entry, key="ratio_to_base"):
    r = entry[key]
    return f"{r['median']:.3f} ({r['min']:.2f}-{r['max']:.2f})"


speed_header = ["Method", "Forward ms", "x base", "FLOPs x", "Frozen-base step ms", "x full FT",
                "Full FT step ms", "x full FT", "Forward tok/s"]
speed_rows = []
for row in rows:
    fwd, frozen, full = row.get("forward"), row.get("train_frozen"), row.get("train_full")
    speed_rows.append(
        [
            row["method"] if row["method"] != "base" else "base (full FT = base, all trainable)",
            ms(fwd) if fwd else "",
            ratio(fwd) if fwd else "",
            f"{row['forward_flops_ratio']:.3f}" if "forward_flops_ratio" in row else "1.000",
            ms(frozen) if frozen else "",
            ratio(frozen) if frozen else "",
            ms(full) if full else "",
            ratio(full) if full else "",
            f"{fwd['tokens_per_second']:.0f}" if fwd else "",
        ]
    )
memory_header = ["Method", "Params", "Forward peak MB", "Frozen: trainable", "Frozen: peak MB", "Frozen: Adam MB",
                 "Full: trainable", "Full: peak MB", "Full: Adam MB"]
memory_rows = []
for row in rows:
    cells = [row["method"], f"{row['params_total'] / 1e6:.2f}M"]
    cells.append(f"{row['forward']['peak_extra_mb']:.0f}" if "peak_extra_mb" in row.get("forward", {}) else "")
    for mode in ("train_frozen", "train_full"):
        e = row.get(mode)
        if e is None:
            cells += ["", "", ""]
            continue
        cells += [
            f"{e['trainable_params'] / 1e6:.3f}M",
            f"{e['peak_extra_mb']:.0f}" if "peak_extra_mb" in e else "",
            f"{e['optimizer_state_mb']:.1f}",
        ]
    memory_rows.append(cells)

lines = [
    f"# Speed and memory: {args.model}",
    "",
    f"`{results['command']}`",
    "",
    f"{machine['cpu_model']}, {threads} threads, {device}; torch {machine['torch']}, "
    f"transformers {machine['transformers']}, adapters {machine['adapters']}, peft {machine['peft']}; {machine['date']}. "
    f"Load average (1 min) {load_at_start[0]:.1f} at the start, {results['load_average_1_5_15min']['end'][0]:.1f} at the end "
    f"on {machine['cpu_count']} cores (other work on the machine shows up as spread).",
    f"{args.model}: d={d}, {L} layers, attention `{results['settings']['attn_implementation']}`. "
    f"Batch {B} x {T} tokens, no padding. {args.warmup} warm-up + {args.repeats} timed rounds, "
    "round-robin over all rows. Times: median (min-max). Ratios: median (min-max) over rounds of the "
    "ratio within a round; forward against the base forward, training steps against the base model's "
    "full fine-tuning step. FLOPs x: analytic matmul FLOPs of the forward over the base's.",
    "",
    "## Speed",
    "",
    markdown_table(speed_header, speed_rows),
    "",
    "## Memory",
    "",
    f"Peak extra memory of each job over what was allocated before it ({memory_method or 'not measured'}); "
    "parameters and AdamW state persist between steps and are not in the peak. "
    "'Adam MB' is the optimizer state of that mode.",
    "",
    markdown_table(memory_header, memory_rows),
    "",
    f"## Multi-task inference: {len(tasks)} task adapters ({', '.join(tasks)})",
    "",
    f"One forward with `Parallel({', '.join(tasks)})` against {len(tasks)} separate forwards (one per task) "
    "on the same batch. Parallel repeats the batch at the first layer holding one of the adapters, so only "
    "the layers below it (with `pals_top`: the bottom half) run once for all tasks.",
    "",
    markdown_table(
        ["Adapters", "Parallel ms", f"{len(tasks)} separate ms", "Parallel / separate", "Parallel peak MB",
         "Separate peak MB"],
        [
            [
                preset,
                ms(m["parallel"]),
                ms(m["separate"]),
                ratio(m, "parallel_over_separate"),
                f"{m['parallel'].get('peak_extra_mb', float('nan')):.0f}",
                f"{m['separate'].get('peak_extra_mb', float('nan')):.0f}",
            ]
            for preset, m in multi.items()
            if preset != "tasks"
        ],
    ),
    "",
    "## Targets",
    "",
]
print()
print("\n".join(lines[lines.index("## Speed"):]).replace("## ", ""))
for c in checks:
    verdict = "PASS" if c["passed"] else "FAIL"
    extra = f" (matmul FLOPs say {c['flops_estimate']:.3f}x)" if "flops_estimate" in c else ""
    line = f"{verdict}: {c['what']} = {c['value']:.3f}x, target {c['target']}x{extra}"
    print(line)
    lines.append(f"- **{line}**")
if pals_over_plumbing is not None:
    line = (f"info: PALs forward / forward of the same model wrapped by adapters.init without adapters = "
            f"{pals_over_plumbing:.3f}x (the PAL modules alone, without the library's per-layer plumbing)")
    print(line)
    lines.append(f"- {line}")
print(f"elapsed {results['elapsed_seconds']:.0f}s")

name = args.name or f"speed_memory_{args.model.replace('-', '_')}"
kwargs = {"out_dir": args.out_dir} if args.out_dir else {}
json_path, md_path = write_results(name, results, "\n".join(lines), **kwargs)
print(f"wrote {json_path} and {md_path}")
