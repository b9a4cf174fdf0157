"""The PAL's small attention in training on the CPU: its sparse-dropout path against the alternatives.

One PAL layer's attention, forward and backward, at the bundled MiniLM's PAL shape (16 x 6 heads x 128
tokens, heads of 17, every other row's last quarter padded), timed interleaved round by round in one
process:

- ``sdpa_no_dropout``: ``scaled_dot_product_attention`` without dropout, its fused CPU kernel: the floor
  (what the PAL attention costs when it has no dropout to draw);
- ``sdpa_dropout``: the same call with ``dropout_p`` (torch's generic path on the CPU: a ``bernoulli_``
  draw per element, op by op);
- ``dense_mask``: the formula op by op with a dense keep mask (what ``torch.compile`` traces, run eagerly);
- ``pals``: `pals_adapters.pals.dropout_attention.attention_with_dropout`, what a PAL runs in training.

It prints the median milliseconds and each row's per-round ratio to ``sdpa_dropout`` and to
``sdpa_no_dropout``, and checks that ``pals`` gives the formula's output and gradients for the same
dropped elements.

    python benchmarks/dropout_attention.py --threads 1
    python benchmarks/dropout_attention.py --rounds 3 --batch 2   # smoke test
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from pals_adapters.pals.dropout_attention import attention_with_dense_dropout, attention_with_dropout, dropped_positions

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import command_line, machine_info, markdown_table, write_results  # noqa: E402

VARIANTS = {
    "sdpa_no_dropout": lambda q, k, v, mask, p: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
    "sdpa_dropout": lambda q, k, v, mask, p: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p),
    "dense_mask": attention_with_dense_dropout,
    "pals": attention_with_dropout,
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--heads", type=int, default=6, help="MiniLM's PAL: 102 / 6 = 17 per head")
    parser.add_argument("--head-size", type=int, default=17)
    parser.add_argument("--dropout", type=float, default=0.1, help="the paper's attention dropout")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--out-dir", default=None, help="where to write the results (default benchmarks/results)")
    parser.add_argument("--name", default=None, help="write <name>.md/.json (default: print only)")
    return parser.parse_args(argv)


def inputs(args):
    generator = torch.Generator().manual_seed(0)
    # q, k, v as a PAL makes them: views into one (B, T, 3, heads, d) projection
    qkv = torch.randn(args.batch, args.length, 3, args.heads, args.head_size, generator=generator)
    keep = torch.ones(args.batch, args.length)
    keep[1::2, args.length - args.length // 4 :] = 0
    mask = ((1.0 - keep) * torch.finfo(torch.float32).min)[:, None, None, :]
    return qkv, mask


def step(attention, qkv, mask, p, grad):
    leaf = qkv.clone().requires_grad_()
    attention(*leaf.permute(2, 0, 3, 1, 4), mask, p).backward(grad)


def formula_differences(qkv, mask, p):
    """Largest differences of the PAL path from the formula written out, with the same dropped elements."""
    results = []
    for exact in (False, True):
        leaf = qkv.clone().requires_grad_()
        q, k, v = leaf.permute(2, 0, 3, 1, 4)
        torch.manual_seed(1)
        if exact:
            probs = (q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5 + mask).softmax(-1)
            keep = torch.ones(probs.numel())
            keep[dropped_positions(probs.numel(), p)] = 0.0
            out = (probs * keep.view(probs.shape)) @ v / (1 - p)
        else:
            out = attention_with_dropout(q, k, v, mask, p)
        out.square().sum().backward()
        results.append((out.detach(), leaf.grad))
    (out, grad), (want_out, want_grad) = results
    return {"output": float((out - want_out).abs().max()), "gradients": float((grad - want_grad).abs().max())}


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    qkv, mask = inputs(args)
    differences = formula_differences(qkv, mask, args.dropout)
    grad = torch.randn(args.batch, args.heads, args.length, args.head_size, generator=torch.Generator().manual_seed(2))
    times = {name: [] for name in VARIANTS}
    for r in range(args.warmup + args.rounds):
        for name, attention in VARIANTS.items():
            start = time.perf_counter()
            step(attention, qkv, mask, args.dropout, grad)
            if r >= args.warmup:
                times[name].append(time.perf_counter() - start)

    def ratio(name, against):
        values = [a / b for a, b in zip(times[name], times[against])]
        return statistics.median(values), min(values), max(values)

    rows = [
        {
            "variant": name,
            "ms": 1000 * statistics.median(times[name]),
            "over_sdpa_dropout": ratio(name, "sdpa_dropout"),
            "over_sdpa_no_dropout": ratio(name, "sdpa_no_dropout"),
        }
        for name in VARIANTS
    ]
    machine = machine_info()
    shape = (args.batch, args.heads, args.length, args.head_size)
    lines = [
        "# The PAL attention with dropout on the CPU, forward + backward",
        "",
        f"`{command_line(__file__, argv) if argv is not None else command_line()}`",
        "",
        f"{machine['cpu_model']}, {args.threads} thread(s), torch {machine['torch']}; {machine['date']}. q, k, v of "
        f"shape {shape} (views into one projection, as a PAL makes them), BERT's padding mask on every other row, "
        f"dropout {args.dropout}; {args.warmup} warm-up and {args.rounds} timed rounds, interleaved. Median ms, and "
        "the median (min-max) of the per-round ratios.",
        "",
        markdown_table(
            ["variant", "ms", "/ sdpa_dropout", "/ sdpa_no_dropout"],
            [
                [
                    row["variant"],
                    f"{row['ms']:.2f}",
                    "{:.3f} ({:.2f}-{:.2f})".format(*row["over_sdpa_dropout"]),
                    "{:.3f} ({:.2f}-{:.2f})".format(*row["over_sdpa_no_dropout"]),
                ]
                for row in rows
            ],
        ),
        "",
        f"`pals` against the formula with the same dropped elements: output {differences['output']:.1e}, "
        f"gradients {differences['gradients']:.1e} (largest absolute differences).",
    ]
    print("\n".join(lines))
    if args.name:
        data = {"command": lines[2].strip("`"), "machine": machine, "settings": vars(args), "rows": rows}
        data["formula_differences"] = differences
        write_results(args.name, data, "\n".join(lines), args.out_dir)
    return rows, differences


if __name__ == "__main__":
    main()
