"""Where the extra time of PALs goes: torch.profiler, PALs model against the base model, on the CPU or a GPU.

Profiles the same work on the base model and on the base model with one PAL adapter (the
harness's ``pals`` method): an inference forward, a full fine-tuning step (forward + backward,
every weight trainable), and a frozen-base step (only the PAL weights trainable). For each op it
prints the self CPU time per step in both models and the difference, largest first, so the
table reads as "what the PALs add". Ops run inside the PAL modules and hooks are also summed
under the ``pals.*`` record_function labels the script puts around them. On a GPU the table holds
each kernel's time on the device (the labels left out: their ranges overlap the kernels), and the wall
times are taken between synchronisations; ``--compile-mode`` profiles both models through torch.compile
(``reduce-overhead``: CUDA graphs).

    python benchmarks/profile_pals.py                      # bundled MiniLM, 16 x 128 tokens, 1 thread
    python benchmarks/profile_pals.py --steps 10 --top 30 --mode train_full
    python benchmarks/profile_pals.py --model bert-base --device cuda --dtype bf16 --batch 32 \
        --compile-mode reduce-overhead --mode forward
"""

import argparse
import contextlib
import logging
import re
import statistics
import sys
import time
from pathlib import Path

import adapters
import torch
import torch.nn.functional as F
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

import pals_adapters  # noqa: F401  (registers the "pals" presets)
from pals_adapters.harness.methods.registry import METHODS
from pals_adapters.pals.modeling import projections_from

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import MODELS, load_model, padded_batch  # noqa: E402
from _speed_jobs import check_requires_grad_on_every_call, pick_device  # noqa: E402
from _speed_measure import sync  # noqa: E402

MODES = ("forward", "train_full", "train_frozen")
LAYER_MODES = ("pal_layer_forward", "pal_layer_train")  # one PAL layer alone, on the batch's hidden states
NAME_WIDTH = 90  # CUDA kernels differ late in their names (a CUTLASS kernel's tile sizes and alignment)


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
    parser.add_argument("--device", default="cpu", help="cpu, cuda, or auto (cuda when available)")
    parser.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"), help="bf16: autocast, weights fp32")
    parser.add_argument(
        "--compile-mode",
        default=None,
        choices=("default", "reduce-overhead", "max-autotune"),
        help="profile both models through torch.compile in this mode (default: eager)",
    )
    args = parser.parse_args(argv)
    args.device = str(pick_device(args.device))
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda: this torch sees no GPU")
    if args.mode in LAYER_MODES and (args.compile_mode or args.device != "cpu"):
        parser.error(
            f"--mode {args.mode} profiles one eager PAL layer on the CPU: leave out --compile-mode and --device"
        )
    return args


def models(model_name, method, device):
    base = load_model(model_name)
    adapted = load_model(model_name)
    adapters.init(adapted)
    adapted.add_adapter("task", config=METHODS[method].adapters_config())
    adapted.set_active_adapters("task")
    return {"base": base.to(device), method: adapted.to(device)}


class Profiled:
    """A model, what a step calls (the model or its torch.compile wrapper), and how a step runs."""

    def __init__(self, model, device, dtype, compile_mode=None):
        self.model = model
        options = {} if compile_mode in (None, "default") else {"mode": compile_mode}
        self.runner = model if compile_mode is None else torch.compile(model, **options)
        self.device = device
        self.bf16 = dtype == "bf16"

    def precision(self):
        if self.bf16:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()


def set_mode(profiled, mode):
    """The model's train/eval state and requires_grad flags for ``mode``, set before a run of steps (not inside
    the timed or profiled steps: ``train()``/``eval()`` walks every module, which no real loop does per call)."""
    model = profiled.model
    model.train(mode != "forward")
    for name, p in model.named_parameters():
        p.requires_grad_(
            mode == "train_full" or (mode == "train_frozen" and ("adapters" in name or "shared_parameters" in name))
        )


def step(profiled, mode, inputs, head):
    if mode == "forward":
        with torch.no_grad(), profiled.precision():
            profiled.runner(**inputs)
        return
    with profiled.precision():
        hidden = profiled.runner(**inputs).last_hidden_state
        loss = F.cross_entropy(head(hidden[:, 0]), torch.zeros(hidden.shape[0], dtype=torch.long, device=hidden.device))
    loss.backward()
    profiled.model.zero_grad(set_to_none=True)


def op_times(profiled, mode, inputs, head, steps):
    """Microseconds per step: on the CPU each op's (and record_function label's) own time; on a GPU each
    kernel's time on the device (the rows of device events only, so no kernel is counted twice through the
    op that launched it; the labels' device ranges are left out of the sum, as they overlap the kernels)."""
    set_mode(profiled, mode)
    for _ in range(2):
        step(profiled, mode, inputs, head)  # warm-up (and, for a compiled model, compiling)
    on_gpu = profiled.device.type == "cuda"
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if on_gpu else [ProfilerActivity.CPU]
    sync(profiled.device)
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step(profiled, mode, inputs, head)
        sync(profiled.device)
    totals = {}
    for event in prof.key_averages():
        if on_gpu and (event.device_type != DeviceType.CUDA or event.key.startswith("pals.")):
            continue
        own = event.self_device_time_total if on_gpu else event.self_cpu_time_total
        if own:
            key = kernel_key(event.key)
            totals[key] = totals.get(key, 0.0) + own / steps
    return totals, prof


def kernel_key(name):
    """One row per kind of kernel or op in both models' tables. Inductor numbers the kernels of each compiled
    graph on its own (the same fused GELU is triton_poi_fused_gelu_view_16 in one model, ..._11 in the other)
    and names each graph by a hash; a CUDA kernel's name ends with its argument list."""
    name = re.sub(r"\([^()]*\)$", "", re.sub(r"^void ", "", name))
    name = re.sub(r"^(triton_\w+?)_\d+$", r"\1", name)
    name = re.sub(r"^## Call CompiledFxGraph \w+", "## Call CompiledFxGraph", name)
    return re.sub(r"^Torch-Compiled Region: \S+", "Torch-Compiled Region", name)


# What a GPU kernel does, from its name (first match wins): the summary under a device profile.
KERNEL_KINDS = (
    ("fused elementwise and norms (inductor's triton)", ("triton_",)),
    ("attention (SDPA)", ("sdpa", "flash", "fmha", "attention")),
    ("matrix products (cuBLAS, CUTLASS)", ("gemm", "nvjet", "cutlass", "cublas", "xmma")),
    ("copies and fills", ("memcpy", "memset", "copy", "fill")),
)


def kernel_kind(key):
    lowered = key.lower()
    return next((kind for kind, marks in KERNEL_KINDS if any(mark in lowered for mark in marks)), "other")


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
    for profiled in built.values():
        set_mode(profiled, mode)
    for _ in range(steps):
        for name, profiled in built.items():
            sync(profiled.device)
            start = time.perf_counter()
            step(profiled, mode, inputs, head)
            sync(profiled.device)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def report(mode, base, adapted, method, top, wall, where="ops' own CPU time", kinds=False):
    total_base, total_adapted = sum(base.values()), sum(adapted.values())
    print(
        f"\n== {mode}: wall (unprofiled, median) base {1000 * wall['base']:.1f} ms, {method} "
        f"{1000 * wall[method]:.1f} ms ({wall[method] / wall['base']:.3f}x); {where}: base "
        f"{total_base / 1000:.1f} ms, {method} {total_adapted / 1000:.1f} ms ({total_adapted / total_base:.3f}x) =="
    )
    if kinds:  # what the device does not spend in kernels: the host's work (Python, guards, launches) and waits
        print(
            f"wall minus kernel time: base {1000 * wall['base'] - total_base / 1000:.1f} ms, {method} "
            f"{1000 * wall[method] - total_adapted / 1000:.1f} ms"
        )
        print_diff("kind of kernel", group(base, kernel_kind), group(adapted, kernel_kind), method, top)
        print()
    print_diff("op" if not kinds else "kernel", base, adapted, method, top)


def group(times, kind_of):
    grouped = {}
    for key, value in times.items():
        kind = kind_of(key)
        grouped[kind] = grouped.get(kind, 0.0) + value
    return grouped


def print_diff(title, base, adapted, method, top):
    """Rows of ``adapted`` against ``base`` (microseconds per step), the largest extra time first."""
    rows = sorted(set(base) | set(adapted), key=lambda k: adapted.get(k, 0) - base.get(k, 0), reverse=True)
    extra_total = sum(adapted.values()) - sum(base.values())
    print(f"{title:<{NAME_WIDTH}} {'base ms':>9} {method + ' ms':>9} {'extra ms':>9} {'% extra':>8}")
    for key in rows[:top]:
        a, b = adapted.get(key, 0.0), base.get(key, 0.0)
        print(
            f"{key[:NAME_WIDTH]:<{NAME_WIDTH}} {b / 1000:9.2f} {a / 1000:9.2f} {(a - b) / 1000:9.2f} "
            f"{100 * (a - b) / extra_total:7.1f}%"
        )


def pal_layer_profile(model, inputs, mode, steps, top):  # eager, on the CPU's op table
    """One PAL layer alone (the first layer's, its shared V_E/V_D passed in), forward or forward + backward
    with the input requiring a gradient (as under a fine-tuned base): its own ops, largest first."""
    pal_module = model.encoder.layer[0].pals.adapters["task"]
    shared = model.shared_parameters["task"] if "task" in model.shared_parameters else None
    projections = projections_from(shared) if shared is not None else None
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
    device = torch.device(args.device)
    modules = models(args.model, args.method, device)
    config = modules["base"].config
    inputs = {key: value.to(device) for key, value in padded_batch(config, args.batch, args.length).items()}
    head = torch.nn.Linear(config.hidden_size, 2).to(device)
    label_pal_modules(modules[args.method])
    if args.compile_mode:
        check_requires_grad_on_every_call()  # the training modes switch requires_grad between steps
    built = {name: Profiled(model, device, args.dtype, args.compile_mode) for name, model in modules.items()}
    where = f"kernel time on the {torch.cuda.get_device_name(device)}" if device.type == "cuda" else "ops' own CPU time"
    print(
        f"{args.model}, batch {args.batch} x {args.length} (half the rows padded by a quarter), {device}, "
        f"{args.dtype}, {'compiled (' + args.compile_mode + ')' if args.compile_mode else 'eager'}, "
        f"{args.threads} thread(s), {args.steps} profiled steps per model and mode; torch {torch.__version__}"
    )
    for mode in (*MODES, *LAYER_MODES) if args.mode == "all" else (args.mode,):
        if mode in LAYER_MODES:
            if args.compile_mode is None and device.type == "cpu":
                pal_layer_profile(modules[args.method], inputs, mode, args.steps, args.top)
            else:
                print(f"\n== {mode}: left out (one eager PAL layer on the CPU only) ==")
            continue
        base, _ = op_times(built["base"], mode, inputs, head, args.steps)
        adapted, _ = op_times(built[args.method], mode, inputs, head, args.steps)
        wall = wall_times(built, mode, inputs, head, args.steps)
        report(mode, base, adapted, args.method, args.top, wall, where, kinds=device.type == "cuda")
    return 0


if __name__ == "__main__":
    sys.exit(main())
