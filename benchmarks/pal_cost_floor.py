"""How cheap can a PAL forward be on this CPU? Its parts timed beside one encoder layer, in one process.

The forward target of issue 22 (a PALs model's forward <= 1.09x the base's) was set against the PAL's
matmul FLOPs (1.073x for MiniLM). A PAL also runs a small attention over (batch, heads, T, T) scores,
whose softmax FLOPs counts miss. This script times, on the bundled MiniLM's first layer and the issue's
batch (16 x 128 tokens, half the rows padded by a quarter), interleaved round by round so that every part
sees the same load:

- the base encoder layer's forward (what a PAL is measured against, per layer);
- the PAL module's forward (V_E, the fused q/k/v, the small attention, V_D, GELU), as the plugin runs it;
- its parts alone: the three matmuls, the small attention (SDPA), the GELU;
- for training, the attention dropout over the (B, heads, T, T) probabilities, alone: torch's
  ``F.dropout`` (a ``bernoulli_`` draw per element) and the PAL's own (`dropped_positions`: the dropped
  elements drawn as geometric gaps, their values kept for the backward, then zeroed in place).

It prints each as a fraction of the base layer and the *floor*: 1 + (PAL matmuls + small attention) /
base layer, the ratio a PALs forward would reach if the adapters plumbing, the residual add and the GELU
cost nothing. A target below the floor cannot be met without changing what a PAL computes.

    python benchmarks/pal_cost_floor.py --threads 1 --rounds 15
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import pals_adapters  # noqa: F401  (registers the PAL config type)
from pals_adapters.pals import PALsConfig, ProjectedAttentionLayer
from pals_adapters.pals.dropout_attention import dropped_positions
from pals_adapters.pals.modeling import init_projections, projections_from

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import command_line, load_model, machine_info, padded_batch, write_results  # noqa: E402

FORWARD_TARGET = 1.09


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="minilm", choices=("minilm", "bert-base", "tiny"))
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds (median reported)")
    parser.add_argument("--name", default=None, help="write NAME.md and NAME.json (default: print only)")
    parser.add_argument("--out-dir", default=None, help="where to write them (default benchmarks/results)")
    return parser.parse_args(argv)


def workload(model, batch, length):
    """The first layer's input and BERT's additive SDPA mask for the issue's batch."""
    inputs = padded_batch(model.config, batch, length)
    mask = (1.0 - inputs["attention_mask"][:, None, None, :].float()) * torch.finfo(torch.float32).min
    with torch.no_grad():
        hidden = model.embeddings(input_ids=inputs["input_ids"])
    return hidden, mask.expand(batch, 1, length, length).contiguous()


def parts(model, hidden, mask):
    """name -> a no-argument callable doing that part's work once."""
    config = PALsConfig()
    size, projected = model.config.hidden_size, config.projected_size(model.config.hidden_size)
    pal = ProjectedAttentionLayer(size, projected, num_heads=config.num_attention_heads).eval()
    shared = init_projections(size, projected, config.init_range)
    p = {k: v.detach() for k, v in shared.items()}
    layer = model.encoder.layer[0].eval()
    heads, head_size = config.num_attention_heads, projected // config.num_attention_heads
    batch, length, _ = hidden.shape
    x = F.linear(hidden, p["down_weight"], p["down_bias"])
    qkv = pal.inner.qkv(x)
    q, k, v = qkv.view(batch, length, 3, heads, head_size).permute(2, 0, 3, 1, 4)
    context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(batch, length, -1)
    up = F.linear(context, p["up_weight"], p["up_bias"])
    probabilities = torch.rand(batch, heads, length, length)
    projections = projections_from(p)
    return {
        "base layer": lambda: layer(hidden, attention_mask=mask),
        "PAL forward": lambda: pal(hidden, mask, projections),
        "PAL matmuls": lambda: (
            F.linear(hidden, p["down_weight"], p["down_bias"]),
            pal.inner.qkv(x),
            F.linear(context, p["up_weight"], p["up_bias"]),
        ),
        "PAL small attention": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        "PAL GELU": lambda: F.gelu(up),
        "attention dropout, torch's F.dropout (training)": lambda: F.dropout(probabilities, 0.1, True),
        "attention dropout, the PAL's sparse draw (training)": lambda: sparse_dropout(probabilities, 0.1),
    }


def sparse_dropout(probabilities, p):
    """What the PAL's training path does to its probabilities: draw, keep the dropped values, zero them."""
    flat = probabilities.view(-1)
    dropped = dropped_positions(flat.numel(), p)
    kept_for_backward = flat.index_select(0, dropped)
    flat.index_fill_(0, dropped, 0.0)
    return kept_for_backward


def measure(work, rounds):
    for run in work.values():  # warm-up
        run()
        run()
    times = {name: [] for name in work}
    for _ in range(rounds):
        for name, run in work.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = load_model(args.model).eval()
    hidden, mask = workload(model, args.batch, args.length)
    with torch.no_grad():
        times = measure(parts(model, hidden, mask), args.rounds)
    base = times["base layer"]
    floor = 1 + (times["PAL matmuls"] + times["PAL small attention"]) / base
    lines = [
        "# What a PAL forward costs beside one encoder layer",
        "",
        f"`{command_line()}`",
        "",
        f"{machine_info()['cpu_model']}, {args.threads} thread(s), torch {torch.__version__}; {args.model}, "
        f"batch {args.batch} x {args.length} (half the rows padded by a quarter); median of {args.rounds} "
        "interleaved rounds.",
        "",
        "| part | ms | / base layer |",
        "|---|---|---|",
        *(f"| {name} | {1000 * t:.2f} | {t / base:.3f} |" for name, t in times.items()),
        "",
        f"Floor of a PALs forward (base + PAL matmuls + small attention, nothing else): {floor:.3f}x the base; "
        f"the PAL module as it runs: {1 + times['PAL forward'] / base:.3f}x.",
        f"{'PASS' if floor <= FORWARD_TARGET else 'BELOW THE FLOOR'}: forward target {FORWARD_TARGET}x against "
        f"a floor of {floor:.3f}x.",
    ]
    print("\n".join(lines))
    if args.name:
        data = {"command": command_line(), "machine": machine_info(), "seconds": times, "floor": floor}
        write_results(args.name, data, "\n".join(lines), args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
