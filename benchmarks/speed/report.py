"""The Markdown report of speed.step: speed, memory and multi-task tables, target lines."""

from benchmarks.common import markdown_table, verdict_line


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


def flop_rate(entry):
    """Model TFLOP/s of a job, with its MFU when a peak was known."""
    if entry is None or "model_tflops" not in entry:
        return ""
    mfu = f" ({100 * entry['mfu']:.1f}%)" if "mfu" in entry else ""
    return f"{entry['model_tflops']:.3g}{mfu}"


def flop_rate_table(rows):
    header = ["Method", "Forward TFLOP/s", "Frozen-base step TFLOP/s", "Full FT step TFLOP/s"]
    cells = [
        [row["method"]] + [flop_rate(row.get(mode)) for mode in ("forward", "train_frozen", "train_full")]
        for row in rows
        if any("model_tflops" in row.get(mode, {}) for mode in ("forward", "train_frozen", "train_full"))
    ]
    return markdown_table(header, cells)


def flop_rate_words(settings):
    peak = settings.get("peak_tflops")
    mfu = (
        f" In brackets: MFU, that rate over the device's {peak:g} TFLOP/s peak ({settings.get('peak_source')})."
        if peak
        else " No MFU: the device's peak is not known (--peak-tflops sets it)."
    )
    return (
        "Matmul and attention FLOPs of each job, counted once by torch.utils.flop_counter on the eager model "
        "(a frozen-base step does only the backward that autograd needs for the task weights), over the job's "
        "median time." + mfu
    )


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


def cudagraph_lines(results):
    """With mode reduce-overhead on a GPU: how many of each compiled job's graphs inductor left out of CUDA
    graphs (0 everywhere: every compiled job replays CUDA graphs)."""
    s = results["settings"]
    if s.get("compile_mode") != "reduce-overhead" or not str(s.get("device", "")).startswith("cuda"):
        return []
    counts = [
        f"{row['method']} {mode} {row[mode]['cudagraph_skips']}"
        for row in results["rows"]
        for mode in ("forward", "train_full", "train_frozen")
        if row.get(mode) and "cudagraph_skips" in row[mode]
    ]
    return [
        "Graphs compiled without CUDA graphs on each compiled job's first call (0: the job replays CUDA graphs "
        "only; the reasons are in the run's log): " + "; ".join(counts) + ".",
        "",
    ]


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
        *cudagraph_lines(results),
        "## Model FLOP rate",
        "",
        flop_rate_words(s),
        "",
        flop_rate_table(results["rows"]),
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
