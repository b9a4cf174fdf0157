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
    calls it); accelerate then shards the root: embeddings, task heads and poolers. A layer whose weights
    are read before its own forward runs (the method's backend names it: CA-MTL's task embeddings sit in
    layer 0 and are read by a hook of the embeddings) is left to the root unit, which stays gathered from
    its forward to its backward: as a unit of its own, its weights would still be sharded when read."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    read_early = {id(layer) for layer in model.backend.layers_read_early(model)}
    for layer in encoder_layers(model):
        if id(layer) in read_early:
            continue
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


class MixedBatchGradients:
    """Sharded training on batches that mix tasks: every rank reduces a gradient for every trainable weight,
    and AdamW then skips exactly the weights that DDP's reducer would leave without a gradient.

    Why: FSDP2 reduce-scatters, per unit, the gradients its rank has. In a mixed batch a task missing from
    one rank's rows but present on another's leaves its head (and first-token pooler) without a gradient
    on the first rank only (`MultiTaskModel.forward_mixed` scores the tasks present), so the ranks'
    reduce-scatters of the root unit differ in size: gloo aborts ("a distributed collective mismatch"),
    NCCL may hang. (The tasks' encoder weights do not cause it: adapters' ``MultiTask`` block runs every
    task's adapter, on no rows when the task has none, which gives a zero gradient on every rank.)

    What: torch's own remedy, ``set_reduce_scatter_unused_params(True)`` (FSDP2's counterpart of DDP's
    ``find_unused_parameters``): a weight without a gradient on a rank takes part with zeros there, so the
    reduced gradient is the same mean over ranks as DDP's. It also gives zeros to the heads of tasks that no
    rank's batch held, which DDP leaves untouched (None: no AdamW step, no weight decay); a step's tasks are
    therefore gathered from every rank (one all-reduce of a flag per task) and, after the backward, the head
    weights of the tasks of no rank get their gradient back to None. The rows' outputs and the forward are
    not touched; one-process and DDP runs do not use this class."""

    def __init__(self, task_count: int):
        self.task_count = task_count
        self.present: torch.Tensor | None = None  # tasks of any rank's rows since the last optimiser step
        self.enabled = False

    def before_forward(self, model: nn.Module, task_ids: torch.Tensor) -> None:
        """Every rank, before a mixed batch's forward (a collective)."""
        import torch.distributed as dist

        if not self.enabled:  # the root unit exists once accelerate has prepared the model
            model.set_reduce_scatter_unused_params(True)
            self.enabled = True
        local = (torch.bincount(task_ids, minlength=self.task_count) > 0).to(torch.int32)
        dist.all_reduce(local, op=dist.ReduceOp.MAX)
        self.present = local if self.present is None else torch.maximum(self.present, local)

    def after_backward(self, model) -> None:
        """After the backward of the step's last batch (its gradients reduced): the head weights of the tasks
        no rank had go back to no gradient, as under DDP and in one process."""
        if self.present is None:
            return
        for index, task in enumerate(model.tasks):
            if not self.present[index]:
                for param in model.task_head(task).parameters():
                    param.grad = None
        self.present = None
