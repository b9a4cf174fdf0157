"""Backend for PEFT's LoRA: one named PEFT adapter per task on a `PeftModel`."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

from peft import LoraConfig, get_peft_model, set_peft_model_state_dict
from peft.tuners.lora import LoraLayer
from torch import nn

from ...errors import AdapterLoadError, ConfigError, IntegrityError
from .backend import MethodBackend, register_backend
from .weights import read_tensors, saved_config_differences, tag_with_task

ADAPTER_CONFIG = "adapter_config.json"
DEFAULTS = {"r": 8, "lora_alpha": 8, "lora_dropout": 0.0, "target_modules": ["query", "value"]}
# PEFT config fields that legitimately differ between the live adapter and its saved copy.
# modules_to_save and task_type: the task's head saved beside the LoRA for PEFT's own loading (the export's
# `library_heads`); the harness loads its own copy of that head.
IGNORED_FIELDS = {
    "inference_mode",
    "base_model_name_or_path",
    "revision",
    "peft_version",
    "auto_mapping",
    "modules_to_save",
    "task_type",
}

SAVED_HEAD_PREFIX = "base_model.model.classifier."  # the task head saved for PEFT's own loading


def _encoder_state(state: dict, encoder_prefix: str) -> dict:
    """A task's LoRA weights as the bare encoder names them: an export saved for PEFT's sequence-classification
    loading (see the export's `library_heads`) adds its head and puts the encoder under ``encoder_prefix``."""
    head, nested = SAVED_HEAD_PREFIX, f"base_model.model.{encoder_prefix}."
    return {
        ("base_model.model." + k[len(nested) :] if k.startswith(nested) else k): v
        for k, v in state.items()
        if not k.startswith(head)
    }


def lora_config(overrides: dict):
    try:
        return LoraConfig(**{**DEFAULTS, **overrides})
    except (TypeError, ValueError) as err:
        raise ConfigError(f"peft_lora settings {overrides}: {err}") from None


@register_backend
class PeftLoraBackend(MethodBackend):
    kind = "peft"
    weight_files = ("adapter_model.safetensors", "adapter_model.bin")
    # PEFT routes mixed batches (adapter_names=) in inference only; its training refuses mixed adapters.
    supports_mixed_batches = False

    def __init__(self, method):
        super().__init__(method)
        # PEFT's active adapter is global to the model: one forward at a time (see `activate`).
        self._lock = threading.RLock()

    def __getstate__(self):  # copies of the model (deepcopy, pickle) get a lock of their own
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.RLock()

    @classmethod
    def check_settings(cls, method) -> None:
        lora_config(method.overrides)

    def attach(self, model, encoder, tasks):
        config = lora_config(self.method.overrides)
        wrapped = get_peft_model(encoder, config, adapter_name=tasks[0])
        for task in tasks[1:]:
            wrapped.add_adapter(task, config)
        return wrapped

    def backbone(self, encoder):
        return encoder.get_base_model()

    def task_modules(self, model, task) -> list[nn.Module]:
        owned = []
        for module in model.encoder.modules():
            if isinstance(module, LoraLayer):
                owned += [getattr(module, part)[task] for part in ("lora_A", "lora_B") if task in getattr(module, part)]
        return owned

    @contextlib.contextmanager
    def activate(self, model, task) -> Iterator[None]:
        # set_adapter switches the whole model: hold the lock for the forward so that concurrent
        # callers never run with another task's LoRA.
        with self._lock:
            model.encoder.set_adapter(task)
            # set_adapter also freezes the other tasks' LoRA weights; every task stays trainable
            # so that one optimiser step may reach several tasks (MT-Uncertainty).
            for param in model.trainable_parameters_cached():
                param.requires_grad = True
            yield

    def save_task(self, model, task, folder: Path, base_model_name) -> None:
        scratch = folder / ".peft"
        # save_embedding_layers=False: the base is exported and fingerprinted on its own, and PEFT's
        # "auto" would query the Hub about the base's vocabulary
        model.encoder.save_pretrained(
            str(scratch), selected_adapters=[task], safe_serialization=True, save_embedding_layers=False
        )
        source = scratch / task if (scratch / task).is_dir() else scratch  # PEFT nests non-"default" adapters
        weights = self.weight_files[0]
        for name in (ADAPTER_CONFIG, weights):
            os.replace(source / name, folder / name)
        shutil.rmtree(scratch)
        tag_with_task(folder / weights, task)  # PEFT ignores extra metadata; load_task checks it
        config = json.loads((folder / ADAPTER_CONFIG).read_text(encoding="utf-8"))
        # for AutoPeftModel: the hub base only fits a frozen run; a fine-tuned base lives in ../base
        config["base_model_name_or_path"] = base_model_name if model.base_mode == "frozen" else None
        (folder / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True), encoding="utf-8")

    def load_task(self, model, task, folder: Path, weights: Path) -> None:
        path = folder / ADAPTER_CONFIG
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as err:
            raise IntegrityError(f"{path} is not a PEFT config: {err}") from err
        live = model.encoder.peft_config[task].to_dict()
        diffs = saved_config_differences(saved, live, IGNORED_FIELDS)
        if diffs:
            raise AdapterLoadError(f"{path} does not match method {model.method.spec!r}: {'; '.join(diffs)}")
        state = _encoder_state(read_tensors(weights), model.backbone.base_model_prefix)
        try:
            result = set_peft_model_state_dict(model.encoder, state, adapter_name=task)
        except RuntimeError as err:  # torch: size mismatch
            raise AdapterLoadError(f"{weights} does not fit the model: {err}") from err
        # PEFT loads non-strictly: every LoRA weight of this task must come from the file, and nothing else
        missing = [k for k in result.missing_keys if re.search(rf"\.lora_\w+\.{re.escape(task)}\.", k)]
        problems = [
            f"{label}: {sorted(keys)[:4]}"
            for label, keys in (("missing", missing), ("unexpected", result.unexpected_keys))
            if keys
        ]
        if problems:
            raise AdapterLoadError(f"{weights} does not match PEFT adapter {task!r}: " + "; ".join(problems))
