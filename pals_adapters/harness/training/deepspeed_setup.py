"""DeepSpeed ZeRO (``deepspeed: CONFIG.json``): the user's DeepSpeed config handed to transformers'
own integration (``TrainingArguments(deepspeed=...)``), and the checks such a run needs before any step.

The engine is DeepSpeed's and transformers'; this module reads the config, refuses what the harness
cannot honour, and adds one setting ZeRO-3 needs for the export at the end. The run's optimizer (AdamW
with per-task learning rates, frozen base parameters left out) and its learning-rate schedule stay the
harness's own: a config's ``optimizer`` or ``scheduler`` section would replace them, so it is refused.
Tested on CPU ranks over gloo only (docs/scaling-out.md says what was and was not tried).
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

from ...errors import ConfigError

INSTALL = 'pip install "pals-adapters[deepspeed]"'
# Sections of a DeepSpeed config that the run's own settings decide (see the module's docstring).
RUN_OWNED_SECTIONS = {
    "optimizer": "the run's AdamW with per-task learning rates (--lr, --adapter-lr, --weight-decay)",
    "scheduler": "the run's linear schedule (--lr, --warmup-ratio, --max-steps)",
}
GATHER_ON_SAVE = "stage3_gather_16bit_weights_on_model_save"


def read_deepspeed_config(path: str) -> dict:
    """The DeepSpeed config at ``path`` as a dict, ready for the Trainer; a ConfigError naming what to
    fix for a missing file, a file that is not a JSON object, a section the run owns, or a ZeRO stage
    the export cannot gather from. Under ZeRO-3, `GATHER_ON_SAVE` is switched on (rank 0 then receives
    full tensors to export)."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"deepspeed: {path} is not a file; give the path of a DeepSpeed JSON config")
    try:
        settings = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"deepspeed: {path} is not JSON ({err}); give a DeepSpeed JSON config") from None
    if not isinstance(settings, dict):
        raise ConfigError(f"deepspeed: {path} holds a JSON {type(settings).__name__}, not an object of settings")
    owned = [name for name in RUN_OWNED_SECTIONS if name in settings]
    if owned:
        what = "; ".join(f"{name}: {RUN_OWNED_SECTIONS[name]}" for name in owned)
        raise ConfigError(
            f"deepspeed: remove the {' and '.join(owned)} section from {path}; the run sets them ({what})"
        )
    zero = settings.get("zero_optimization", {})
    if not isinstance(zero, dict):
        raise ConfigError(f'deepspeed: zero_optimization in {path} must be an object (e.g. {{"stage": 2}})')
    stage = zero.get("stage", 0)
    if stage not in (0, 1, 2, 3) or isinstance(stage, bool):
        raise ConfigError(f"deepspeed: zero_optimization.stage={stage!r} in {path}: give 0, 1, 2 or 3")
    if stage == 3:
        if zero.get(GATHER_ON_SAVE) is False:
            raise ConfigError(
                f"deepspeed: {path} sets zero_optimization.{GATHER_ON_SAVE}=false; the export at the end gathers "
                "ZeRO-3's partitioned weights through it: set it true or leave it out"
            )
        settings = {**settings, "zero_optimization": {**zero, GATHER_ON_SAVE: True}}
    return settings


def _run_values(config) -> dict[str, tuple[object, str]]:
    """What the run gives transformers for each DeepSpeed setting it checks against its own arguments:
    {dotted key: (the value, the options that decide it)}."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    batches = f"one batch of --batch-size {config.batch_size} examples of one task per rank and step"
    return {
        "train_micro_batch_size_per_gpu": (1, f"{batches}, handed to DeepSpeed as one item"),
        "gradient_accumulation_steps": (1, "the run does not accumulate gradients (one task per step)"),
        "train_batch_size": (world_size, f"{batches}, on {world_size} rank(s)"),
        "gradient_clipping": (1.0, "the run clips gradients at norm 1.0"),
        "fp16.enabled": (config.precision == "fp16", f"--precision {config.precision}"),
        "bf16.enabled": (config.precision == "bf16", f"--precision {config.precision}"),
        "amp.enabled": (False, "the run uses torch autocast, not apex"),
    }


def check_against_run(settings: dict, config, path: str) -> None:
    """Refuses DeepSpeed settings that contradict the run's (transformers would stop on them after the model
    and data loaded, on every rank); "auto" takes the run's value."""
    contradictions = []
    for key, (value, decided_by) in _run_values(config).items():
        node = settings
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None and node != "auto" and node != value:
            contradictions.append(f"{key}={json.dumps(node)} (the run: {json.dumps(value)}, from {decided_by})")
    if contradictions:
        raise ConfigError(
            f'deepspeed: {path} contradicts the run: {"; ".join(contradictions)}. Set these to "auto" or leave '
            "them out (the run's options decide them)"
        )


def deepspeed_settings(config) -> dict | None:
    """What `TrainingArguments(deepspeed=...)` gets: the checked config, or None without deepspeed."""
    return read_deepspeed_config(config.deepspeed) if config.deepspeed else None


def check_deepspeed_launch(config) -> None:
    """Before the run folder is touched: one engine, a readable config, deepspeed installed, and a
    distributed launch of 2 ranks or more."""
    if not config.deepspeed:
        return
    if config.fsdp:
        raise ConfigError("deepspeed and fsdp are two sharding engines for one run: drop --fsdp or --deepspeed")
    check_against_run(read_deepspeed_config(config.deepspeed), config, config.deepspeed)
    if config.batching == "mixed":
        # as under FSDP: ranks whose batches hold different tasks reduce different gradients (seen under
        # ZeRO-2: a gloo collective of mismatched sizes)
        raise ConfigError(
            "deepspeed: --batching mixed is not supported with DeepSpeed (ranks with different tasks in their "
            "batches reduce different gradients); use --batching per-task, or DDP without --deepspeed"
        )
    if importlib.util.find_spec("deepspeed") is None:
        raise ConfigError(f"deepspeed: the deepspeed package is not installed; install it with {INSTALL}")
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size < 2:
        raise ConfigError(
            f"deepspeed: needs a distributed launch of 2 or more ranks (WORLD_SIZE is {world_size}); start it "
            "with `torchrun --nproc-per-node N -m pals_adapters.harness.cli train ... --deepspeed CONFIG.json` "
            "(docs/scaling-out.md), or drop --deepspeed"
        )


def build_models_whole() -> None:
    """From here on, ``from_pretrained`` builds ordinary models in this process, in a ZeRO-3 run too.
    While the Trainer's DeepSpeed config is set, transformers builds every model under
    `deepspeed.zero.Init`: partitioned, and a collective that hangs when rank 0 alone builds the model
    to export (and the export's base). Called once training and its evaluation are over."""
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    unset_hf_deepspeed_config()
