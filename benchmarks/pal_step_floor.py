"""How cheap can a PALs training step be on this CPU? The base's own steps and a PAL's parts, in one process.

Issue 22 set two training targets (MiniLM, 16 x 128 tokens, half the rows padded by a quarter, one
thread): a PALs full fine-tuning step <= 1.12x the base's, and a PALs step with the base frozen <= 0.72x
the base's full fine-tuning step. A frozen-base step skips the base's weight gradients, but it still runs
the whole forward and carries the activation gradients back through the frozen layers down to the lowest
PAL, and every PAL runs its own forward and backward, weight gradients included. This script times,
interleaved round by round so that every job sees the same load:

- the base's full fine-tuning step (the denominator of both targets; speed_memory.py's step, AdamW over
  every weight);
- the base's step with every weight frozen and the gradients carried from the head down to the output of
  the lowest layer with a PAL, where that PAL's output comes in (AdamW on the head only): what a frozen-base PALs
  step must do besides its PALs;
- one PAL layer's work, forward and backward: its three matmuls (weight and input gradients) and its small
  attention through SDPA's fused CPU kernel without dropout, the cheapest attention torch has for it; the
  PAL's own training path (with the paper's attention dropout) beside it, for reference;
- the PALs steps as the plugin runs them (speed_memory.py's steps), to read their distance to the floors.

The floors, per round then the median: full step 1 + L (matmuls + attention) / base full step; frozen-base
step (base frozen step + L (matmuls + attention)) / base full step, L being the number of PAL layers. They
leave out the residual add, the GELU, the attention dropout, the adapters plumbing and the optimiser on the
PAL weights, so a PALs step cannot cost less; a target below its floor cannot be met without changing what
a PAL computes.

    python benchmarks/pal_step_floor.py --threads 1 --rounds 15
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import adapters
import torch
import torch.nn.functional as F

import pals_adapters  # noqa: F401  (registers the PAL config type)
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.pals.dropout_attention import attention_with_dropout
from pals_adapters.pals.modeling import init_projections

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import MODELS, command_line, load_model, machine_info, write_results  # noqa: E402
from _speed_jobs import Bench, make_workload, method_model, train_step  # noqa: E402
from _speed_measure import time_rounds  # noqa: E402

FULL_STEP_TARGET = 1.12
FROZEN_STEP_TARGET = 0.72
BASE_FULL = "base: full fine-tuning step"
BASE_FROZEN = "base: all weights frozen, gradients down to the lowest PAL layer's output"
PAL_MATMULS = "one PAL layer: matmuls, forward and backward"
PAL_ATTENTION = "one PAL layer: small attention, SDPA fused, no dropout, forward and backward"
PAL_DROPOUT_ATTENTION = "one PAL layer: small attention, the PAL's path with dropout, forward and backward"
PALS_FULL = "PALs: full fine-tuning step"
PALS_FROZEN = "PALs: frozen-base step"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="minilm", choices=MODELS)
    parser.add_argument("--method", default="pals", help="the PAL method of the harness (its layers, sizes, dropout)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds (medians reported)")
    parser.add_argument("--name", default=None, help="write NAME.md and NAME.json (default: print only)")
    parser.add_argument("--out-dir", default=None, help="where to write them (default benchmarks/results)")
    args = parser.parse_args(argv)
    args.pal_config = adapters.AdapterConfig.load(get_method(args.method).adapters_config())
    if getattr(args.pal_config, "inner", None) != "attention":
        parser.error(f"--method {args.method}: not a PAL method with a small attention (e.g. pals, pals_no_share)")
    return args


def frozen_base_step(bench, work, lowest=0):
    """The base's frozen step, its gradients carried down to the output of layer ``lowest``, where the lowest
    PAL's output comes in."""

    def needs_gradient(module, inputs, output):
        (output[0] if isinstance(output, tuple) else output).requires_grad_()

    hook = bench.model.encoder.layer[lowest].register_forward_hook(needs_gradient)
    try:
        train_step(bench, "train_frozen", work)
    finally:
        hook.remove()


def pal_layer_parts(config, pal_config, work):
    """name -> a callable doing one PAL layer's forward and backward for that part (inputs needing gradients,
    as under the layers above); each matmul's input is its own leaf, so each backward is counted once."""
    batch, length = work.input_ids.shape
    size = config.hidden_size
    projected, heads = pal_config.projected_size(size), pal_config.num_attention_heads
    shared = init_projections(size, projected, pal_config.init_range)
    qkv = torch.nn.Linear(projected, 3 * projected)  # the small attention's fused q/k/v, as the PAL has it
    dropout = pal_config.attention_dropout

    def leaf(*shape):
        return torch.randn(*shape).requires_grad_()

    hidden, projected_input, context = (leaf(batch, length, n) for n in (size, projected, projected))
    fused_qkv = leaf(batch, length, 3 * projected)
    mask = (1.0 - work.attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
    mask = mask.expand(batch, 1, length, length).contiguous()
    grads = {
        "down": torch.randn(batch, length, projected),
        "qkv": torch.randn(batch, length, 3 * projected),
        "up": torch.randn(batch, length, size),
        "context": torch.randn(batch, heads, length, projected // heads),
    }
    leaves = [hidden, projected_input, context, fused_qkv, *shared.values(), *qkv.parameters()]

    def clear():
        for leaf_tensor in leaves:
            leaf_tensor.grad = None

    def matmuls():
        down = F.linear(hidden, shared["down_weight"], shared["down_bias"])
        up = F.linear(context, shared["up_weight"], shared["up_bias"])
        torch.autograd.backward((down, qkv(projected_input), up), (grads["down"], grads["qkv"], grads["up"]))
        clear()

    def heads_of(t):
        return t.view(batch, length, 3, heads, projected // heads).permute(2, 0, 3, 1, 4)

    def attention(run):
        def part():
            q, k, v = heads_of(fused_qkv)
            run(q, k, v).backward(grads["context"])
            clear()

        return part

    return {
        PAL_MATMULS: matmuls,
        PAL_ATTENTION: attention(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)),
        PAL_DROPOUT_ATTENTION: attention(lambda q, k, v: attention_with_dropout(q, k, v, mask, dropout)),
    }


def jobs(args, work):
    """name -> a no-argument callable: the whole-model steps and one PAL layer's parts."""
    pal_config = args.pal_config
    base = Bench(load_model(args.model), [], ("train_full", "train_frozen"), work.device)
    model, params = method_model(args.model, args.method)
    pals = Bench(model, params, ("train_full", "train_frozen"), work.device)
    indices = pal_config.layer_indices(work.config.num_hidden_layers)
    return len(indices), {
        BASE_FULL: lambda: train_step(base, "train_full", work),
        BASE_FROZEN: lambda: frozen_base_step(base, work, lowest=min(indices)),
        **pal_layer_parts(work.config, pal_config, work),
        PALS_FULL: lambda: train_step(pals, "train_full", work),
        PALS_FROZEN: lambda: train_step(pals, "train_frozen", work),
    }


def spread(values):
    """Median and quartiles (the middle half of the rounds)."""
    values = list(values)
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else values * 3
    return {"median": statistics.median(values), "q1": q1, "q3": q3}


def floors(times, layers):
    """Ratios to the base's full step, round by round, then their median and quartiles: the two floors, the
    PALs steps as the plugin runs them, and how far above its floor each runs."""
    rounds = range(len(times[BASE_FULL]))
    full = times[BASE_FULL]
    pal_parts = [layers * (times[PAL_MATMULS][r] + times[PAL_ATTENTION][r]) / full[r] for r in rounds]
    per_round = {
        "full_step_floor": [1 + pal_parts[r] for r in rounds],
        "full_step_measured": [times[PALS_FULL][r] / full[r] for r in rounds],
        "frozen_step_floor": [times[BASE_FROZEN][r] / full[r] + pal_parts[r] for r in rounds],
        "frozen_step_measured": [times[PALS_FROZEN][r] / full[r] for r in rounds],
        "base_frozen_share": [times[BASE_FROZEN][r] / full[r] for r in rounds],
    }
    for step in ("full_step", "frozen_step"):
        per_round[f"{step}_above_floor"] = [
            m - f for m, f in zip(per_round[f"{step}_measured"], per_round[f"{step}_floor"])
        ]
    return {name: spread(values) for name, values in per_round.items()}


def verdict(floor, target):
    return "PASS" if floor <= target else "BELOW THE FLOOR"


def shown(ratio):
    return f"{ratio['median']:.3f} ({ratio['q1']:.3f}-{ratio['q3']:.3f})"


def report(args, times, layers, result):
    medians = {name: statistics.median(t) for name, t in times.items()}
    base = medians[BASE_FULL]
    rows = []
    for step, what, target in (
        ("full_step", "PALs full fine-tuning step", FULL_STEP_TARGET),
        ("frozen_step", "PALs frozen-base step", FROZEN_STEP_TARGET),
    ):
        floor = result[f"{step}_floor"]
        rows.append(
            f"| {what} | {shown(floor)} | {shown(result[f'{step}_measured'])} | "
            f"{shown(result[f'{step}_above_floor'])} | <= {target} | {verdict(floor['median'], target)} |"
        )
    lines = [
        "# What a PALs training step must cost beside the base's",
        "",
        f"`{command_line()}`",
        "",
        f"{machine_info()['cpu_model']}, {args.threads} thread(s), torch {torch.__version__}; {args.model}, "
        f"method {args.method} ({layers} PAL layers), batch {args.batch} x {args.length} (half the rows padded by "
        f"a quarter); median of {args.rounds} interleaved rounds.",
        "",
        "| job | ms | / base full step |",
        "|---|---|---|",
        *(f"| {name} | {1000 * median:.1f} | {median / base:.3f} |" for name, median in medians.items()),
        "",
        "Ratios to the base's full step in the same round: median (quartiles) over the rounds.",
        "",
        "| step | floor | as the plugin runs | above the floor | target | target vs floor |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        f"The base's frozen step alone: {shown(result['base_frozen_share'])} of its full step. Floors: the base's "
        f"step + {layers} x (PAL matmuls + fused small attention), nothing else.",
    ]
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    work = make_workload(args.model, args.batch, args.length, torch.device("cpu"), pad=True)
    layers, work_jobs = jobs(args, work)
    times = time_rounds(work_jobs, args.warmup, args.rounds, work.device, time.perf_counter())
    result = floors(times, layers)
    text = report(args, times, layers, result)
    print(text)
    if args.name:
        data = {"command": command_line(), "machine": machine_info(), "pal_layers": layers, "seconds": times, **result}
        write_results(args.name, data, text, args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
