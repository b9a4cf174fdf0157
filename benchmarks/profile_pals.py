"""Where the extra time of PALs goes on the CPU: torch.profiler, PALs model against the base model.

Profiles the same work on the base model and on the base model with one PAL adapter (the
harness's ``pals`` method): an inference forward, a full fine-tuning step (forward + backward,
every weight trainable), and a frozen-base step (only the PAL weights trainable). For each op it
prints the self CPU time per step in both models and the difference, largest first, so the
table reads as "what the PALs add". Ops run inside the PAL modules and hooks are also summed
under the ``pals.*`` record_function labels the script puts around them.

    python benchmarks/profile_pals.py                      # bundled MiniLM, 16 x 128 tokens, 1 thread
    python benchmarks/profile_pals.py --steps 10 --top 30 --mode train_full
"""

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

import adapters
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import pals_adapters  # noqa: F401  (registers the "pals" presets)
from pals_adapters.harness.methods.registry import METHODS
from pals_adapters.pals.modeling import Projections

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import MODELS, load_model, padded_batch  # noqa: E402

MODES = ("forward", "train_full", "train_frozen")
LAYER_MODES = ("pal_layer_forward", "pal_layer_train")  # one PAL layer alone, on the batch's hidden states


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="minilm", choices=MODELS)
    parser.add_argument("--method", default="pals", help="harness method to compare with the base model")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=5, help="profiled steps per model and mode")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--top", type=int, default=25, help="rows of the op table")
    parser.add_argument("--mode", default="all", choices=("all", *MODES, *LAYER_MODES))
    return parser.parse_args(argv)


def models(model_name, method):
    base = load_model(model_name)
    adapted = load_model(model_name)
    adapters.init(adapted)
    adapted.add_adapter("task", config=METHODS[method].adapters_config())
    adapted.set_active_adapters("task")
    return {"base": base, method: adapted}


def step(model, mode, inputs, head):
    if mode == "forward":
        model.eval()
        with torch.no_grad():
            model(**inputs)
        return
    model.train()
    for name, p in model.named_parameters():
        p.requires_grad_(mode == "train_full" or "adapters" in name or "shared_parameters" in name)
    hidden = model(**inputs).last_hidden_state
    F.cross_entropy(head(hidden[:, 0]), torch.zeros(hidden.shape[0], dtype=torch.long)).backward()
    model.zero_grad(set_to_none=True)


def op_times(model, mode, inputs, head, steps):
    """Self CPU microseconds per step of each op (and record_function label)."""
    for _ in range(2):
        step(model, mode, inputs, head)  # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step(model, mode, inputs, head)
    totals = {}
    for event in prof.key_averages():
        totals[event.key] = totals.get(event.key, 0.0) + event.self_cpu_time_total / steps
    return totals, prof


def label_pal_modules(model):
    """Wraps the PAL modules' forwards in record_function labels so their share shows in the profile."""
    for module in model.modules():
        if type(module).__name__ in ("ProjectedAttentionLayer", "ProjectedSelfAttention"):
            forward = module.forward
            label = f"pals.{type(module).__name__}"

            def labelled(*args, _forward=forward, _label=label, **kwargs):
                with torch.profiler.record_function(_label):
                    return _forward(*args, **kwargs)

            module.forward = labelled


def wall_times(built, mode, inputs, head, steps):
    """Median wall seconds per step of each model, unprofiled, interleaved (so both see the same load)."""
    times = {name: [] for name in built}
    for _ in range(steps):
        for name, model in built.items():
            start = time.perf_counter()
            step(model, mode, inputs, head)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def report(mode, base, adapted, method, top, wall):
    total_base, total_adapted = sum(base.values()), sum(adapted.values())
    print(
        f"\n== {mode}: wall (unprofiled, median) base {1000 * wall['base']:.1f} ms, {method} "
        f"{1000 * wall[method]:.1f} ms ({wall[method] / wall['base']:.3f}x); time inside profiled ops base "
        f"{total_base / 1000:.1f} ms, {method} {total_adapted / 1000:.1f} ms ({total_adapted / total_base:.3f}x) =="
    )
    keys = set(base) | set(adapted)
    rows = sorted(keys, key=lambda k: adapted.get(k, 0) - base.get(k, 0), reverse=True)
    print(f"{'op':<52} {'base ms':>9} {method + ' ms':>9} {'extra ms':>9} {'% extra':>8}")
    extra_total = total_adapted - total_base
    for key in rows[:top]:
        a, b = adapted.get(key, 0.0), base.get(key, 0.0)
        print(
            f"{key[:52]:<52} {b / 1000:9.2f} {a / 1000:9.2f} {(a - b) / 1000:9.2f} {100 * (a - b) / extra_total:7.1f}%"
        )


def pal_layer_profile(model, inputs, mode, steps, top):
    """One PAL layer alone (the first layer's, its shared V_E/V_D passed in), forward or forward + backward
    with the input requiring a gradient (as under a fine-tuned base): its own ops, largest first."""
    pal_module = model.encoder.layer[0].pals.adapters["task"]
    shared = model.shared_parameters["task"] if "task" in model.shared_parameters else None
    projections = Projections(**shared) if shared is not None else None
    with torch.no_grad():
        hidden = model.embeddings(input_ids=inputs["input_ids"]).detach()
    mask = (1.0 - inputs["attention_mask"][:, None, None, :].float()) * torch.finfo(torch.float32).min
    hidden.requires_grad_(mode == "pal_layer_train")

    def run():
        if mode == "pal_layer_forward":
            pal_module.eval()
            with torch.no_grad():
                pal_module(hidden, mask, projections)
        else:
            pal_module.train()
            pal_module(hidden, mask, projections).sum().backward()

    for _ in range(2):
        run()
    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            run()
    wall = (time.perf_counter() - start) / steps
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events) / steps
    print(f"\n== {mode}: one PAL layer, {1000 * wall:.1f} ms per call (profiled), {total / 1000:.1f} ms in ops ==")
    print(f"{'op':<52} {'ms/call':>9} {'share':>7}")
    for event in events[:top]:
        per_call = event.self_cpu_time_total / steps
        print(f"{event.key[:52]:<52} {per_call / 1000:9.2f} {100 * per_call / total:6.1f}%")


def main(argv=None):
    args = parse_args(argv)
    logging.getLogger("adapters.model_mixin").setLevel(logging.ERROR)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    built = models(args.model, args.method)
    inputs = padded_batch(built["base"].config, args.batch, args.length)
    head = torch.nn.Linear(built["base"].config.hidden_size, 2)
    label_pal_modules(built[args.method])
    print(
        f"{args.model}, batch {args.batch} x {args.length} (half the rows padded by a quarter), "
        f"{args.threads} thread(s), {args.steps} profiled steps per model and mode; torch {torch.__version__}"
    )
    for mode in (*MODES, *LAYER_MODES) if args.mode == "all" else (args.mode,):
        if mode in LAYER_MODES:
            pal_layer_profile(built[args.method], inputs, mode, args.steps, args.top)
            continue
        base, _ = op_times(built["base"], mode, inputs, head, args.steps)
        adapted, _ = op_times(built[args.method], mode, inputs, head, args.steps)
        wall = wall_times(built, mode, inputs, head, args.steps)
        report(mode, base, adapted, args.method, args.top, wall)
    return 0


if __name__ == "__main__":
    sys.exit(main())
