"""The protocol every method backend follows, and the registry of backends by name.

A backend is one family of ways to give each task its own parameters (an `adapters` config,
a PEFT LoRA, heads only, layers on top). `MultiTaskModel` and the export call only these hooks,
so a new family is one new file that subclasses `MethodBackend` and calls `register_backend`.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import torch
from torch import nn
from transformers import PreTrainedModel

from ...errors import AdapterLoadError, ConfigError, UnknownNameError
from .method import Method

# ``model`` in the hooks below is the `MultiTaskModel` calling them (typed as the nn.Module it is: the
# model module imports this one, and a type-only import back would be an import circle to a reader).
MultiTaskModel = nn.Module


class MethodBackend:
    """Adds, activates, lists, saves and loads the task-specific parameters of one method family."""

    kind: ClassVar[str]
    # (safetensors, pickle) names of the file holding a task's own weights; None: the head is all it has.
    weight_files: ClassVar[tuple[str, str] | None] = None
    # Per-example task routing inside one forward (a batch that mixes tasks).
    supports_mixed_batches: ClassVar[bool] = False
    # Weights of the method's own that every task shares (CA-MTL's conditional modules): they train with
    # the base and are exported once with it, so a frozen base only serves to add tasks to an export.
    has_shared_modules: ClassVar[bool] = False

    def __init__(self, method: Method):
        self.method = method

    @classmethod
    def check_settings(cls, method: Method) -> None:
        """Refuses settings (``name[key=value]``) this backend cannot use, before anything is built."""
        if method.overrides:
            raise ConfigError(f"method {method.spec!r}: '{method.name}' takes no settings")

    @classmethod
    def check_run(cls, method: Method, max_length: int, model_config) -> None:
        """Refuses a run this method cannot train on this model (its transformers config) with inputs of up
        to ``max_length`` tokens; called by the run's validation, before anything is built."""

    def attach(self, model: MultiTaskModel, encoder: PreTrainedModel, tasks: list[str]) -> nn.Module:
        """Adds every task's parameters; returns the encoder the model runs (it may be a wrapper)."""
        return encoder

    def backbone(self, encoder: nn.Module) -> PreTrainedModel:
        """The transformers model underneath the encoder returned by `attach`."""
        return encoder

    def task_modules(self, model: MultiTaskModel, task: str) -> list[nn.Module]:
        """The modules that belong to ``task`` alone (its head excluded)."""
        return []

    @contextlib.contextmanager
    def activate(self, model: MultiTaskModel, task: str) -> Iterator[None]:
        """Makes ``task``'s parameters the ones the encoder uses for the forward inside the block."""
        yield

    def encode_mixed(self, model: MultiTaskModel, task_ids: torch.Tensor, **inputs) -> torch.Tensor:
        """The encoder's last hidden states for a batch whose row ``i`` belongs to task ``task_ids[i]``
        (an index into ``model.tasks``). Backends that cannot route rows by task refuse."""
        raise ConfigError(
            f"method {self.method.name!r} cannot train several tasks in one batch; use --batching per-task"
        )

    def layers_read_early(self, model: MultiTaskModel) -> list[nn.Module]:
        """Encoder layers holding weights that are read before the layer's own forward runs; sharded training
        keeps them out of the per-layer units (see `pals_adapters.harness.training.sharding`)."""
        return []

    def after_encoder(
        self, model: MultiTaskModel, task: str, sequence: torch.Tensor, attention_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """Per-task layers above the encoder (identity for most methods)."""
        return sequence

    def trainable_shared_parameters(self, model: MultiTaskModel) -> list[tuple[str, nn.Parameter]]:
        """The shared parameters that train when the base is fine-tuned (default: all of them)."""
        return list(model.shared_parameters())

    def reused_parameters(self, model: MultiTaskModel) -> dict[int, int]:
        """Task parameters that act in several layers at once (PALs' shared ``V_E``/``V_D``), by ``id``, with
        the number of layers; `MultiTaskTrainer` can divide their learning rate by it (``scale_shared_lr``)."""
        return {}

    def shared_state(self, model: MultiTaskModel) -> dict[str, torch.Tensor]:
        """Shared weights outside the base model's own (exported once with the base, part of its fingerprint)."""
        return {}

    def load_shared_state(self, model: MultiTaskModel, state: dict[str, torch.Tensor], source: str) -> None:
        """Loads what `shared_state` returned into a freshly built model; refuses any mismatch."""
        if state:
            raise AdapterLoadError(f"{source}: method {self.method.name!r} has no shared modules to load them into")

    def save_task(self, model: MultiTaskModel, task: str, folder: Path, base_model_name: str | None) -> None:
        """Writes ``task``'s own weights (and config) into ``folder``, in the library's native format."""

    def load_task(self, model: MultiTaskModel, task: str, folder: Path, weights: Path) -> None:
        """Loads what `save_task` wrote into the freshly built ``model``; refuses any mismatch."""


_BACKENDS: dict[str, type[MethodBackend]] = {}

# The built-in families, imported (each registers itself) when a backend is first asked for or registered:
# they import torch, adapters and peft, which reading a method name or `pals-bench --help` must not pay.
_BUILT_IN = ("adapter_configs", "ca_mtl", "heads", "peft_lora", "top_layers")
_built_in_state = {"imported": False}


def _import_built_in() -> None:
    if not _built_in_state["imported"]:
        _built_in_state["imported"] = True  # first: each module registers through register_backend
        for module in _BUILT_IN:
            importlib.import_module(f".{module}", __package__)


def register_backend(backend: type[MethodBackend]) -> type[MethodBackend]:
    """Makes a backend available by its ``kind`` (usable as a class decorator)."""
    _import_built_in()  # a new backend never takes a built-in kind by coming first
    existing = _BACKENDS.get(backend.kind)
    if existing is not None and existing is not backend:
        raise ConfigError(f"a method backend named {backend.kind!r} is already registered ({existing.__name__})")
    _BACKENDS[backend.kind] = backend
    return backend


def get_backend(kind: str) -> type[MethodBackend]:
    """The backend class registered under ``kind``."""
    _import_built_in()
    if kind not in _BACKENDS:
        raise UnknownNameError("method backend", kind, _BACKENDS)
    return _BACKENDS[kind]
