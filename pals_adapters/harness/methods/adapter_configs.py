"""Backend for any `adapters` config (PALs, Houlsby, LoRA, ...): one named adapter per task."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import adapters
from adapters import AdapterConfig, AdapterSetup
from adapters.composition import MultiTask
from torch import nn

from ...errors import AdapterLoadError, ConfigError, IntegrityError
from ...pals import shared_projections
from .backend import MethodBackend, register_backend
from .weights import quiet, saved_config_differences

ADAPTER_CONFIG = "adapter_config.json"


@register_backend
class AdapterConfigBackend(MethodBackend):
    kind = "adapters"
    weight_files = ("adapter.safetensors", "pytorch_adapter.bin")
    supports_mixed_batches = True  # adapters' MultiTask block routes examples by task_ids

    @classmethod
    def check_settings(cls, method) -> None:
        try:
            AdapterConfig.load(method.adapters_config())
        except (TypeError, ValueError, KeyError) as err:
            config = AdapterConfig.load(method.adapter_config)
            valid = ", ".join(sorted(config.to_dict()))
            raise ConfigError(f"method {method.spec!r}: {err}. Settings of '{method.name}': {valid}") from None

    def attach(self, model, encoder, tasks):
        adapters.init(encoder)
        for task in tasks:
            encoder.add_adapter(task, config=self.method.adapters_config())
        return encoder

    def task_modules(self, model, task) -> list[nn.Module]:
        # adapters' own view of what belongs to the adapter: per-layer modules and shared weights
        return [module for location in model.encoder.get_adapter(task).values() for module in location.values()]

    @contextlib.contextmanager
    def activate(self, model, task) -> Iterator[None]:
        with AdapterSetup(task):  # thread-local: concurrent forwards of other tasks are unaffected
            yield

    def encode_mixed(self, model, task_ids, **inputs):
        # adapters' MultiTask block sends row i through the adapter of task_ids[i]
        with AdapterSetup(MultiTask(*model.tasks)):
            return model.encoder(**inputs, task_ids=task_ids).last_hidden_state

    def reused_parameters(self, model) -> dict[int, int]:
        reused = {}
        for task in model.tasks:
            params, layers = shared_projections(model.encoder, task)
            reused.update({id(p): layers for p in params if layers > 1})
        return reused

    def save_task(self, model, task, folder: Path, base_model_name) -> None:
        # adapters-native files: a plain `load_adapter(folder)` works on them
        model.encoder.save_adapter(str(folder), task, use_safetensors=True)

    def load_task(self, model, task, folder: Path, weights: Path) -> None:
        path = folder / ADAPTER_CONFIG
        try:
            saved = AdapterConfig.load(json.loads(path.read_text(encoding="utf-8"))["config"]).to_dict()
        except (ValueError, KeyError, TypeError) as err:
            raise IntegrityError(f"{path} is not an adapters config: {err}") from err
        live = model.encoder.adapters_config.get(task).to_dict()
        diffs = saved_config_differences(saved, live)
        if diffs:
            raise AdapterLoadError(f"{path} does not match method {model.method.spec!r}: {'; '.join(diffs)}")
        info: dict[str, list] = {}
        safe = weights.suffix == ".safetensors"
        extra = {} if safe else {"allow_pickle": True}  # the export refused pickle unless the caller allowed it
        try:
            with quiet("adapters.loading"):  # it warns on the intended overwrite of the fresh adapter
                model.encoder.load_adapter(str(folder), load_as=task, use_safetensors=safe, loading_info=info, **extra)
        except RuntimeError as err:  # torch: size mismatch
            raise AdapterLoadError(f"{weights} does not fit the model: {err}") from err
        problems = [
            f"{label}: {sorted(keys)[:4]}"
            for label, keys in (
                ("missing", info.get("missing_keys", [])),
                ("unexpected", info.get("unexpected_keys", [])),
            )
            if keys
        ]
        if problems:
            raise AdapterLoadError(f"{weights} does not match adapter {task!r}: " + "; ".join(problems))
