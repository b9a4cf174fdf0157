"""The scaling suite's tables: the paper arithmetic per rank, and the measured runs beside it."""

from benchmarks.common import markdown_table


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f}"


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f}"


def _engine(row) -> str:
    return "DDP" if row["engine"] == "ddp" else f"FSDP, {row['ranks']} ranks"


def paper_markdown(rows) -> str:
    header = ["model", "base", "engine", "weights (M)", "trainable (M)", "weights GB", "grads GB", "AdamW GB"]
    header += ["buckets / gathered GB", "per rank GB"]
    lines = []
    for row in rows:
        parts, groups = row["bytes"], row["groups"]
        lines.append(
            [
                row["model"],
                row["base"],
                _engine(row),
                f"{groups['total'] / 1e6:.2f}",
                f"{groups['trainable'] / 1e6:.2f}",
                _gb(parts["weights"]),
                _gb(parts["grads"]),
                _gb(parts["adamw"]),
                _gb(parts["extra"]),
                _gb(parts["total"]),
            ]
        )
    return markdown_table(header, lines)


def measured_markdown(rows) -> str:
    header = ["base", "engine", "paper per rank MiB", "measured: training peak - before model, MiB (rank 0 / 1)"]
    header += ["weights + AdamW held: paper / measured MiB", "peak before training - before model, MiB", "s per run"]
    lines = []
    for row in rows:
        paper, ranks = row["paper"], row["measured"]
        held = ranks[0]["weights_held"] + ranks[0]["adamw_held"]
        lines.append(
            [
                row["base"],
                _engine(row),
                _mib(paper["total"]),
                " / ".join(_mib(r["train_peak"] - r["before_model"]) for r in ranks),
                f"{_mib(paper['weights'] + paper['adamw'])} / {_mib(held)}",
                " / ".join(_mib(r["build_peak"] - r["before_model"]) for r in ranks),
                f"{max(r['seconds'] for r in ranks):.0f}",
            ]
        )
    return markdown_table(header, lines)


def report_markdown(data) -> str:
    machine = data["machine"]
    text = [
        "# Sharded training: memory per rank, DDP against FSDP2",
        "",
        f"`{data['command']}`",
        "",
        f"{machine['cpu_model']}, {machine['cpu_count']} cores; torch {machine['torch']}, "
        f"transformers {machine['transformers']}, adapters {machine['adapters']}; {machine['date']}.",
        "",
        f"## On paper: PALs on the {len(data['paper_tasks'])} GLUE tasks, fp32, per rank",
        "",
        "Weights, gradients and AdamW's two moments (activations not included: they are the same for DDP and",
        "FSDP, one batch per rank). DDP adds its gradient buckets; FSDP what it gathers while a step runs (the",
        "root unit's weights, twice while they are copied out of the all-gather buffer, and its gradients; two",
        "encoder layers' weights and one layer's gradients), summed as if held at once.",
        "",
        paper_markdown(data["paper"]),
    ]
    if data.get("measured"):
        m = data["measured_settings"]
        text += [
            "",
            f"## Measured: 2 CPU ranks (gloo), {m['model']} config-built BERT (d={m['hidden_size']}, "
            f"{m['layers']} layers, {m['weights'] / 1e6:.1f}M weights with PALs), {', '.join(m['tasks'])}",
            "",
            f"{m['steps']} steps of batch {m['batch_size']} x {m['max_length']} tokens per rank. Resident memory "
            "(RSS) of each rank: its peak during training less its RSS just before the model was built, next to "
            "the paper figure for this model; the weights and AdamW moments each rank holds at the end "
            "(tensor bytes, rank 0); and the peak from before the model until training starts (the whole model "
            "is built on every rank before it is sharded; DDP allocates its buckets).",
            "",
            measured_markdown(data["measured"]),
        ]
    return "\n".join(text)
