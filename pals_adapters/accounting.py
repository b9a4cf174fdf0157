"""Parameter accounting from a model config alone: the model is built on the meta device (no weights)."""

from dataclasses import dataclass
from typing import Union

import adapters
import torch
import transformers
from torch import nn
from transformers import PretrainedConfig

from .errors import ConfigError
from .pretrained import pretrained_config


@dataclass(frozen=True)
class ParameterCount:
    """Parameters of a multi-task model with ``n_tasks`` tasks, relative to its base model."""

    method: str
    base: int  # the pretrained model (with pooler): the unit of the multiplier
    shared: int  # weights shared by all tasks (the base, or 0 for separate models)
    per_task: int  # task-specific weights of one task, head excluded
    head_per_task: int  # one task's output layer
    n_tasks: int

    @property
    def total(self) -> int:
        return self.shared + self.n_tasks * (self.per_task + self.head_per_task)

    @property
    def multiplier(self) -> float:
        """Total parameters over the base model's: the paper's "Params" column (1.13x for PALs)."""
        return self.total / self.base


def _meta_model(model_config: PretrainedConfig):
    with torch.device("meta"):
        return transformers.AutoModel.from_config(model_config)


def _numel(model) -> int:
    return sum(p.numel() for p in model.parameters())


def count_parameters(
    method: Union[str, dict, "adapters.AdapterConfig", object],  # object: a peft.PeftConfig
    model_config: str | PretrainedConfig,
    n_tasks: int = 8,
    num_labels: int = 2,
) -> ParameterCount:
    """Per-task and total parameters of ``method`` on ``model_config``, computed without weights.

    ``method`` is anything ``model.add_adapter`` accepts (``"pals"``, ``"double_seq_bn"``, a config
    object or dict) or a ``peft`` config. The harness's method names (separate fine-tuned models,
    heads only, ``"peft_lora"``, ``"attention_on_top"`` ...) are counted by
    `pals_adapters.harness.count_method_parameters`.
    """
    if isinstance(model_config, str):
        model_config = pretrained_config(model_config)
    if n_tasks < 1:
        raise ConfigError(f"n_tasks={n_tasks}: must be >= 1")
    base_model = _meta_model(model_config)
    base = _numel(base_model)
    head = model_config.hidden_size * num_labels + num_labels
    name = method if isinstance(method, str) else type(method).__name__

    if _is_peft_config(method):
        from peft import get_peft_model  # peft is optional for the plugin; a PEFT config means it is there

        # peft adapts the model in place; count what it added.
        peft_model = get_peft_model(base_model, method)
        return ParameterCount(name, base, base, _numel(peft_model) - base, head, n_tasks)

    adapters.init(base_model)
    base_model.add_adapter("task", config=method)
    # CA-MTL adds modules shared by all tasks (the "task" adapter then owns only its embedding)
    shared = base + sum(p.numel() for p in getattr(base_model, "ca_mtl", nn.Module()).parameters())
    return ParameterCount(name, base, shared, _numel(base_model) - shared, head, n_tasks)


def _is_peft_config(method) -> bool:
    # By class name along the MRO, so that the plugin never imports peft itself.
    return any(cls.__module__.startswith("peft.") and cls.__name__ == "PeftConfig" for cls in type(method).__mro__)
