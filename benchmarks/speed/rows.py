"""What speed.step reports of its measurements: a row per model with its times, ratios, FLOP rates and
memory, and the Parallel-against-separate summary."""

import statistics

import torch

from .flops import count_flops, flops_ratio
from .jobs import COMPILED
from .measure import paired_ratio

REFERENCE_ROWS = ("base", "adapters_init")  # rows that are not methods


def stats(values):
    values = sorted(values)
    q = statistics.quantiles(values, n=4) if len(values) >= 2 else [values[0]] * 3
    return {"median": statistics.median(values), "min": values[0], "max": values[-1], "q1": q[0], "q3": q[2]}


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


def job_flops(jobs, benches):
    """FLOPs of each timed row's job, counted once on its eager model (a compiled row does the same work)."""
    counts = {}
    for (name, mode), job in jobs.items():
        if name in benches and not name.endswith(COMPILED):
            counts[(name, mode)] = count_flops(job)
    for name, mode in list(jobs):
        if name.endswith(COMPILED):
            counts[(name, mode)] = counts[(variant_of(name)[0], mode)]
    return counts


def method_rows(benches, times, memory, work, first_calls=None, flops=None, peak_tflops=None):
    """A row per bench; a compiled row's ratios are taken against the compiled base. With ``flops``, each
    job's model FLOP rate, and with a peak its MFU (model FLOPs utilisation: that rate over the peak)."""
    rows = []
    flops = flops or {}
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
            if mode in bench.cudagraph_skips:
                entry["cudagraph_skips"] = bench.cudagraph_skips[mode]
            if key in flops:
                entry["model_flops"] = flops[key]
                entry["model_tflops"] = flops[key] / statistics.median(times[key]) / 1e12
                if peak_tflops:
                    entry["mfu"] = entry["model_tflops"] / peak_tflops
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
