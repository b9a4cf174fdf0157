"""Speed and memory of PALs and other adapters against the base model, measured in one process.

For the base model and each method: one inference forward (eval, no_grad), one training step
(forward, backward, AdamW step) with the base frozen, and one with the base fine-tuned too,
plus the peak memory of each. Measurements are interleaved round-robin over methods, so noise
from the machine hits every row alike; ratios are taken within a round, then the median.
Then: N task adapters in one `Parallel` forward against N separate forwards.
Methods are named as the harness names them (`pals-bench train --method`).

    python benchmarks/speed_memory.py                       # bundled MiniLM, batch 32 x 128 tokens
    python benchmarks/speed_memory.py --model bert-base --batch 8 --warmup 1 --repeats 3
    python benchmarks/speed_memory.py --quick --model tiny  # smoke test, seconds
    python benchmarks/speed_memory.py --threads 1 --compile # + every row compiled (torch.compile, inductor)

Writes benchmarks/results/speed_memory_<model>.{json,md} and prints PASS/FAIL for three targets,
for the eager rows and (with --compile) for the compiled rows against the compiled base:
PALs forward <= 1.09x the base forward, a PALs full fine-tuning step <= 1.12x the base's, and a
frozen-base PALs training step <= 0.72x the base's full fine-tuning step.
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
from dataclasses import dataclass
from pathlib import Path

import adapters
import torch
import torch.nn.functional as F
from adapters import AdapterSetup
from adapters.composition import Parallel
from peft import get_peft_model

import pals_adapters  # noqa: F401  (registers the "pals" presets)
from pals_adapters.harness.methods.peft_lora import DEFAULTS as PEFT_LORA_DEFAULTS
from pals_adapters.harness.methods.peft_lora import lora_config as peft_lora_config
from pals_adapters.harness.methods.registry import METHODS
from pals_adapters.harness.training.compiling import prepare_compile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    MODELS,
    comma_list,
    command_line,
    load_model,
    machine_info,
    markdown_table,
    model_config,
    typed_methods,
    verdict_line,
    write_results,
)

ALL_METHODS = ("pals", "pals_no_share", "low_rank", "pals_top_layers", "houlsby", "lora", "peft_lora")
PAL_METHODS = ("pals", "pals_no_share", "low_rank", "pals_top_layers")
FORWARD_TARGET = 1.09  # PALs forward / base forward
FULL_STEP_TARGET = 1.12  # PALs full fine-tuning step / the base's full fine-tuning step
FROZEN_TARGET = 0.72  # PALs step with the base frozen / the base's full fine-tuning step
REFERENCE_ROWS = ("base", "adapters_init")  # rows that are not methods
COMPILED = " (compiled)"  # suffix of a row timed through torch.compile


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
        "--quick", action="store_true", help="smoke test: batch 8, length 64, 1 warm-up, 2 repeats, 1 thread"
    )
    parser.add_argument("--out-dir", default=None, help="where to write the results (default benchmarks/results)")
    parser.add_argument("--name", default=None, help="result file name (default speed_memory_<model>)")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch, args.length, args.warmup, args.repeats = 8, 64, 1, 2
        # One thread unless asked: on a busy machine, threads waiting for each other at every small op
        # can make a tiny model 100x slower, and a smoke test should finish in seconds.
        args.threads = args.threads or 1
    if args.compile and args.warmup < 1:
        parser.error("--compile needs --warmup 1 or more: the first call of a compiled row compiles it")
    args.methods = typed_methods(args.methods)
    unknown = sorted(set(args.methods) - set(ALL_METHODS))
    if unknown:
        parser.error(f"unknown methods {unknown}; choose from {', '.join(ALL_METHODS)}")
    args.tasks = comma_list(args.tasks)
    args.parallel_configs = typed_methods(args.parallel_configs)
    return args


def pick_device(name):
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


@dataclass
class Workload:
    """The model's config and the one batch every measurement runs on."""

    config: object
    device: torch.device
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor

    @property
    def tokens(self):
        return self.input_ids.numel()

    @property
    def length(self):
        return self.input_ids.shape[1]


def make_workload(model_name, batch, length, device, pad=False):
    torch.manual_seed(0)
    config = model_config(model_name)
    if length > config.max_position_embeddings:
        raise SystemExit(f"--length {length} exceeds the model's {config.max_position_embeddings} positions")
    low = min(1000, config.vocab_size // 2)
    attention_mask = torch.ones(batch, length, dtype=torch.long, device=device)
    if pad:
        attention_mask[1::2, length - length // 4 :] = 0
    return Workload(
        config=config,
        device=device,
        input_ids=torch.randint(low, config.vocab_size, (batch, length), device=device),
        attention_mask=attention_mask,
        labels=torch.randint(0, 2, (batch,), device=device),
    )


# --- analytic matmul FLOPs per token (forward) ----------------------------------------------------
# Base layer: Q/K/V, attention scores and context, output projection, feed-forward.
# A PAL: V_E, small Q/K/V, small scores and context, V_D. Softmax, LayerNorm, GELU, biases ignored.


def base_layer_flops(config, T):
    d = config.hidden_size
    return 2 * d * 3 * d + 2 * 2 * T * d + 2 * d * d + 2 * 2 * d * config.intermediate_size


def extra_flops(method, config, T):
    """Extra forward matmul FLOPs per token of ``method`` over the whole encoder."""
    d, L = config.hidden_size, config.num_hidden_layers
    if method in PAL_METHODS:
        pal = adapters.AdapterConfig.load(METHODS[method].adapter_config)
        ds = pal.projected_size(d)
        per_layer = 2 * 2 * d * ds
        if pal.inner == "attention":
            per_layer += 2 * ds * 3 * ds + 2 * 2 * T * ds
        return len(pal.layer_indices(L)) * per_layer
    if method == "houlsby":
        bottleneck = d // adapters.AdapterConfig.load(METHODS["houlsby"].adapter_config).reduction_factor
        return L * 2 * (2 * 2 * d * bottleneck)  # two bottlenecks per layer, down and up each
    if method == "lora":
        lora = adapters.AdapterConfig.load(METHODS["lora"].adapter_config)
        return L * len(lora.attn_matrices) * 2 * 2 * d * lora.r  # A then B, unmerged
    if method == "peft_lora":
        return L * len(PEFT_LORA_DEFAULTS["target_modules"]) * 2 * 2 * d * PEFT_LORA_DEFAULTS["r"]
    return 0


def flops_ratio(method, config, T):
    return 1 + extra_flops(method, config, T) / (config.num_hidden_layers * base_layer_flops(config, T))


# --- the models: one per method, all alive at once so rounds can interleave -----------------------


class Bench:
    """A model, a task head, and an AdamW optimiser for each training mode."""

    def __init__(self, model, adapter_params, modes, device, compile_options=None):
        self.model = model.to(device)
        # what a measurement calls: the model, or its torch.compile wrapper (compiled on its first call)
        self.runner = self.model if compile_options is None else torch.compile(self.model, **compile_options)
        self.head = torch.nn.Linear(model.config.hidden_size, 2).to(device)
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


def method_model(model_name, method):
    """The base model with one task's parameters of ``method``, and those parameters."""
    if method == "peft_lora":
        model = get_peft_model(load_model(model_name), peft_lora_config({}))
        return model, [p for p in model.parameters() if p.requires_grad]
    model = load_model(model_name)
    adapters.init(model)
    model.add_adapter("task", config=METHODS[method].adapters_config())
    model.train_adapter("task")  # activates it and freezes the base; we set requires_grad per step anyway
    return model, [p for p in model.parameters() if p.requires_grad]


def build_benches(model_name, methods, device, compile_options=None):
    """A bench per row; with ``compile_options`` (torch.compile's keywords) the same rows again, compiled."""
    variants = [("", None)] + ([(COMPILED, compile_options)] if compile_options is not None else [])
    benches = {}
    for suffix, options in variants:
        benches["base" + suffix] = Bench(load_model(model_name), [], ("forward", "train_full"), device, options)
        if not suffix:
            wrapped = load_model(model_name)
            adapters.init(wrapped)  # no adapter: the cost of the adapters library's plumbing alone
            benches["adapters_init"] = Bench(wrapped, [], ("forward",), device)
        for method in methods:
            model, params = method_model(model_name, method)
            benches[method + suffix] = Bench(model, params, ("forward", "train_frozen", "train_full"), device, options)
    if compile_options is not None:
        # As the harness compiles (dropout from torch's own random kernels); each compiled model keeps a
        # graph per mode (eval, and the two training modes' requires_grad).
        prepare_compile(num_tasks=4)
    return benches


def build_multitask_models(model_name, presets, tasks, device):
    """One model per PAL preset, holding one adapter per task, for Parallel(*tasks) vs one forward per task."""
    models = {}
    for preset in presets:
        model = load_model(model_name)
        adapters.init(model)
        for task in tasks:
            model.add_adapter(task, config=preset)
        models[preset] = model.to(device).eval()
    return models


# --- one measurement of each kind ----------------------------------------------------------------


def forward(bench, work):
    bench.model.eval()
    for p in bench.params:  # the same flags on every call: a compiled row then always reuses one graph
        p.requires_grad_(False)
    with torch.no_grad():
        bench.runner(input_ids=work.input_ids, attention_mask=work.attention_mask)


def train_step(bench, mode, work):
    bench.model.train()
    trainable = bench.trainable[mode]
    for p in bench.params:
        p.requires_grad_(id(p) in trainable)
    hidden = bench.runner(input_ids=work.input_ids, attention_mask=work.attention_mask).last_hidden_state
    loss = F.cross_entropy(bench.head(hidden[:, 0]), work.labels)
    loss.backward()
    optimizer = bench.optimizers[mode]
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)  # here, so no gradients linger between measurements


def parallel_forward(model, tasks, work):
    with torch.no_grad(), AdapterSetup(Parallel(*tasks)):
        return model(input_ids=work.input_ids, attention_mask=work.attention_mask).last_hidden_state


def separate_forwards(model, tasks, work):
    outputs = []
    with torch.no_grad():
        for task in tasks:
            with AdapterSetup(task):
                outputs.append(model(input_ids=work.input_ids, attention_mask=work.attention_mask).last_hidden_state)
    return outputs


def parallel_errors(multitask_models, tasks, work):
    """Parallel must give each task what its own forward gives (the batch is repeated once per task)."""
    errors = {}
    for preset, model in multitask_models.items():
        parallel = parallel_forward(model, tasks, work)
        errors[preset] = (parallel - torch.cat(separate_forwards(model, tasks, work))).abs().max().item()
        print(f"{preset}: Parallel({', '.join(tasks)}) vs separate forwards: max abs difference {errors[preset]:.2e}")
    return errors


def make_jobs(benches, multitask_models, tasks, work, dtype="fp32"):
    """(row, mode) -> a function that runs one measurement (under bf16 autocast if asked)."""
    jobs = {}
    for name, bench in benches.items():
        for mode in bench.modes:
            if mode == "forward":
                jobs[(name, mode)] = lambda b=bench: forward(b, work)
            else:
                jobs[(name, mode)] = lambda b=bench, m=mode: train_step(b, m, work)
    for preset, model in multitask_models.items():
        jobs[(f"multitask_{preset}", "parallel")] = lambda m=model: parallel_forward(m, tasks, work)
        jobs[(f"multitask_{preset}", "separate")] = lambda m=model: separate_forwards(m, tasks, work)
    if dtype == "bf16":
        return {key: _autocast(job, work.device) for key, job in jobs.items()}
    return jobs


def _autocast(job, device):
    def run():
        with torch.autocast(device.type, dtype=torch.bfloat16):
            return job()

    return run


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


# --- timing: round-robin, the starting job rotates each round ------------------------------------


def time_rounds(jobs, warmup, repeats, device, start, first_calls=None):
    """Seconds of each job in each timed round; ``first_calls`` receives each job's first (warm-up) call,
    which for a compiled row includes compiling it."""
    keys = list(jobs)
    times = {key: [] for key in keys}
    rounds = warmup + repeats
    for r in range(rounds):
        order = keys[r % len(keys) :] + keys[: r % len(keys)]
        for key in order:
            sync(device)
            t0 = time.perf_counter()
            jobs[key]()
            sync(device)
            if r >= warmup:
                times[key].append(time.perf_counter() - t0)
            elif r == 0 and first_calls is not None:
                first_calls[key] = time.perf_counter() - t0
        label = "warm-up" if r < warmup else "timed"
        print(f"round {r + 1}/{rounds} ({label}) done, {time.perf_counter() - start:.0f}s elapsed", flush=True)
    return times


# --- memory: one more round, each job alone, peak over what was allocated before it ---------------
# CPU: resident set size sampled by a thread while the job runs. glibc is told to serve every
# allocation over 128 KiB with mmap and to return freed memory at once, so RSS follows live tensors
# (its defaults keep freed memory around, and the first job would look like the only one that
# allocates). CUDA: torch.cuda.max_memory_allocated.


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def cuda_peak_extra_bytes(job):
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    job()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def rss_peak_extra_bytes(job, libc):
    gc.collect()
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


def glibc_returning_memory():
    """glibc with fixed mmap/trim thresholds, so freed big blocks go back at once; None elsewhere."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD: fixed, so freed big blocks are unmapped
        libc.mallopt(-1, 128 * 1024)  # M_TRIM_THRESHOLD
        return libc
    except (OSError, AttributeError):
        return None


def measure_memory(jobs, device, start):
    """(peak extra bytes per job, how it was measured); ({}, None) where there is no way to measure."""
    if device.type == "cuda":
        method, peak = "torch.cuda.max_memory_allocated - memory_allocated before the job", cuda_peak_extra_bytes
    elif Path("/proc/self/statm").exists():
        method = "peak resident set size (sampled every 0.5 ms) - RSS before the job"
        libc = glibc_returning_memory()
        if libc is not None:
            method += "; glibc mallopt mmap/trim threshold 128 KiB"

        def peak(job):
            return rss_peak_extra_bytes(job, libc)
    else:
        print("no way to measure memory on this platform: skipped")
        return {}, None
    memory = {key: peak(job) for key, job in jobs.items()}
    print(f"memory round done, {time.perf_counter() - start:.0f}s elapsed")
    return memory, method


# --- summarise ----------------------------------------------------------------------------------


def stats(values):
    values = sorted(values)
    q = statistics.quantiles(values, n=4) if len(values) >= 2 else [values[0]] * 3
    return {"median": statistics.median(values), "min": values[0], "max": values[-1], "q1": q[0], "q3": q[2]}


def paired_ratio(times, key, reference):
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


def variant_of(name):
    """(method, suffix): ``pals (compiled)`` -> (``pals``, COMPILED); ``pals`` -> (``pals``, "")."""
    return (name[: -len(COMPILED)], COMPILED) if name.endswith(COMPILED) else (name, "")


def method_rows(benches, times, memory, work, first_calls=None):
    """A row per bench; a compiled row's ratios are taken against the compiled base."""
    rows = []
    first_calls = first_calls or {}
    for name, bench in benches.items():
        method, suffix = variant_of(name)
        row = {"method": name, "compiled": bool(suffix), "params_total": sum(p.numel() for p in bench.params)}
        if method not in REFERENCE_ROWS:
            row["forward_flops_ratio"] = flops_ratio(method, work.config, work.length)
        for mode in bench.modes:
            key = (name, mode)
            base = "base" + suffix
            reference = (base, "forward") if mode == "forward" else (base, "train_full")
            entry = {
                "seconds": stats(times[key]),
                "times": times[key],
                "tokens_per_second": work.tokens / statistics.median(times[key]),
                "ratio_to_base": paired_ratio(times, key, reference),
                "ratio_reference": f"{base} {reference[1]}",
            }
            if key in first_calls:
                entry["first_call_seconds"] = first_calls[key]  # compiling included for a compiled row
            if mode != "forward":
                entry["trainable_params"] = bench.count(mode)
                entry["optimizer_state_mb"] = mb(optimizer_state_bytes(bench, mode))
            if mode == "train_frozen":
                entry["ratio_to_own_full_step"] = paired_ratio(times, key, (name, "train_full"))
            if key in memory:
                entry["peak_extra_mb"] = mb(memory[key])
            row[mode] = entry
        rows.append(row)
    return rows


def multitask_summary(presets, tasks, errors, times, memory):
    multi = {"tasks": tasks}
    for preset in presets:
        name = f"multitask_{preset}"
        entry = {
            "max_abs_difference": errors[preset],
            "parallel": {"seconds": stats(times[(name, "parallel")])},
            "separate": {"seconds": stats(times[(name, "separate")])},
            "parallel_over_separate": paired_ratio(times, (name, "parallel"), (name, "separate")),
        }
        for mode in ("parallel", "separate"):
            if (name, mode) in memory:
                entry[mode]["peak_extra_mb"] = mb(memory[(name, mode)])
        multi[preset] = entry
    return multi


def target_checks(times, work):
    """The three targets, for the eager rows and the compiled ones, when PALs were measured."""
    checks = []
    for suffix in ("", COMPILED):
        pals, base = "pals" + suffix, "base" + suffix
        if (pals, "forward") not in times:
            continue
        which = "compiled " if suffix else ""
        ratios = [
            (f"{which}PALs forward / {which}base forward", (pals, "forward"), (base, "forward"), FORWARD_TARGET),
            (
                f"{which}PALs full fine-tuning step / {which}base full fine-tuning step",
                (pals, "train_full"),
                (base, "train_full"),
                FULL_STEP_TARGET,
            ),
            (
                f"{which}PALs training step with the base frozen / {which}full fine-tuning step (base, all weights)",
                (pals, "train_frozen"),
                (base, "train_full"),
                FROZEN_TARGET,
            ),
        ]
        for what, key, reference, target in ratios:
            value = paired_ratio(times, key, reference)["median"]
            check = {"what": what, "value": value, "target": f"<= {target}", "passed": value <= target}
            if key[1] == "forward":
                check["flops_estimate"] = flops_ratio("pals", work.config, work.length)
            checks.append(check)
    return checks


# --- tables ---------------------------------------------------------------------------------------


def ms(entry):
    s = entry["seconds"]
    return f"{1000 * s['median']:.0f} ({1000 * s['min']:.0f}-{1000 * s['max']:.0f})"


def ratio(entry, key="ratio_to_base"):
    r = entry[key]
    return f"{r['median']:.3f} ({r['min']:.2f}-{r['max']:.2f})"


def speed_table(rows):
    header = [
        "Method",
        "Forward ms",
        "x base",
        "FLOPs x",
        "Frozen-base step ms",
        "x full FT",
        "Full FT step ms",
        "x full FT",
        "Forward tok/s",
    ]
    cells = []
    for row in rows:
        fwd, frozen, full = row.get("forward"), row.get("train_frozen"), row.get("train_full")
        cells.append(
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
    return markdown_table(header, cells)


def memory_table(rows):
    header = [
        "Method",
        "Params",
        "Forward peak MB",
        "Frozen: trainable",
        "Frozen: peak MB",
        "Frozen: Adam MB",
        "Full: trainable",
        "Full: peak MB",
        "Full: Adam MB",
    ]
    cells = []
    for row in rows:
        line = [row["method"], f"{row['params_total'] / 1e6:.2f}M"]
        line.append(f"{row['forward']['peak_extra_mb']:.0f}" if "peak_extra_mb" in row.get("forward", {}) else "")
        for mode in ("train_frozen", "train_full"):
            e = row.get(mode)
            if e is None:
                line += ["", "", ""]
                continue
            line += [
                f"{e['trainable_params'] / 1e6:.3f}M",
                f"{e['peak_extra_mb']:.0f}" if "peak_extra_mb" in e else "",
                f"{e['optimizer_state_mb']:.1f}",
            ]
        cells.append(line)
    return markdown_table(header, cells)


def multitask_table(multi):
    n = len(multi["tasks"])
    header = [
        "Adapters",
        "Parallel ms",
        f"{n} separate ms",
        "Parallel / separate",
        "Parallel peak MB",
        "Separate peak MB",
    ]
    cells = [
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
    ]
    return markdown_table(header, cells)


def padding_words(settings):
    padding = settings.get("padding")
    return f"padding: {padding}" if padding else "no padding"


def compile_words(settings):
    """What the compiled rows are, for the report; empty without them."""
    if not settings.get("compile"):
        return ""
    mode = settings.get("compile_mode") or "default"
    return (
        f" Rows marked (compiled): the same model through torch.compile (inductor, mode {mode}), its first call "
        "(compiling) untimed; their ratios are against the compiled base."
    )


def report_lines(results):
    """The Markdown report up to its "Targets" heading (the target lines are added as they print)."""
    machine, s, multi = results["machine"], results["settings"], results["multitask"]
    load = results["load_average_1_5_15min"]
    tasks = ", ".join(multi["tasks"])
    gpu = f" ({machine['gpu']})" if machine.get("gpu") else ""
    return [
        f"# Speed and memory: {s['model']}",
        "",
        f"`{results['command']}`",
        "",
        f"{machine['cpu_model']}, {s['threads']} threads, {s['device']}{gpu}, {s.get('dtype', 'fp32')}; "
        f"torch {machine['torch']}, "
        f"transformers {machine['transformers']}, adapters {machine['adapters']}, peft {machine['peft']}; "
        f"{machine['date']}. Load average (1 min) {load['start'][0]:.1f} at the start, {load['end'][0]:.1f} at the end "
        f"on {machine['cpu_count']} cores (other work on the machine shows up as spread).",
        f"{s['model']}: d={s['hidden_size']}, {s['num_layers']} layers, attention `{s['attn_implementation']}`. "
        f"Batch {s['batch']} x {s['length']} tokens, {padding_words(s)}. {s['warmup']} warm-up + {s['repeats']} timed "
        "rounds, "
        "round-robin over all rows. Times: median (min-max). Ratios: median (min-max) over rounds of the "
        "ratio within a round; forward against the base forward, training steps against the base model's "
        "full fine-tuning step. FLOPs x: analytic matmul FLOPs of the forward over the base's." + compile_words(s),
        "",
        "## Speed",
        "",
        speed_table(results["rows"]),
        "",
        "## Memory",
        "",
        f"Peak extra memory of each job over what was allocated before it ({s['memory_method'] or 'not measured'}); "
        "parameters and AdamW state persist between steps and are not in the peak. "
        "'Adam MB' is the optimizer state of that mode.",
        "",
        memory_table(results["rows"]),
        "",
        f"## Multi-task inference: {len(multi['tasks'])} task adapters ({tasks})",
        "",
        f"One forward with `Parallel({tasks})` against {len(multi['tasks'])} separate forwards (one per task) "
        "on the same batch. Parallel repeats the batch at the first layer holding one of the adapters, so only "
        "the layers below it (with `pals_top_layers`: the bottom half) run once for all tasks.",
        "",
        multitask_table(multi),
        "",
        "## Targets",
        "",
    ]


def check_line(check):
    extra = f" (matmul FLOPs say {check['flops_estimate']:.3f}x)" if "flops_estimate" in check else ""
    return verdict_line(check["passed"], f"{check['what']} = {check['value']:.3f}x, target {check['target']}x{extra}")


def plumbing_line(results):
    """How much of the PALs forward is the adapters library's own plumbing; None without PALs."""
    plumbing = results["pals_forward_over_adapters_init_forward"]
    if plumbing is None:
        return None
    return (
        f"info: PALs forward / forward of the same model wrapped by adapters.init without adapters = "
        f"{plumbing:.3f}x (the PAL modules alone, without the library's per-layer plumbing)"
    )


# --- the benchmark, top to bottom -----------------------------------------------------------------


def main(argv=None):
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
    benches = build_benches(args.model, args.methods, device, compile_options)
    multitask_models = build_multitask_models(args.model, args.parallel_configs, args.tasks, device)
    errors = parallel_errors(multitask_models, args.tasks, work)
    jobs = make_jobs(benches, multitask_models, args.tasks, work, args.dtype)

    start = time.perf_counter()
    first_calls = {}
    times = time_rounds(jobs, args.warmup, args.repeats, device, start, first_calls)
    memory, memory_method = ({}, None) if args.no_memory else measure_memory(jobs, device, start)

    rows = method_rows(benches, times, memory, work, first_calls)
    has_pals = ("pals", "forward") in times
    results = {
        "command": command_line(__file__, argv),
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


if __name__ == "__main__":
    sys.exit(main())
