"""One PAL layer in three layouts of its projected space, timed side by side: a device check for issue 22.

On an H200 (docs/benchmarks.md, section 2, second session) the compiled PAL model ran its three matrix
products (V_E, the small attention's q/k/v, V_D) in CUTLASS sm80 kernels while the base model's ran in cuBLAS's
Hopper kernels. BERT-base's PAL is 204 wide: a bf16 row of 408 bytes, not a multiple of the 16 bytes that
Hopper's fast kernels want. Each layout below computes the same function of the same weights; the weights are
zero-padded inside every call (their gradients flow back to the unpadded ones), as the plugin would do it:

    plugin         the plugin's own module (`ProjectedAttentionLayer`, shared V_E/V_D passed in); on a GPU it pads
                   each head from 17 to 24 for SDPA's fused kernels and cuts the padding off again
    aligned        the products padded to a multiple of 8 columns (204 -> 208, q/k/v 3 x 208): 2-4% more
                   FLOPs; the attention padded per call as the plugin does it
    padded_heads   the projected space laid out as heads padded to 24 (12 x 24 = 288): no padding or cutting per
                   call around the attention, but the products do 1.4-2x the FLOPs of the unpadded ones

Forward, and forward + backward, each eager and compiled, interleaved round by round in one process; the
script first checks that the layouts agree (outputs and every weight's gradient) and prints each layout's time
over the plugin's:

    python benchmarks/pal_layout.py                    # BERT-base's PAL, batch 32 x 128, bf16 autocast, GPU
    python benchmarks/pal_layout.py --device cpu --dtype fp32 --batch 2 --length 16 --rounds 2 --no-compile
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from pals_adapters.pals.modeling import (
    FUSED_HEAD_MULTIPLE,
    ProjectedAttentionLayer,
    attend,
    init_projections,
    mask_in_dtype,
    projections_from,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import command_line, machine_info, markdown_table, print_and_write  # noqa: E402
from _speed_jobs import pick_device  # noqa: E402
from _speed_measure import paired_ratio, sync, time_rounds  # noqa: E402

LAYOUTS = ("plugin", "aligned", "padded_heads")
PASSES = ("forward", "forward+backward")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", help="cpu, cuda, or auto (cuda when available)")
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "fp32"), help="bf16: autocast, weights fp32")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=768, help="BERT-base")
    parser.add_argument("--projected", type=int, default=204, help="BERT-base's PAL (the paper's 204)")
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    parser.add_argument("--no-compile", action="store_true", help="eager rows only")
    parser.add_argument("--out-dir", default=None, help="where to write the results (default benchmarks/results)")
    parser.add_argument("--name", default="pal_layout")
    args = parser.parse_args(argv)
    if args.projected % args.heads:
        parser.error(f"--projected {args.projected} is not divisible by --heads {args.heads}")
    args.device = pick_device(args.device)
    return args


def round_up(size, multiple):
    return size + (-size % multiple)


def aligned(pal, hidden, mask, projections):
    """The plugin's PAL with each matrix product padded to a multiple of 8 columns (zero rows and columns)."""
    inner, p = pal.inner, projections
    size = p.down_weight.shape[0]
    wide, heads = round_up(size, 8), inner.num_heads
    extra = wide - size
    x = F.linear(hidden, F.pad(p.down_weight, (0, 0, 0, extra)), F.pad(p.down_bias, (0, extra)))
    qkv_weight = F.pad(inner.qkv.weight.view(3, size, size), (0, extra, 0, extra)).reshape(3 * wide, wide)
    qkv = F.linear(x, qkv_weight, F.pad(inner.qkv.bias.view(3, size), (0, extra)).reshape(-1))
    batch, length = hidden.shape[:2]
    query, key, value = qkv.view(batch, length, 3, wide)[..., :size].unflatten(-1, (heads, -1)).permute(2, 0, 3, 1, 4)
    context = attend(query, key, value, mask, inner.dropout if inner.training else 0.0)
    context = F.pad(context.transpose(1, 2).reshape(batch, length, size), (0, extra))
    return pal.activation(F.linear(context, F.pad(p.up_weight, (0, extra)), p.up_bias))


def padded_heads(pal, hidden, mask, projections):
    """The plugin's PAL computed in a projected space of heads zero-padded to a multiple of 8."""
    inner, p = pal.inner, projections
    size, heads = p.down_weight.shape[0], inner.num_heads
    head = size // heads
    extra = round_up(head, FUSED_HEAD_MULTIPLE) - head
    wide = heads * (head + extra)
    down = F.pad(p.down_weight.view(heads, head, -1), (0, 0, 0, extra)).reshape(wide, -1)
    x = F.linear(hidden, down, F.pad(p.down_bias.view(heads, head), (0, extra)).reshape(-1))
    qkv_weight = F.pad(inner.qkv.weight.view(3, heads, head, heads, head), (0, extra, 0, 0, 0, extra))
    qkv_bias = F.pad(inner.qkv.bias.view(3, heads, head), (0, extra)).reshape(-1)
    qkv = F.linear(x, qkv_weight.reshape(3 * wide, wide), qkv_bias)
    batch, length = hidden.shape[:2]
    query, key, value = qkv.view(batch, length, 3, heads, head + extra).permute(2, 0, 3, 1, 4)
    dropout = inner.dropout if inner.training else 0.0
    context = F.scaled_dot_product_attention(
        query, key, value, attn_mask=mask_in_dtype(mask, query.dtype), dropout_p=dropout, scale=head**-0.5
    )  # the padded columns of value are zero, so are the context's
    up = F.pad(p.up_weight.view(-1, heads, head), (0, extra)).reshape(-1, wide)
    return pal.activation(F.linear(context.transpose(1, 2).reshape(batch, length, wide), up, p.up_bias))


def plugin(pal, hidden, mask, projections):
    return pal(hidden, mask, projections)


FUNCTIONS = {"plugin": plugin, "aligned": aligned, "padded_heads": padded_heads}


def build(args):
    """The PAL (attention dropout 0, so that every layout computes the same numbers), its shared V_E/V_D, the
    hidden states and BERT's additive padding mask (every other row's last quarter masked)."""
    generator = torch.Generator().manual_seed(0)
    pal = ProjectedAttentionLayer(
        args.hidden, args.projected, num_heads=args.heads, attention_dropout=0.0, generator=generator
    ).to(args.device)
    weights = init_projections(args.hidden, args.projected, 0.02, generator).to(args.device)
    hidden = torch.randn(args.batch, args.length, args.hidden, generator=generator).to(args.device)
    keep = torch.ones(args.batch, args.length)
    keep[1::2, args.length - args.length // 4 :] = 0
    mask = ((1.0 - keep) * torch.finfo(torch.float32).min)[:, None, None, :].to(args.device)
    return pal, weights, hidden, mask


def autocast(args):
    return torch.autocast(args.device.type, dtype=torch.bfloat16, enabled=args.dtype == "bf16")


def outputs_and_gradients(args, function, pal, weights, hidden, mask):
    """The output and the gradients of the input and every weight, in float32, for one layout."""
    parameters = [hidden, *weights.values(), *pal.parameters()]
    for t in parameters:
        t.grad = None
    with autocast(args):
        out = function(pal, hidden, mask, projections_from(weights))
    out.float().square().sum().backward()
    return [out.detach().float()] + [t.grad.float() for t in parameters]


def differences(args, pal, weights, hidden, mask):
    """Largest absolute difference of each layout from the plugin's: output, and over all gradients."""
    hidden.requires_grad_(True)
    reference = outputs_and_gradients(args, plugin, pal, weights, hidden, mask)
    found = {}
    for name in LAYOUTS[1:]:
        other = outputs_and_gradients(args, FUNCTIONS[name], pal, weights, hidden, mask)
        found[name] = {
            "output": float((other[0] - reference[0]).abs().max()),
            "gradients": max(float((a - b).abs().max()) for a, b in zip(other[1:], reference[1:])),
        }
    return found


def jobs(args, pal, weights, hidden, mask):
    """(layout, pass, compiled) -> one call; forward under no_grad, forward + backward as in a full fine-tuning
    step (the input and all weights need gradients)."""
    grad = torch.randn(hidden.shape, generator=torch.Generator().manual_seed(1)).to(args.device)
    variants = [(False, FUNCTIONS)]
    if not args.no_compile:
        variants.append((True, {name: torch.compile(f) for name, f in FUNCTIONS.items()}))
    made = {}
    for compiled, functions in variants:
        for name, function in functions.items():

            def forward(f=function):
                with torch.no_grad(), autocast(args):
                    f(pal, hidden, mask, projections_from(weights))

            def train(f=function):
                with autocast(args):
                    out = f(pal, hidden, mask, projections_from(weights))
                out.backward(grad)
                for t in (hidden, *weights.values(), *pal.parameters()):
                    t.grad = None

            made[(name, "forward", compiled)] = forward
            made[(name, "forward+backward", compiled)] = train
    return made


def summarise(times):
    """Per (pass, compiled): each layout's median ms and the median of its per-round ratio to the plugin's."""
    rows = []
    for compiled in sorted({key[2] for key in times}):
        for kind in PASSES:
            for name in LAYOUTS:
                ratio = paired_ratio(times, (name, kind, compiled), ("plugin", kind, compiled))
                rows.append(
                    {
                        "pass": kind,
                        "compiled": compiled,
                        "layout": name,
                        "ms": 1000 * statistics.median(times[(name, kind, compiled)]),
                        "over_plugin": ratio["median"],
                        "over_plugin_min_max": [ratio["min"], ratio["max"]],
                    }
                )
    return rows


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    pal, weights, hidden, mask = build(args)
    found = differences(args, pal, weights, hidden, mask)
    for name, diff in found.items():
        print(f"{name} vs plugin: output {diff['output']:.1e}, gradients {diff['gradients']:.1e}")
    start = time.perf_counter()
    first_calls = {}
    times = time_rounds(
        jobs(args, pal, weights, hidden, mask), args.warmup, args.rounds, args.device, start, first_calls
    )
    sync(args.device)
    rows = summarise(times)
    settings = {k: getattr(args, k) for k in ("dtype", "batch", "length", "hidden", "projected", "heads", "rounds")}
    results = {
        "command": command_line(__file__, argv),
        "machine": machine_info(args.device),
        "settings": settings,
        "max_abs_difference": found,
        "first_call_seconds": {" ".join(map(str, key)): seconds for key, seconds in first_calls.items()},
        "rows": rows,
    }
    machine = results["machine"]
    lines = [
        "# One PAL layer in three layouts of its projected space",
        "",
        f"`{results['command']}`",
        "",
        f"{machine['cpu_model']}, {machine['torch_threads']} thread(s), {args.device}"
        + (f" ({machine['gpu']})" if machine.get("gpu") else "")
        + f", {args.dtype}, torch {machine['torch']}; {machine['date']}. Hidden states ({args.batch}, {args.length}, "
        f"{args.hidden}), a PAL of {args.projected} in {args.heads} heads with shared V_E/V_D, BERT's padding mask, "
        f"attention dropout 0; {args.warmup} warm-up and {args.rounds} timed rounds, interleaved. Median ms, and the "
        "median (min-max) over rounds of the time over the plugin layout's in the same round.",
        "",
        markdown_table(
            ["pass", "compiled", "layout", "ms", "x plugin"],
            [
                [
                    row["pass"],
                    "yes" if row["compiled"] else "no",
                    row["layout"],
                    f"{row['ms']:.3f}",
                    "{:.3f} ({:.2f}-{:.2f})".format(row["over_plugin"], *row["over_plugin_min_max"]),
                ]
                for row in rows
            ],
        ),
        "",
        "Largest differences from the plugin layout (float32 values of the output; of all gradients, input and "
        "weights): " + "; ".join(f"{name} {d['output']:.1e}, {d['gradients']:.1e}" for name, d in found.items()),
    ]
    print_and_write(args.name, results, lines, args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
