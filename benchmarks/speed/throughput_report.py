"""The report of `speed throughput`: examples per second of each batching variant, ratios, checks and Markdown."""

import statistics

from benchmarks.common import markdown_table


def summarise(raw, command):
    """Examples/s per variant and thread count, ratios, checks and the Markdown report.

    ``vs before`` is the ratio of total times (all timed steps); ``median round ratio`` is the median over
    rounds of the same ratio within one round (neighbours in time), which a burst of load on the
    shared machine moves less. With one thread the CPU-time figures are the load-robust ones."""
    settings = raw["settings"]
    steps = settings["steps"] - 1  # timed intervals per round
    threads = [int(t) for t in raw["raw_step_seconds"]["before"]]
    kinds = {"wall": raw["raw_step_seconds"]}
    if "raw_step_cpu_seconds" in raw:
        kinds["cpu"] = raw["raw_step_cpu_seconds"]
    tables, variants, overhead = {}, {}, {}
    for kind, data in kinds.items():
        seconds = {n: {int(t): v for t, v in c.items()} for n, c in data.items()}

        def rounds(name, t, seconds=seconds):  # this kind's seconds, bound now
            values = seconds[name][t]
            return [statistics.mean(values[i : i + steps]) for i in range(0, len(values), steps)]

        rows = []
        for name in ["before", "arrays", "grouped", "bare"]:
            for t in threads:
                mean = statistics.mean(seconds[name][t])
                per_round = [b / v for b, v in zip(rounds("before", t), rounds(name, t))]
                entry = {
                    "threads": t,
                    "examples_per_second": 32 / mean,
                    "mean_step_seconds": mean,
                    "steps_timed": len(seconds[name][t]),
                    "ratio_to_before": statistics.mean(seconds["before"][t]) / mean,
                    "median_round_ratio_to_before": statistics.median(per_round),
                    "round_ratios": per_round,
                }
                variants.setdefault(kind, {})[f"{name}@{t}"] = entry
                rows.append(
                    [
                        name,
                        t,
                        f"{32 / mean:.1f}",
                        f"{mean:.3f}",
                        f"{entry['ratio_to_before']:.2f}x",
                        f"{entry['median_round_ratio_to_before']:.2f}x",
                        ", ".join(f"{r:.2f}" for r in per_round),
                    ]
                )
        tables[kind] = rows
        overhead[kind] = {
            t: {
                "total": statistics.mean(seconds["grouped"][t]) / statistics.mean(seconds["bare"][t]) - 1,
                "median_round": statistics.median([g / b - 1 for g, b in zip(rounds("grouped", t), rounds("bare", t))]),
            }
            for t in threads
        }
    if "eval_seconds" in raw:
        eval_rate = {k: raw["eval_rows"] / statistics.mean(v) for k, v in raw["eval_seconds"].items()}
    else:  # a result file of the first version of this script kept only the rates
        eval_rate = raw["eval_rows_per_second"]
    # The checks read the CPU clock at one thread where it was measured (load-robust), else wall time.
    judge = "cpu" if "cpu" in kinds else "wall"
    t1 = threads[0]
    checks = {
        f"grouped >= 1.5x before ({judge} time, {t1} thread)": variants[judge][f"grouped@{t1}"]["ratio_to_before"]
        >= 1.5,
        f"harness step within 5% of the bare loop ({judge} time, {t1} thread)": overhead[judge][t1]["total"] <= 0.05,
    }
    padding = raw["padding"]
    header = [
        "variant",
        "threads",
        "examples/s",
        "s/step",
        "vs before (total)",
        "median round ratio",
        "per-round ratios",
    ]
    md = [
        f"# Training throughput ({settings['method']}, base fine-tuned, 5-task GLUE mix, batch 32, "
        f"{settings['model']})",
        "",
        f"`{command}`",
        "",
        f"Round-robin over CoLA, SST-2, MRPC, STS-B, RTE (full training sets), length 128. Interleaved in one "
        f"process: {settings['rounds']} rounds x {settings['steps']} steps per variant and thread count (the first "
        "step of a round is not timed). The machine is shared (2 cores, other jobs running): only ratios are "
        "meaningful. A one-thread step's CPU time (`time.process_time`) hardly depends on the load; its wall "
        "time does.",
        "",
    ]
    for kind, title in (
        ("cpu", "CPU time per step (examples per CPU-second; at 2 threads the CPU time of both threads)"),
        ("wall", "Wall time per step"),
    ):
        if kind in tables:
            md += [
                f"## {title}",
                "",
                markdown_table(header, tables[kind]),
                "",
                "Harness step (grouped) vs bare loop on the same batches: "
                + ", ".join(
                    f"{100 * o['total']:+.1f}% (median round {100 * o['median_round']:+.1f}%) at {t} thread(s)"
                    for t, o in overhead[kind].items()
                ),
                "",
            ]
    md += [
        "before: dataset[rows] + padding collator per step, random batches (the code before this change); "
        "arrays: batches sliced from arrays built once; grouped: arrays + length-grouped batches (now the "
        "default); bare: plain PyTorch loop (fused AdamW, clipping at 1.0, linear schedule) on grouped's batches.",
        "",
        markdown_table(
            ["batches", "padded tokens / batch", "real tokens / batch"],
            [
                [n, f"{p['padded_tokens_per_batch']:.0f}", f"{p['real_tokens_per_batch']:.0f}"]
                for n, p in padding.items()
            ],
        ),
        "",
        f"Evaluation ({raw.get('eval_rows', 5 * settings['eval_examples'])} dev rows at most, batch 64, {t1} thread, "
        f"wall time): {eval_rate['file_order']:.0f} rows/s in file order, {eval_rate['sorted']:.0f} rows/s sorted by "
        f"length ({eval_rate['sorted'] / eval_rate['file_order']:.2f}x).",
        "",
        "Checks: " + "; ".join(f"{k}: {'PASS' if v else 'FAIL'}" for k, v in checks.items()),
        "",
        "Measured on the CPU (the harness's data path and Trainer step; no GPU rows).",
    ]
    data = {
        "command": command,
        "variants": variants,
        "harness_overhead_vs_bare": overhead,
        "eval_rows_per_second": eval_rate,
        "checks": checks,
        **raw,
    }
    return data, "\n".join(md)
