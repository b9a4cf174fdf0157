"""The checks of `RunConfig.validate` (``config`` below is a `RunConfig`): values, choices, the export
added to, the data and the model's limits, and the run's tasks."""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch

from ..errors import ConfigError, PalsError, UnknownNameError
from ..pretrained import pretrained_config
from .data.sampling import STRATEGIES
from .methods.backend import get_backend
from .methods.method import Method, check_base_mode
from .methods.model import resolve_model
from .methods.registry import get_method
from .precision import PRECISIONS
from .serving.add_tasks import (
    SharedBase,
    check_can_take_tasks,
    check_model,
    check_new_tasks,
    export_tokenizer,
    shared_base_of,
)
from .tasks.glue import GLUE_TASKS, get_task
from .tasks.spec import TaskSpec
from .tasks.splits import SOURCES, resolve_glue_dir
from .tasks.user_tasks import load_task_specs

# --------------------------------------------------------------------------- values

PAPER_TASKS = ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"]
BATCHINGS = ("per-task", "mixed")

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


def check_values(config) -> None:
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
    if config.selection is not None and not 0 < config.selection < 1:
        raise ConfigError(
            f"selection={config.selection}: the fraction of the training rows held out to score on, above 0 and "
            "below 1 (e.g. 0.1)"
        )
    if config.selection_seed < 0:
        raise ConfigError(f"selection_seed={config.selection_seed}: must be >= 0")
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


def check_choices(config, method: Method) -> None:
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
        raise ConfigError(
            "sampler mt_uncertainty (CA-MTL's default) runs in one process (it scores every task per step); for "
            "a distributed run (DDP or --fsdp) choose another sampler, e.g. --sampler annealed"
        )
    if config.batching not in BATCHINGS:
        raise UnknownNameError("batching", config.batching, BATCHINGS)
    if config.batching == "mixed":
        if not get_backend(method.kind).supports_mixed_batches:
            reason = "PEFT trains one active adapter at a time" if method.kind == "peft" else "per-task layers on top"
            raise ConfigError(
                f"batching=mixed: method {method.name!r} cannot train several tasks in one batch ({reason}); "
                "use batching per-task, or an adapters method (pals, houlsby, lora) or shared"
            )
    if config.data_source not in SOURCES:
        raise UnknownNameError("data source", config.data_source, SOURCES)
    check_compile_mode(config.compile_mode, config.compile, "compile_mode=", "compile: true (--compile)")
    if config.precision not in PRECISIONS:
        raise ConfigError(f"precision={config.precision!r}: choose {', '.join(PRECISIONS)}")
    if config.precision == "fp16" and not torch.cuda.is_available():
        raise ConfigError("precision='fp16' needs a CUDA GPU; on a CPU use auto, bf16 (autocast) or fp32")


def compile_modes() -> list[str]:
    """torch.compile's modes in this torch (``torch._inductor.list_mode_options``, the list its docs point to)."""
    import torch._inductor

    return list(torch._inductor.list_mode_options())


def check_compile_mode(mode: str | None, compile: bool, setting: str, switch: str) -> None:
    """A compile mode is one torch knows, given with the switch that compiles (``setting``, e.g.
    ``"compile_mode="``, and ``switch``: how the user wrote them, for the message)."""
    if mode is None:
        return
    if mode not in compile_modes():
        raise UnknownNameError("compile mode", mode, compile_modes())
    if not compile:
        raise ConfigError(f"{setting}{mode!r} is a mode of torch.compile: it needs {switch} as well")


def take_from_export(config) -> tuple[SharedBase | None, Method | None]:
    """With add_to: the export's base, method and a frozen base for what the config leaves unset; a model or
    base given must agree with the export (refused here, before anything is trained). Returns the export's
    shared base and, when the config names a method, that method (parsed here, once)."""
    if config.replace and config.add_to is None:
        raise ConfigError("replace: only with add_to (it replaces tasks of an export); leave it out otherwise")
    if config.overwrite and config.resume is not None:
        raise ConfigError(
            f"overwrite with resume={config.resume!r}: resume continues the run in output_dir, overwrite replaces "
            "it; give one of them"
        )
    if config.add_to is None:
        return None, None
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
    method = None
    if config.method is not None:
        method = get_method(config.method)
        check_new_tasks(shared, (), method)  # before the method's own checks
    config.method = shared.method.spec if config.method is None else config.method
    config._default_sampler()
    return shared, method


def check_added_tasks(config, specs: dict[str, TaskSpec], shared: SharedBase | None, method: Method) -> None:
    if shared is None:
        return
    check_new_tasks(shared, specs, method, config.replace)
    export_tokenizer(shared)  # the base's tokenizer must be the one every task of the export recorded


def check_data_location(config, specs: dict[str, TaskSpec]) -> None:
    if config.glue_dir is not None and not Path(config.glue_dir).is_dir():
        raise ConfigError(f"glue_dir={config.glue_dir!r} is not a folder; give the folder that holds RTE/, SST-2/ ...")
    glue = [name for name, spec in specs.items() if spec.data_dir is None]
    if glue and config.data_source == "local" and resolve_glue_dir(config.glue_dir) is None:
        raise ConfigError(f"tasks {glue} with data_source='local' need glue_dir (or env GLUE_DIR)")


def check_model_limits(config, method: Method) -> None:
    try:
        model_config = pretrained_config(resolve_model(config.model))
    except PalsError:
        raise
    except (OSError, ValueError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(
            f"model {config.model!r}: cannot read its config ({reason}); give a hub name or a folder with config.json"
        ) from None
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


def resolve_tasks(config) -> dict[str, TaskSpec]:
    """The run's tasks (see `resolve_task_names`)."""
    return resolve_task_names(config.tasks, config.task_file)
