"""The PAL's small attention through SDPA as it comes against with its heads zero-padded to a multiple of 8.

A PAL's heads are small and of odd size (BERT-base: 204 / 12 = 17). SDPA's fused CUDA kernels take head
sizes that are multiples of 8, so on a GPU an unpadded PAL attention runs SDPA's op-by-op math path;
`pals_adapters.pals.modeling.fused_attention` pads the heads with zeros (the same attention) so that a fused
kernel can run it. This script times both at a PAL's shape, forward and forward + backward, interleaved
round by round in one process, checks that they agree, and prints padded / unpadded for each:

    python benchmarks/pal_attention_kernels.py                      # BERT-base's PAL, batch 32 x 128, bf16
    python benchmarks/pal_attention_kernels.py --device cpu --rounds 3 --batch 4   # smoke test
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from pals_adapters.pals.modeling import fused_attention

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import command_line, machine_info, markdown_table, print_and_write  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--head-size", type=int, default=17, help="BERT-base's PAL: 204 / 12 = 17")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--out-dir", default=None, help="where to write the results (default benchmarks/results)")
    parser.add_argument("--name", default="pal_attention_kernels")
    return parser.parse_args(argv)


def inputs(args, device, dtype):
    """q, k, v of one PAL layer and BERT's additive padding mask (every other row's last quarter masked)."""
    generator = torch.Generator().manual_seed(0)
    shape = (args.batch, args.heads, args.length, args.head_size)
    q, k, v = (torch.randn(shape, generator=generator).to(device, dtype).requires_grad_() for _ in range(3))
    keep = torch.ones(args.batch, args.length)
    keep[1::2, args.length - args.length // 4 :] = 0
    mask = ((1.0 - keep) * torch.finfo(dtype).min)[:, None, None, :].to(device, dtype)
    return q, k, v, mask


def unpadded(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def padded(q, k, v, mask):
    return fused_attention(q, k, v, mask, 0.0)


def jobs(q, k, v, mask):
    """(variant, pass) -> a function that runs it once."""
    grad = torch.randn_like(q)

    def forward(attention):
        with torch.no_grad():
            attention(q, k, v, mask)

    def train(attention):
        q.grad = k.grad = v.grad = None
        attention(q, k, v, mask).backward(grad)

    return {
        (name, kind): (lambda a=attention, f=f: f(a))
        for name, attention in (("unpadded", unpadded), ("padded", padded))
        for kind, f in (("forward", forward), ("forward+backward", train))
    }


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_interleaved(job_map, warmup, rounds, device):
    times = {key: [] for key in job_map}
    for r in range(warmup + rounds):
        for key, job in job_map.items():
            sync(device)
            start = time.perf_counter()
            job()
            sync(device)
            if r >= warmup:
                times[key].append(time.perf_counter() - start)
    return times


def agreement(q, k, v, mask):
    """Largest differences between the two variants: outputs, and the gradients of q, k and v."""
    grads = {}
    for name, attention in (("unpadded", unpadded), ("padded", padded)):
        q.grad = k.grad = v.grad = None
        out = attention(q, k, v, mask)
        out.float().square().sum().backward()
        grads[name] = [out.detach().float()] + [t.grad.float() for t in (q, k, v)]
    return {
        what: float((a - b).abs().max())
        for what, a, b in zip(("output", "grad_q", "grad_k", "grad_v"), grads["unpadded"], grads["padded"])
    }


def main(argv=None):
    args = parse_args(argv)
    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    q, k, v, mask = inputs(args, device, dtype)
    differences = agreement(q, k, v, mask)
    times = time_interleaved(jobs(q, k, v, mask), args.warmup, args.rounds, device)
    rows = []
    for kind in ("forward", "forward+backward"):
        ratios = [p / u for p, u in zip(times[("padded", kind)], times[("unpadded", kind)])]
        rows.append(
            {
                "pass": kind,
                "unpadded_ms": 1000 * statistics.median(times[("unpadded", kind)]),
                "padded_ms": 1000 * statistics.median(times[("padded", kind)]),
                "padded_over_unpadded": statistics.median(ratios),
                "ratio_min_max": [min(ratios), max(ratios)],
            }
        )
    results = {
        "command": command_line(__file__, argv),
        "machine": machine_info(device),
        "settings": {k: getattr(args, k) for k in ("dtype", "batch", "length", "heads", "head_size", "rounds")},
        "max_abs_difference": differences,
        "rows": rows,
    }
    lines = [
        "# The PAL attention: SDPA as it comes against heads padded to a multiple of 8",
        "",
        f"`{results['command']}`",
        "",
        f"{results['machine']['cpu_model']}, {device}"
        + (f" ({results['machine']['gpu']})" if results["machine"].get("gpu") else "")
        + f", {args.dtype}, torch {results['machine']['torch']}; {results['machine']['date']}. "
        f"q, k, v of shape ({args.batch}, {args.heads}, {args.length}, {args.head_size}), BERT's additive padding "
        f"mask; {args.warmup} warm-up and {args.rounds} timed rounds, interleaved; median ms, and the median of the "
        "per-round ratio (min-max).",
        "",
        markdown_table(
            ["pass", "unpadded ms", "padded ms", "padded / unpadded"],
            [
                [
                    row["pass"],
                    f"{row['unpadded_ms']:.3f}",
                    f"{row['padded_ms']:.3f}",
                    f"{row['padded_over_unpadded']:.3f} ({row['ratio_min_max'][0]:.2f}-{row['ratio_min_max'][1]:.2f})",
                ]
                for row in rows
            ],
        ),
        "",
        "Largest differences between the two: " + ", ".join(f"{k} {v:.1e}" for k, v in differences.items()),
    ]
    print_and_write(args.name, results, lines, args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
