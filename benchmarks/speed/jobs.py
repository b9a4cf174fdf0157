"""What speed.step times: the workload, the models of each method, and their forward and training steps
(the FLOPs they do: flops.py)."""

from dataclasses import dataclass

import adapters
import torch
import torch.nn.functional as F
from adapters import AdapterSetup
from adapters.composition import Parallel
from peft import get_peft_model
from torch._dynamo.utils import counters

import pals_adapters  # noqa: F401  (registers the "pals" presets)
from benchmarks.common import load_model, model_config, typed_methods
from pals_adapters.errors import ConfigError
from pals_adapters.harness.methods.peft_lora import lora_config as peft_lora_config
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.harness.training.compiling import prepare_compile

PAL_METHODS = ("pals", "pals_no_share", "low_rank", "pals_top_layers")
# the methods method_model builds: adapter methods, each one task's parameters on the base
ALL_METHODS = (*PAL_METHODS, "houlsby", "lora", "peft_lora")
COMPILED = " (compiled)"  # suffix of a row timed through torch.compile


def checked_methods(parser, text):
    """``--methods`` as typed -> method specs (old names warn), or the script stops with ``parser.error`` on a
    method that method_model cannot build or a wrong setting, before any model is built."""
    specs = typed_methods(text)
    unknown = sorted({m for m in specs if m.partition("[")[0] not in ALL_METHODS})
    if unknown:
        parser.error(f"unknown methods {unknown}; choose from {', '.join(ALL_METHODS)}")
    for spec in specs:
        try:
            get_method(spec)
        except ConfigError as err:
            parser.error(str(err))
    return specs


def pick_device(name):
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


@dataclass
class Workload:
    """The model's config and the one batch every measurement runs on."""

    config: object
    device: torch.device
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor

    @property
    def tokens(self):
        return self.input_ids.numel()

    @property
    def length(self):
        return self.input_ids.shape[1]


def make_workload(model_name, batch, length, device, pad=False):
    torch.manual_seed(0)
    config = model_config(model_name)
    if length > config.max_position_embeddings:
        raise SystemExit(f"--length {length} exceeds the model's {config.max_position_embeddings} positions")
    low = min(1000, config.vocab_size // 2)
    attention_mask = torch.ones(batch, length, dtype=torch.long, device=device)
    if pad:
        attention_mask[1::2, length - length // 4 :] = 0
    return Workload(
        config=config,
        device=device,
        input_ids=torch.randint(low, config.vocab_size, (batch, length), device=device),
        attention_mask=attention_mask,
        labels=torch.randint(0, 2, (batch,), device=device),
    )


# --- the models: one per method, all alive at once so rounds can interleave -----------------------


class Bench:
    """A model, a task head, and an AdamW optimiser for each training mode."""

    def __init__(self, model, adapter_params, modes, device, compile_options=None):
        self.model = model.to(device)
        # what a measurement calls: the model, or its torch.compile wrapper (compiled on its first call)
        self.runner = self.model if compile_options is None else torch.compile(self.model, **compile_options)
        self.compiled = compile_options is not None
        # mode -> graphs that inductor kept out of CUDA graphs on that mode's first (compiling) call, once it ran
        self.cudagraph_skips = {}
        self.head = torch.nn.Linear(model.config.hidden_size, 2).to(device)
        self.modes = modes
        self.set_for = None  # the mode the model's train/eval state and requires_grad flags are set for
        self.params = list(self.model.parameters()) + list(self.head.parameters())
        # a step reads last_hidden_state: the pooler's gradient is none, or zeros from a compiled graph
        self.unused = {id(p) for name, p in self.model.named_parameters() if "pooler." in name}
        frozen = list(adapter_params) + list(self.head.parameters())
        self.trainable = {"train_frozen": {id(p) for p in frozen}, "train_full": {id(p) for p in self.params}}
        self.optimizers = {}
        if "train_frozen" in modes:
            self.optimizers["train_frozen"] = torch.optim.AdamW(frozen, lr=1e-5)
        if "train_full" in modes:
            self.optimizers["train_full"] = torch.optim.AdamW(self.params, lr=1e-5)

    def count(self, mode):
        ids = self.trainable[mode]
        return sum(p.numel() for p in self.params if id(p) in ids)


def method_model(model_name, method):
    """The base model with one task's parameters of ``method``, and those parameters."""
    if method == "peft_lora":
        model = get_peft_model(load_model(model_name), peft_lora_config({}))
        return model, [p for p in model.parameters() if p.requires_grad]
    model = load_model(model_name)
    adapters.init(model)
    model.add_adapter("task", config=get_method(method).adapters_config())
    model.train_adapter("task")  # activates it and freezes the base; we set requires_grad per step anyway
    return model, [p for p in model.parameters() if p.requires_grad]


def build_benches(model_name, methods, device, compile_options=None):
    """A bench per row; with ``compile_options`` (torch.compile's keywords) the same rows again, compiled."""
    variants = [("", None)] + ([(COMPILED, compile_options)] if compile_options is not None else [])
    benches = {}
    for suffix, options in variants:
        benches["base" + suffix] = Bench(load_model(model_name), [], ("forward", "train_full"), device, options)
        if not suffix:
            wrapped = load_model(model_name)
            adapters.init(wrapped)  # no adapter: the cost of the adapters library's plumbing alone
            benches["adapters_init"] = Bench(wrapped, [], ("forward",), device)
        for method in methods:
            model, params = method_model(model_name, method)
            # Each mode compiles a graph of its own (check_requires_grad_on_every_call); without that check,
            # torch 2.11 ran whichever training step came second through the first one's graph.
            benches[method + suffix] = Bench(model, params, ("forward", "train_full", "train_frozen"), device, options)
    if compile_options is not None:
        check_requires_grad_on_every_call()
        # As the harness compiles (dropout from torch's own random kernels); each compiled model keeps a
        # graph per mode (eval, and the two training modes' requires_grad).
        prepare_compile(num_tasks=4)
    return benches


def check_requires_grad_on_every_call():
    """Has torch.compile check each weight's requires_grad before it reuses a graph. By default it skips the
    checks of a module's tensors while the module's attributes are unchanged, and requires_grad_ changes no
    attribute: torch 2.11 then ran a frozen-base step through the graph compiled for the full step (the base's
    gradients computed, then dropped) or the reverse. A row's modes switch the flags every round."""
    torch._dynamo.config.skip_tensor_guards_with_matching_dict_tags = False


def build_multitask_models(model_name, presets, tasks, device):
    """One model per PAL preset, holding one adapter per task, for Parallel(*tasks) vs one forward per task."""
    models = {}
    for preset in presets:
        model = load_model(model_name)
        adapters.init(model)
        for task in tasks:
            model.add_adapter(task, config=preset)
        models[preset] = model.to(device).eval()
    return models


# --- one measurement of each kind ----------------------------------------------------------------


def set_mode(bench, mode):
    """The model's train/eval state and every weight's requires_grad as ``mode`` needs them; nothing when they
    already are. A job's ``prepare`` calls it before the clock starts, so that a timed call is the step alone:
    ``train()``/``eval()`` walks every module (an adapter model has many more than its base), which neither
    a server nor a training loop repeats on every call."""
    if bench.set_for == mode:
        return
    bench.model.train(mode != "forward")
    trainable = bench.trainable.get(mode, ())
    for p in bench.params:  # the same flags on every call: a compiled row then always reuses one graph
        p.requires_grad_(id(p) in trainable)
    bench.set_for = mode


def bench_job(bench, mode, work):
    """One measurement of ``mode`` on ``bench``, with its set-up as ``prepare`` (see set_mode)."""

    def run():
        if mode == "forward":
            return forward(bench, work)
        return train_step(bench, mode, work)

    run.prepare = lambda: set_mode(bench, mode)
    return run


def forward(bench, work):
    set_mode(bench, "forward")
    first = bench.compiled and "forward" not in bench.cudagraph_skips
    skips_before = cudagraph_skip_count() if first else 0
    with torch.no_grad():
        bench.runner(input_ids=work.input_ids, attention_mask=work.attention_mask)
    if first:
        bench.cudagraph_skips["forward"] = cudagraph_skip_count() - skips_before


def train_step(bench, mode, work):
    set_mode(bench, mode)
    first = bench.compiled and mode not in bench.cudagraph_skips
    graphs_before, skips_before = (counters["stats"]["unique_graphs"], cudagraph_skip_count()) if first else (0, 0)
    hidden = bench.runner(input_ids=work.input_ids, attention_mask=work.attention_mask).last_hidden_state
    loss = F.cross_entropy(bench.head(hidden[:, 0]), work.labels)
    loss.backward()
    check_gradients(bench, mode)
    if first:
        check_first_call_compiled(graphs_before, mode)
        bench.cudagraph_skips[mode] = cudagraph_skip_count() - skips_before
    bench.optimizers[mode].step()
    for p in bench.params:  # here, so no gradients linger between measurements
        p.grad = None


def check_gradients(bench, mode):
    """Refuses a step whose gradients are not the mode's: a compiled graph reused across a change of
    requires_grad (seen with torch 2.11) times another step than the row says."""
    trainable = bench.trainable[mode]
    wrong = sum((p.grad is None) == (id(p) in trainable) for p in bench.params if id(p) not in bench.unused)
    if wrong:
        raise RuntimeError(
            f"{mode}: {wrong} of {len(bench.params)} weights have gradients other than this mode's (torch "
            f"{torch.__version__}); a compiled graph was reused across a change of requires_grad, so its time "
            "would be another step's. Run without --compile, or with another torch."
        )


def cudagraph_skip_count():
    """Graphs inductor has compiled without CUDA graphs in this process (on a CPU every graph counts). Why is
    in the "cudagraphs" log (a CPU tensor in the graph, a mutated input, ...), which speed.step turns on
    for mode reduce-overhead."""
    return counters["inductor"]["cudagraph_skips"]


def check_first_call_compiled(graphs_before, mode):
    """A compiled step's first call must compile a graph of its own: one that compiles none runs a graph made
    for a step with other trainable weights, and its time would be that step's (check_gradients cannot see
    this when the other step trained more weights: the extra gradients are computed, then dropped)."""
    if counters["stats"]["unique_graphs"] == graphs_before:
        raise RuntimeError(
            f"{mode}: the first compiled call compiled no graph of its own (torch {torch.__version__}), so it ran "
            "a graph made for another training step and its time would be that step's. Run without --compile, or "
            "with another torch."
        )


def parallel_forward(model, tasks, work):
    with torch.no_grad(), AdapterSetup(Parallel(*tasks)):
        return model(input_ids=work.input_ids, attention_mask=work.attention_mask).last_hidden_state


def separate_forwards(model, tasks, work):
    outputs = []
    with torch.no_grad():
        for task in tasks:
            with AdapterSetup(task):
                outputs.append(model(input_ids=work.input_ids, attention_mask=work.attention_mask).last_hidden_state)
    return outputs


def parallel_errors(multitask_models, tasks, work):
    """Parallel must give each task what its own forward gives (the batch is repeated once per task)."""
    errors = {}
    for preset, model in multitask_models.items():
        parallel = parallel_forward(model, tasks, work)
        errors[preset] = (parallel - torch.cat(separate_forwards(model, tasks, work))).abs().max().item()
        print(f"{preset}: Parallel({', '.join(tasks)}) vs separate forwards: max abs difference {errors[preset]:.2e}")
    return errors
