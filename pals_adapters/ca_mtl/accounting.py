"""CA-MTL's parameters from a model config alone (the model is built on the meta device: no weights)."""

from dataclasses import dataclass
from typing import Union

import adapters
import torch
import transformers
from transformers import PretrainedConfig

from ..errors import ConfigError
from ..pretrained import pretrained_config
from .attach import ca_mtl_modules


@dataclass(frozen=True)
class CAMTLParameterCount:
    """CA-MTL's parameters on one base model with ``n_tasks`` tasks: what is shared, per task, and trained."""

    base: int  # the pretrained encoder with its pooler
    base_trained: int  # of which train: the layers above the frozen ones, and the pooler
    conditional: int  # the shared conditional modules
    conditional_trained: int  # of which train (all, unless the reference's frozen-layer FiLM quirk is asked for)
    per_task: int  # one task embedding
    head_per_task: int  # one task's output layer
    n_tasks: int

    @property
    def shared(self) -> int:
        return self.base + self.conditional

    @property
    def total(self) -> int:
        return self.shared + self.n_tasks * (self.per_task + self.head_per_task)

    @property
    def trained(self) -> int:
        return self.base_trained + self.conditional_trained + self.n_tasks * (self.per_task + self.head_per_task)

    @property
    def multiplier(self) -> float:
        return self.total / self.base


def count_ca_mtl_parameters(
    model_config: str | PretrainedConfig,
    config: Union[str, dict, "adapters.AdapterConfig"] = "ca_mtl",
    n_tasks: int = 8,
    num_labels: int = 2,
) -> CAMTLParameterCount:
    """Shared, per-task and trained parameters of CA-MTL on ``model_config`` (what ``train_adapter`` trains)."""
    if isinstance(model_config, str):
        model_config = pretrained_config(model_config)
    if n_tasks < 1:
        raise ConfigError(f"n_tasks={n_tasks}: must be >= 1")
    with torch.device("meta"):
        model = transformers.AutoModel.from_config(model_config)
        base = sum(p.numel() for p in model.parameters())
        adapters.init(model)
        model.add_adapter("task", config=config)
    model.train_adapter("task")
    modules = ca_mtl_modules(model)
    conditional_ids = {id(p) for p in modules.parameters()}
    per_task = sum(p.numel() for p in model.get_adapter("task")[0]["ca_mtl"].parameters())
    trained = [p for p in model.parameters() if p.requires_grad]
    return CAMTLParameterCount(
        base=base,
        base_trained=sum(p.numel() for p in trained if id(p) not in conditional_ids) - per_task,
        conditional=sum(p.numel() for p in modules.parameters()),
        conditional_trained=sum(p.numel() for p in trained if id(p) in conditional_ids),
        per_task=per_task,
        head_per_task=model_config.hidden_size * num_labels + num_labels,
        n_tasks=n_tasks,
    )
