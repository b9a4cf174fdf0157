"""Parameter accounting of the harness's methods (per-task layers, PEFT, heads) from a model config."""

from __future__ import annotations

import dataclasses

import torch
from transformers import AutoModel, PretrainedConfig

from ...accounting import ParameterCount, count_parameters
from ...errors import ConfigError, UnknownNameError
from ...pretrained import pretrained_config
from ..tasks.spec import TaskSpec
from .model import MultiTaskModel, pretrained_pooler, resolve_model
from .registry import METHODS, OLD_NAMES, SEPARATE, get_method

# A stand-in task for building the model: only its number of labels matters for the count.
_COUNTING_TASK = TaskSpec(
    name="task",
    text_columns=("text",),
    label_column="label",
    is_regression=False,
    labels=("0", "1"),
    metrics=("accuracy",),
    splits={"train": "train.tsv"},
)


def _count_adapter_config(method, model_config: PretrainedConfig, n_tasks: int, num_labels: int) -> ParameterCount:
    """`count_parameters`, plus the two methods without task layers: ``"separate"`` (every task fine-tunes
    its own copy of the model, nothing is shared: N x the base) and ``"shared"`` (one encoder; only the heads
    are per task)."""
    if method in (SEPARATE, "shared"):
        if n_tasks < 1:
            raise ConfigError(f"n_tasks={n_tasks}: must be >= 1")
        with torch.device("meta"):
            base = sum(p.numel() for p in AutoModel.from_config(model_config).parameters())
        head = model_config.hidden_size * num_labels + num_labels
        if method == SEPARATE:
            return ParameterCount(SEPARATE, base, 0, base, head, n_tasks)
        return ParameterCount("shared", base, base, 0, head, n_tasks)
    return count_parameters(method, model_config, n_tasks, num_labels)


def count_method_parameters(
    method, model_config: str | PretrainedConfig, n_tasks: int = 8, num_labels: int = 2
) -> ParameterCount:
    """Like `pals_adapters.count_parameters`, for harness method names (``"peft_lora[r=16]"``,
    ``"attention_on_top"`` ...) too: the task parameters are those the method's backend declares."""
    name = method.split("[")[0].strip() if isinstance(method, str) else None
    if isinstance(model_config, str):
        model_config = pretrained_config(resolve_model(model_config))
    if name in (SEPARATE, "shared") or (name not in METHODS and name not in OLD_NAMES):
        try:
            count = _count_adapter_config(method, model_config, n_tasks, num_labels)
        except ValueError as err:
            if name is None:
                raise
            raise UnknownNameError("method", name, list(METHODS)) from err
        with torch.device("meta"):
            has_pooler = pretrained_pooler(AutoModel.from_config(model_config)) is not None
        if has_pooler:
            return count
        hidden = model_config.hidden_size  # the harness's first-token pooler of each task is part of its head
        return dataclasses.replace(count, head_per_task=count.head_per_task + hidden * hidden + hidden)
    resolved = get_method(method)
    base_mode = "frozen" if resolved.allows_frozen_base else "finetune"
    with torch.device("meta"):
        encoder = AutoModel.from_config(model_config)
        base = sum(p.numel() for p in encoder.parameters())
        model = MultiTaskModel(encoder, {"task": _COUNTING_TASK}, resolved, base_mode)
    heads = ("heads.", "task_poolers.")  # a task's first-token pooler (no pretrained pooler) is part of its head
    per_task = sum(p.numel() for n, p in model.task_parameters("task") if not n.startswith(heads))
    pooler = sum(p.numel() for n, p in model.task_parameters("task") if n.startswith("task_poolers."))
    head = model_config.hidden_size * num_labels + num_labels + pooler
    shared = base + sum(t.numel() for t in model.backend.shared_state(model).values())  # CA-MTL's conditional modules
    return ParameterCount(method, base, shared, per_task, head, n_tasks)
