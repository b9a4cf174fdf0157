"""Glue between a transformer layer and the PAL modules of every adapter: `PALsLayer`.

A PAL reads the hidden states *entering* a layer and adds its output *before the layer's
output LayerNorm*. Two forward pre-hooks do that without copying any transformers code:
one on the layer computes ``TS(h)`` for the active adapter setup, one on the module that
receives the residual of the output block adds it there (where, per architecture: `PALSite`).
"""

import contextvars
import threading
from typing import NamedTuple

import torch
from adapters.composition import AdapterCompositionBlock, Fuse, MultiTask, Split, adjust_tensors_for_parallel
from adapters.context import ForwardContext
from adapters.methods.adapter_layer_base import ComposableAdapterLayerBase
from torch import nn

from ..architectures import PALSite
from .config import PALsConfig
from .modeling import ProjectedAttentionLayer, Projections, projections_from, seeded_generator


class _PendingDeltas(threading.local):
    """TS(h) travels from the layer's pre-hook to its output block's pre-hook. Kept per thread (and per layer
    object) so concurrent forwards with different active adapters never mix. The dict exists from each
    thread's first look (``threading.local`` runs ``__init__`` per thread): created lazily in the forward,
    it made torch.compile compile the model a second time on its second call."""

    def __init__(self):
        self.deltas: dict = {}


_pending = _PendingDeltas()

# While the model's average_adapter runs, collects the (normalised) weights `adapters` passes to every
# layer, so the shared V_E/V_D are averaged with exactly the same weights (see integration.py).
AVERAGE_WEIGHTS = contextvars.ContextVar("pals_adapters_average_weights", default=None)


class PALState(NamedTuple):
    """What flows through the adapters composition blocks."""

    hidden_states: torch.Tensor  # layer input h, (B, T, d)
    attention_mask: torch.Tensor | None  # additive, broadcastable to (B, heads, T, T), or None
    delta: torch.Tensor | None  # sum of the PAL outputs so far, (B, T, d), None = zero


class PALsLayer(ComposableAdapterLayerBase, nn.Module):
    """Holds, for one transformer layer, the PAL module of every PAL adapter that covers it."""

    adapter_modules_name = "adapters"
    supported_compositions = ["Stack", "Parallel", "BatchSplit", "Average", "MultiTask"]

    def __init__(self, hidden_size: int, num_layers: int, adapters_config, site: PALSite):
        super().__init__()
        self.location_key = "pals"
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.adapters_config = adapters_config
        self.site = site
        self.adapters = nn.ModuleDict()

    # --- adapter management (called by adapters through apply_to_adapter_layers) ---

    def add_adapter(self, adapter_name: str, layer_idx: int) -> bool:
        self.layer_idx = layer_idx
        config = self.adapters_config.match(adapter_name, PALsConfig, layer_idx=layer_idx)
        if config is None or layer_idx not in config.layer_indices(self.num_layers):
            return False
        module = ProjectedAttentionLayer(
            self.hidden_size,
            config.projected_size(self.hidden_size),
            inner=config.inner,
            num_heads=config.num_attention_heads,
            attention_dropout=config.attention_dropout,
            activation=config.activation,
            own_projections=not config.shared_projections,
            init_range=config.init_range,
            init_weights=config.init_weights,
            generator=seeded_generator(config.init_weights_seed, layer_idx),
        )
        module.train(self.training)
        self.adapters[adapter_name] = module
        return True

    def average_adapter(self, adapter_name: str, input_adapters, combine_strategy, **kwargs) -> bool:
        added = super().average_adapter(adapter_name, input_adapters, combine_strategy, **kwargs)
        seen = AVERAGE_WEIGHTS.get()
        if added and seen is not None:
            seen.update(input_adapters)
        return added

    # --- composition (state plumbing for Stack, Parallel, BatchSplit, Average) ---

    def vslice(self, state: PALState, slice_obj) -> PALState:
        mask = state.attention_mask
        if mask is not None and mask.shape[0] > 1:
            mask = mask[slice_obj]
        delta = state.delta[slice_obj] if state.delta is not None else None
        return PALState(state.hidden_states[slice_obj], mask, delta)

    def pad_and_concat(self, states: list[PALState]) -> PALState:
        hidden = torch.cat([s.hidden_states for s in states])
        mask = states[0].attention_mask
        if mask is not None and mask.shape[0] == states[0].hidden_states.shape[0]:
            mask = torch.cat([s.attention_mask for s in states])  # else: batch-1 mask, broadcasts
        if all(s.delta is None for s in states):
            delta = None
        else:
            delta = torch.cat([s.delta if s.delta is not None else torch.zeros_like(s.hidden_states) for s in states])
        return PALState(hidden, mask, delta)

    def repeat(self, state: PALState, channels: int) -> PALState:
        mask = state.attention_mask
        if mask is not None and mask.shape[0] > 1:
            mask = mask.repeat(channels, *([1] * (mask.dim() - 1)))
        delta = state.delta.repeat(channels, 1, 1) if state.delta is not None else None
        return PALState(state.hidden_states.repeat(channels, 1, 1), mask, delta)

    def mean(self, states: list[PALState], weights: torch.Tensor) -> PALState:
        deltas = [s.delta if s.delta is not None else torch.zeros_like(s.hidden_states) for s in states]
        delta = (torch.stack(deltas) * weights.to(deltas[0].dtype)).sum(0)
        return PALState(states[0].hidden_states, states[0].attention_mask, delta)

    def compose_single(self, adapter_setup: str, state: PALState, lvl: int = 0) -> PALState:
        module = self.adapters[adapter_setup]
        shared = None
        if module.projections is None:
            shared = _shared_projections(adapter_setup)
        out = module(state.hidden_states, state.attention_mask, shared)
        delta = out if state.delta is None else state.delta + out
        return state._replace(delta=delta)

    def compose_multi_task(self, adapter_setup: MultiTask, state: PALState, lvl: int = 0) -> PALState:
        """Row ``i`` through the PAL of task ``task_ids[i]``. Eagerly as the library does it (rows sorted by
        task, one slice per task); under torch.compile without the data-dependent slice sizes, which would
        break the graph: every task's PAL runs on the whole batch and each row keeps its own task's output
        (the same numbers per row, as a PAL mixes tokens of one sequence only)."""
        names = adapter_setup.children
        if not torch.compiler.is_compiling() or not all(isinstance(n, str) and n in self.adapters for n in names):
            return super().compose_multi_task(adapter_setup, state, lvl)
        task_ids = ForwardContext.get_context().task_ids
        selected = None
        for index, name in enumerate(names):
            out = self.compose_single(name, state._replace(delta=None), lvl + 1).delta
            rows = (task_ids == index).view(-1, *([1] * (out.dim() - 1)))
            selected = torch.where(rows, out, 0.0 if selected is None else selected)
        return state._replace(delta=selected if state.delta is None else state.delta + selected)

    def _refuse(self, adapter_setup: AdapterCompositionBlock, state: PALState) -> PALState:
        pal_names = sorted(set(self.adapters.keys()) & set(adapter_setup.flatten()))
        if not pal_names:
            return state
        raise ValueError(
            f"PAL adapters {pal_names} cannot be used inside a {type(adapter_setup).__name__} block. "
            "PALs support Stack, Parallel, BatchSplit, Average and MultiTask."
        )

    def compose_fuse(self, adapter_setup: Fuse, state: PALState, lvl: int = 0) -> PALState:
        return self._refuse(adapter_setup, state)

    def compose_split(self, adapter_setup: Split, state: PALState, lvl: int = 0) -> PALState:
        return self._refuse(adapter_setup, state)

    # --- the two hooks ---

    def layer_pre_hook(self, layer: nn.Module, args: tuple, kwargs: dict):
        """Computes TS(h) for the active setup; repeats the layer input if Parallel widened the batch."""
        key = id(self)
        deltas = _pending.deltas
        deltas.pop(key, None)
        adapter_setup = self.get_active_setup()
        if adapter_setup is None:
            return None
        site = self.site
        hidden, mask = _get_arg(args, kwargs, site.hidden), _get_arg(args, kwargs, site.mask)
        # After a Parallel block in an earlier layer the batch is wider than the mask; some layers widen the
        # mask only inside their forward (DistilBERT), after this hook.
        (pal_mask,) = adjust_tensors_for_parallel(hidden, mask)
        pal_mask = additive_mask(pal_mask, site.mask_kind, hidden.dtype)
        state = self.compose(adapter_setup, PALState(hidden, pal_mask, None))
        if state.delta is not None:
            deltas[key] = state.delta
        if state.hidden_states.shape[0] == hidden.shape[0]:
            return None
        # Parallel widened the batch here: the layer must see the widened input and its own mask widened alike.
        (wide_mask,) = adjust_tensors_for_parallel(state.hidden_states, mask)
        args, kwargs = _set_arg(args, kwargs, site.hidden, state.hidden_states)
        return _set_arg(args, kwargs, site.mask, wide_mask)

    def residual_pre_hook(self, module: nn.Module, args: tuple, kwargs: dict):
        """Adds TS(h) to the residual of the output block, i.e. before its LayerNorm."""
        delta = _pending.deltas.pop(id(self), None)
        if delta is None:
            return None
        residual = _get_arg(args, kwargs, self.site.residual)
        if residual.shape != delta.shape:
            raise RuntimeError(
                f"PAL output of shape {tuple(delta.shape)} does not match the layer's residual "
                f"{tuple(residual.shape)}; feed-forward chunking is not supported with PALs"
            )
        return _set_arg(args, kwargs, self.site.residual, residual + delta)


def additive_mask(mask: torch.Tensor | None, kind: str, dtype: torch.dtype) -> torch.Tensor | None:
    """A layer's attention mask as an additive mask broadcastable to (B, heads, T, T), or None."""
    if mask is None:
        return None
    if mask.dim() == 2:  # (B, T), 1 = attend
        mask, kind = mask[:, None, None, :], "keep"
    if kind == "keep" or mask.dtype == torch.bool:
        # finfo.min rather than -inf: a fully masked row (a padded query) then stays finite.
        return (1.0 - mask.to(dtype)) * torch.finfo(dtype).min
    return mask


def _shared_projections(adapter_name: str) -> Projections:
    context = ForwardContext.get_context()
    shared = getattr(context, "shared_parameters", None) or {}
    if adapter_name not in shared:
        raise RuntimeError(
            f"shared V_E/V_D of PAL adapter '{adapter_name}' are not in the forward context: "
            "run PAL layers through the model's forward, not on their own"
        )
    return projections_from(shared[adapter_name])


def _get_arg(args: tuple, kwargs: dict, arg):
    position, name = arg
    return args[position] if len(args) > position else kwargs.get(name)


def _set_arg(args: tuple, kwargs: dict, arg, value):
    position, name = arg
    if len(args) > position:
        args = args[:position] + (value,) + args[position + 1 :]
    else:
        kwargs = {**kwargs, name: value}
    return args, kwargs
