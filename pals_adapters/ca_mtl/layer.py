"""Glue between a BERT-like model and CA-MTL: the task embeddings as an `adapters` layer, and the hooks.

- `CAMTLTaskEmbeddings` holds one task embedding ``z`` per CA-MTL adapter. It sits in layer 0 so that
  adapters' per-layer machinery (add, delete, train, save, load, ``get_adapter``, ``average_adapter``)
  handles the embeddings like any adapter weight. Through adapters' composition it gives every *row*
  of a batch its task's ``z``: one task (``AdapterSetup("cola")``), rows by ``task_ids``
  (``MultiTask``), by slices (``BatchSplit``), or a weighted mean of embeddings (``Average``).
- Forward hooks (no transformers code is copied): after the embeddings, the rows' ``z`` and
  ``z' = W_t z + b_t`` are put on adapters' `ForwardContext` (so gradient checkpointing recomputes with
  them) and the alignment is applied; before each attention block ``M(z')`` is added to the additive
  attention mask (eager (B,1,1,T), SDPA (B,1,T,T) or None: all become (B,1,T,T)); the conditional
  LayerNorms recompute the output of BERT's LayerNorm from its input; the top layer's output block
  output goes through the bottleneck.
"""

from pathlib import Path
from typing import NamedTuple

import torch
from adapters.composition import AdapterCompositionBlock, Fuse, Parallel, Split
from adapters.context import ForwardContext
from adapters.methods.adapter_layer_base import ComposableAdapterLayerBase
from torch import nn

from ..errors import AdapterLoadError
from .config import CAMTLConfig
from .modeling import CAMTLModules, ConditionalLayer, ConditionalLayerNorm


class TaskEmbedding(nn.Module):
    """One task's embedding ``z`` (size d): its only task-specific weight."""

    def __init__(self, hidden_size: int, init_range: float):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size) * init_range)


class RowEmbeddings(NamedTuple):
    """What flows through the adapters composition blocks: a task embedding per row."""

    z: torch.Tensor  # (B, d)
    assigned: torch.Tensor  # (B,) bool: the row got a CA-MTL task


class CAMTLCondition(NamedTuple):
    """The condition of the current forward, per row."""

    z: torch.Tensor  # task embeddings, read by the alignment (B, d)
    encoder_z: torch.Tensor  # W_t z + b_t, read by every layer's modules (B, d)


class CAMTLTaskEmbeddings(ComposableAdapterLayerBase, nn.Module):
    """The task embeddings of every CA-MTL adapter of a model (held in layer 0)."""

    adapter_modules_name = "adapters"
    supported_compositions = ["Stack", "BatchSplit", "Average", "MultiTask"]

    def __init__(self, hidden_size: int, adapters_config):
        super().__init__()
        self.location_key = "ca_mtl"
        self.hidden_size = hidden_size
        self.adapters_config = adapters_config
        self.adapters = nn.ModuleDict()

    def add_adapter(self, adapter_name: str, layer_idx: int) -> bool:
        self.layer_idx = layer_idx
        config = self.adapters_config.match(adapter_name, CAMTLConfig)
        if config is None:
            return False
        self.adapters[adapter_name] = TaskEmbedding(self.hidden_size, config.init_range)
        return True

    def embeddings_for_rows(self, adapter_setup, rows: int, like: torch.Tensor) -> torch.Tensor:
        """``z`` per row (rows, d) for the adapter setup; every row must get a CA-MTL task."""
        weight = next(iter(self.adapters.values())).weight
        state = RowEmbeddings(
            torch.zeros(rows, self.hidden_size, dtype=weight.dtype, device=like.device),
            torch.zeros(rows, dtype=torch.bool, device=like.device),
        )
        state = self.compose(adapter_setup, state)
        if not bool(state.assigned.all()):
            raise ValueError(
                f"adapter setup {adapter_setup} leaves {int((~state.assigned).sum())} of {rows} rows without a "
                "CA-MTL task: with CA-MTL adapters active, every row needs one (its task embedding conditions "
                "the shared modules)"
            )
        return state.z

    # --- composition (state plumbing) ---

    def vslice(self, state: RowEmbeddings, slice_obj) -> RowEmbeddings:
        return RowEmbeddings(state.z[slice_obj], state.assigned[slice_obj])

    def pad_and_concat(self, states: list[RowEmbeddings]) -> RowEmbeddings:
        return RowEmbeddings(torch.cat([s.z for s in states]), torch.cat([s.assigned for s in states]))

    def repeat(self, state: RowEmbeddings, channels: int) -> RowEmbeddings:
        return RowEmbeddings(state.z.repeat(channels, 1), state.assigned.repeat(channels))

    def mean(self, states: list[RowEmbeddings], weights: torch.Tensor) -> RowEmbeddings:
        weights = weights.reshape(-1)
        if len(states) != len(weights):
            raise ValueError("an Average block over CA-MTL adapters must hold CA-MTL adapters only")
        z = (torch.stack([s.z for s in states]) * weights.to(states[0].z.dtype)[:, None, None]).sum(0)
        assigned = torch.stack([s.assigned for s in states]).all(0)
        return RowEmbeddings(z, assigned)

    def compose_single(self, adapter_setup: str, state: RowEmbeddings, lvl: int = 0) -> RowEmbeddings:
        if bool(state.assigned.any()):
            raise ValueError(
                f"CA-MTL adapter '{adapter_setup}' is stacked on another CA-MTL adapter: each row has one task "
                "embedding (use MultiTask / BatchSplit to give rows different tasks, Average to mix embeddings)"
            )
        weight = self.adapters[adapter_setup].weight
        rows = state.z.shape[0]
        return RowEmbeddings(weight.expand(rows, -1), torch.ones_like(state.assigned))

    def _refuse(self, adapter_setup: AdapterCompositionBlock, state: RowEmbeddings) -> RowEmbeddings:
        names = sorted(set(self.adapters.keys()) & set(adapter_setup.flatten()))
        if not names:
            return state
        raise ValueError(
            f"CA-MTL adapters {names} cannot be used inside a {type(adapter_setup).__name__} block. "
            "CA-MTL supports Stack (one CA-MTL adapter), BatchSplit, Average and MultiTask."
        )

    def compose_fuse(self, adapter_setup: Fuse, state, lvl: int = 0):
        return self._refuse(adapter_setup, state)

    def compose_split(self, adapter_setup: Split, state, lvl: int = 0):
        return self._refuse(adapter_setup, state)

    def compose_parallel(self, adapter_setup: Parallel, state, lvl: int = 0):
        return self._refuse(adapter_setup, state)


# --- hooks (bound with functools.partial to modules of the model: copies of the model stay consistent) ---


def current_condition() -> CAMTLCondition | None:
    context = ForwardContext.get_context()
    return getattr(context, "ca_mtl_condition", None) if context is not None else None


def align_embeddings(tasks: CAMTLTaskEmbeddings, modules: CAMTLModules, embeddings: nn.Module, args, output):
    """Forward hook of the embeddings: sets the forward's condition and applies the conditional alignment."""
    context = ForwardContext.get_context()
    if context is not None:
        context.ca_mtl_condition = None
    adapter_setup = tasks.get_active_setup()
    if adapter_setup is None:
        return None
    if context is None:
        raise RuntimeError("CA-MTL adapters are active but there is no forward context: run the model's forward")
    if modules.waiting:
        refuse_waiting_tasks(modules, adapter_setup)
    z = tasks.embeddings_for_rows(adapter_setup, output.shape[0], output)
    z = z.to(modules.task_transform.weight.dtype)
    context.ca_mtl_condition = CAMTLCondition(z, modules.task_transform(z))
    return modules.alignment(output, z).to(output.dtype)


def refuse_waiting_tasks(modules: CAMTLModules, adapter_setup) -> None:
    """Refuses a forward of tasks whose trained embedding was loaded onto shared modules that are still as
    initialised (their outputs would be off, with no error): they need the modules they were trained with."""
    waiting = {name: modules.waiting[name] for name in sorted(adapter_setup.flatten()) if name in modules.waiting}
    if not waiting:
        return
    sources = "; ".join(f"'{name}' from {folder}" for name, folder in waiting.items())
    hints = sorted(
        {str(Path(folder).parent / "base") for folder in waiting.values() if (Path(folder).parent / "base").is_dir()}
    )
    hint = f" (for a pals-bench export: {', '.join(hints)})" if hints else ""
    raise AdapterLoadError(
        f"CA-MTL task embeddings were loaded ({sources}) but the shared conditional modules they were trained "
        "with were not: this model's are as initialised, so its outputs would be wrong. Load them first, on "
        "the encoder they were trained with: pals_adapters.ca_mtl.load_shared_modules(model, FOLDER), FOLDER "
        f"being what save_shared_modules wrote or the base folder of a pals-bench export{hint}; or call "
        "model.train_adapter(...) to train them from here"
    )


def add_attention_bias(layer: ConditionalLayer, attention: nn.Module, args: tuple, kwargs: dict):
    """Forward pre-hook of a self-attention block: adds ``M(z')`` to its additive attention mask."""
    condition = current_condition()
    if condition is None:
        return None
    hidden = _get_arg(args, kwargs, 0, "hidden_states")
    mask = _get_arg(args, kwargs, 1, "attention_mask")
    bias = layer.attention(condition.encoder_z, hidden.shape[1])
    if mask is None:
        mask = bias.to(hidden.dtype)
    else:
        if mask.dim() != 4:
            raise RuntimeError(f"CA-MTL expects a 4-d additive attention mask, got shape {tuple(mask.shape)}")
        mask = mask + bias.to(mask.dtype)
    return _set_arg(args, kwargs, 1, "attention_mask", mask)


def conditional_norm(norm: ConditionalLayerNorm, layer_norm: nn.LayerNorm, args, output):
    """Forward hook of one of BERT's LayerNorms: its output becomes ``CLN(input)`` over its own weights."""
    condition = current_condition()
    if condition is None:
        return None
    z = condition.encoder_z.to(args[0].dtype)
    return norm(args[0], z, layer_norm.weight, layer_norm.bias, layer_norm.eps)


def conditional_bottleneck(layer: ConditionalLayer, output_block: nn.Module, args, kwargs, output):
    """Forward hook of the top layer's output block ``(h_ffn, a) -> LN(...)``: the bottleneck replaces its output."""
    condition = current_condition()
    if condition is None:
        return None
    residual = _get_arg(args, kwargs, 1, "input_tensor")
    layer_output = output[0] if isinstance(output, tuple) else output
    if residual.shape != layer_output.shape:
        raise RuntimeError(
            f"CA-MTL's bottleneck got an output of shape {tuple(layer_output.shape)} and a residual of shape "
            f"{tuple(residual.shape)}"
        )
    adapted = layer.bottleneck(layer_output, residual, condition.encoder_z.to(layer_output.dtype))
    return (adapted,) + tuple(output[1:]) if isinstance(output, tuple) else adapted


def _get_arg(args: tuple, kwargs: dict, position: int, name: str):
    return args[position] if len(args) > position else kwargs.get(name)


def _set_arg(args: tuple, kwargs: dict, position: int, name: str, value):
    if len(args) > position:
        args = args[:position] + (value,) + args[position + 1 :]
    else:
        kwargs = {**kwargs, name: value}
    return args, kwargs
