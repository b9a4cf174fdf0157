"""Sharded training (``fsdp: true``): accelerate's FSDP2 plugin (`torch.distributed.fsdp.fully_shard`),
one shard unit per encoder layer, and the checks a sharded run needs before any step.

The engine is accelerate's and torch's; this module only chooses its settings. Two things it has to
do that transformers 4.57 does not: ``TrainingArguments(fsdp_config={"fsdp_version": 2})`` never
reaches accelerate (only ``accelerate launch --fsdp_version 2`` does, through FSDP_VERSION), so the
plugin is built here and handed to the Trainer; and accelerate turns FSDP on only for GPU-like
distributed types, so on CPU ranks (gloo) `enable_on_cpu_ranks` switches the state from MULTI_CPU to
FSDP itself (FSDP2 runs on CPU; FSDP1 does not, and is not offered).
"""

from __future__ import annotations

import os

import torch
from torch import nn

from ...errors import ConfigError
from .deepspeed_setup import build_models_whole

# The FSDP settings a run may change (``fsdp_options: [name=value, ...]``), each a boolean.
FSDP_OPTIONS = {
    "reshard_after_forward": "free each layer's gathered weights after its forward (less memory, one more "
    "all-gather in the backward; default true)",
}
_BOOLEANS = {"true": True, "false": False}


def parse_fsdp_options(options: list[str]) -> dict[str, bool]:
    """``["name=value", ...]`` -> ``{name: bool}``; a clear ConfigError for an unknown name or value."""
    parsed = {}
    for option in options:
        name, sep, value = option.partition("=")
        name = name.strip().replace("-", "_")
        if name not in FSDP_OPTIONS:
            known = ", ".join(f"{key} ({text})" for key, text in FSDP_OPTIONS.items())
            raise ConfigError(f"fsdp_options: unknown FSDP option {name!r}; known: {known}")
        if not sep or value.strip().lower() not in _BOOLEANS:
            raise ConfigError(f"fsdp_options: {option!r}: give {name}=true or {name}=false")
        parsed[name] = _BOOLEANS[value.strip().lower()]
    return parsed


def check_fsdp_options(config) -> None:
    """Part of `RunConfig.validate`: the FSDP options are known, and set only with fsdp."""
    if config.fsdp_options and not config.fsdp:
        raise ConfigError("fsdp_options are set but fsdp is off: add --fsdp (or fsdp: true), or drop fsdp_options")
    parse_fsdp_options(config.fsdp_options)


def check_fsdp_launch(config) -> None:
    """Before the run folder is touched: known FSDP options, and a distributed launch of 2 ranks or more."""
    check_fsdp_options(config)
    if config.fsdp and config.batching == "mixed":
        # ranks whose batches hold different tasks give gradients to different task weights, and the
        # sharded gradient reduction then mismatches across ranks (seen: a gloo collective mismatch)
        raise ConfigError(
            "fsdp: --batching mixed is not supported with sharded training yet (ranks with different tasks "
            "in their batches reduce different gradients); use --batching per-task, or DDP without --fsdp"
        )
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if config.fsdp and world_size < 2:
        raise ConfigError(
            "fsdp: sharded training needs a distributed launch of 2 or more ranks (WORLD_SIZE is "
            f"{world_size}); start it with `torchrun --nproc-per-node N -m pals_adapters.harness.cli train ...` "
            "or `accelerate launch --multi_gpu --num_processes N -m pals_adapters.harness.cli train ...` "
            "(docs/scaling-out.md), or drop --fsdp"
        )


def encoder_layers(model: nn.Module) -> nn.ModuleList:
    """The encoder's layers: the longest `nn.ModuleList` whose items share one class name (BertLayer,
    XLMRobertaLayer, ...; adapters gives each layer its own class, of the same name)."""
    best: nn.ModuleList | None = None
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) > 0:
            same_kind = len({type(item).__name__ for item in module}) == 1
            has_params = any(True for _ in module[0].parameters())
            if same_kind and has_params and (best is None or len(module) > len(best)):
                best = module
    if best is None:
        raise ConfigError(f"fsdp: found no list of encoder layers in {type(model).__name__} to shard by layer")
    return best


def fsdp_plugin(options: list[str]):
    """accelerate's FSDP2 plugin: sharded checkpoints (torch.distributed.checkpoint), every rank builds
    its own model (same seed, same weights). It wraps only the root: the layers are made units by
    `shard_encoder_layers` (accelerate's layer policy matches one class by name, and adapters gives each
    layer its own class, so it would make a unit of the first layer only)."""
    from accelerate.utils import FullyShardedDataParallelPlugin

    settings = {"reshard_after_forward": True, **parse_fsdp_options(options)}
    return FullyShardedDataParallelPlugin(
        fsdp_version=2,
        auto_wrap_policy="NO_WRAP",
        reshard_after_forward=settings["reshard_after_forward"],
        state_dict_type="SHARDED_STATE_DICT",
        cpu_ram_efficient_loading=False,
    )


def shard_encoder_layers(model: nn.Module, plugin) -> None:
    """One FSDP2 unit per encoder layer (torch's `fully_shard`, with the plugin's settings, as accelerate
    calls it); accelerate then shards the root: embeddings, task heads and poolers."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    for layer in encoder_layers(model):
        fully_shard(
            layer,
            reshard_after_forward=plugin.reshard_after_forward,
            offload_policy=plugin.cpu_offload,
            mp_policy=plugin.mixed_precision_policy or MixedPrecisionPolicy(),
        )


def enable_on_cpu_ranks(accelerator, plugin) -> None:
    """Hands ``plugin`` to ``accelerator``. accelerate only switches FSDP on for GPU-like distributed
    types; on CPU ranks its state is MULTI_CPU (gloo), and FSDP2 runs there once the state says FSDP."""
    from accelerate import PartialState
    from accelerate.utils import DistributedType

    state = accelerator.state
    if state.distributed_type not in (DistributedType.FSDP, DistributedType.MULTI_CPU) and not (
        torch.cuda.is_available() and state.distributed_type == DistributedType.MULTI_GPU
    ):
        raise ConfigError(f"fsdp: accelerate set up {state.distributed_type}, not a distributed run to shard")
    state.fsdp_plugin = plugin
    state.distributed_type = DistributedType.FSDP
    # as accelerate does for GPUs: every later AcceleratorState() copies the process state's type back
    PartialState._shared_state["distributed_type"] = DistributedType.FSDP


def unsharded_copy(trainer, build):
    """On every rank (a collective): the trained model's full tensors, gathered by accelerate (FSDP:
    `torch.distributed.checkpoint.state_dict`; DeepSpeed: ZeRO-3's consolidated state dict, ZeRO 0-2's
    model as every rank holds it); on rank 0, ``build()`` (a fresh model of the run, as built before
    training) loaded with them, to export, score and write as a single process would; None on the
    other ranks."""
    engine = trainer.model_wrapped if trainer.is_deepspeed_enabled else trainer.model  # ZeRO-3 gathers in the engine
    full = trainer.accelerator.get_state_dict(engine)
    if trainer.is_deepspeed_enabled:
        build_models_whole()  # training is over; the model to export (and its base) are built whole
    if not trainer.is_world_process_zero():
        return None
    model = build()
    missing, unexpected = model.load_state_dict(full, strict=False)
    if missing or unexpected:
        raise RuntimeError(f"the gathered weights do not fit the model (missing {missing}, extra {unexpected})")
    return model


def load_sharded_checkpoint(model: nn.Module, checkpoint_dir) -> None:
    """Loads the weights of a sharded checkpoint (``pytorch_model_fsdp_0``, torch.distributed.checkpoint
    as accelerate writes it) into an unsharded ``model`` in one process: DCP reads every rank's shard
    and assembles full tensors."""
    import torch.distributed.checkpoint as dcp

    from .checkpoints import SHARDED_MODEL

    state = {"model": model.state_dict()}
    dcp.load(state, storage_reader=dcp.FileSystemReader(str(checkpoint_dir / SHARDED_MODEL)))
    model.load_state_dict(state["model"])
