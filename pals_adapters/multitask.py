"""`MultiTaskModel`: one shared encoder, per-task parameters of the chosen method, per-task heads.

The head of a task is the paper's default: the encoder's shared pretrained pooler, then a task
linear layer (a regression task has one output and an MSE loss).
"""

import contextlib
from typing import Dict, Iterator, List, Optional, Tuple

import adapters
import torch
import torch.nn.functional as F
from adapters import AdapterSetup
from torch import nn
from transformers import AutoModel, PreTrainedModel

from .errors import ConfigError
from .methods import Method, check_base_mode
from .modeling import ProjectedSelfAttention
from .tasks import TaskSpec


def additive_mask(attention_mask: Optional[torch.Tensor], dtype: torch.dtype) -> Optional[torch.Tensor]:
    """(B, T) 0/1 padding mask -> (B, 1, 1, T) additive mask, as BERT's eager attention takes it."""
    if attention_mask is None:
        return None
    return (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min


class TopProjectedAttention(nn.Module):
    """The paper's "projected attention on top" (Table 3): project the encoder output down once
    (``V_E``), run ``num_layers`` attention blocks in the small space (with an output matrix here,
    unlike PALs inside BERT, and a LayerNorm each), project back up (``V_D``) and add the result
    to the encoder output. 1.10x BERT-base for 8 tasks at ``d_s = 204``, as in the paper."""

    def __init__(self, hidden_size: int, projected_size: int, num_heads: int = 6, num_layers: int = 6):
        super().__init__()
        self.down = nn.Linear(hidden_size, projected_size)
        self.attention = nn.ModuleList(
            ProjectedSelfAttention(projected_size, num_heads, dropout=0.1) for _ in range(num_layers)
        )
        self.output = nn.ModuleList(nn.Linear(projected_size, projected_size) for _ in range(num_layers))
        self.norms = nn.ModuleList(nn.LayerNorm(projected_size, eps=1e-12) for _ in range(num_layers))
        self.up = nn.Linear(projected_size, hidden_size)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=0.02)
                nn.init.zeros_(module.bias)

    def forward(self, hidden_states: torch.Tensor, attention_mask: Optional[torch.Tensor]) -> torch.Tensor:
        mask = additive_mask(attention_mask, hidden_states.dtype)
        x = self.down(hidden_states)
        for attention, output, norm in zip(self.attention, self.output, self.norms):
            x = norm(x + output(attention(x, mask)))
        return hidden_states + self.up(x)


class TopTransformerLayer(nn.Module):
    """The paper's "BERT layer on top": one fresh transformer layer of the encoder's own kind."""

    def __init__(self, encoder: PreTrainedModel):
        super().__init__()
        layer_class = type(encoder.encoder.layer[-1])
        self.layer = layer_class(encoder.config)
        self.layer.apply(encoder._init_weights)

    def forward(self, hidden_states: torch.Tensor, attention_mask: Optional[torch.Tensor]) -> torch.Tensor:
        return self.layer(hidden_states, attention_mask=additive_mask(attention_mask, hidden_states.dtype))[0]


class MultiTaskModel(nn.Module):
    """A shared encoder with task-specific parameters; ``forward(task=..., ...)`` runs one task."""

    _keys_to_ignore_on_save = None  # read by Trainer when it reloads the best checkpoint

    def __init__(self, encoder: PreTrainedModel, tasks: Dict[str, TaskSpec], method: Method, base: str):
        super().__init__()
        check_base_mode(method, base)
        self.tasks = dict(tasks)
        self.method = method
        self.base_mode = base
        hidden = encoder.config.hidden_size
        self.tops = nn.ModuleDict()
        if method.kind == "adapters":
            adapters.init(encoder)
            for task in tasks:
                encoder.add_adapter(task, config=method.adapters_config())
        elif method.kind == "peft":
            encoder = _add_peft_lora(encoder, list(tasks), method.overrides)
        elif method.kind == "top":
            for task in tasks:
                self.tops[task] = _top_module(method, encoder)
        self.encoder = encoder
        self.dropout = nn.Dropout(getattr(encoder.config, "hidden_dropout_prob", 0.1))
        self.heads = nn.ModuleDict({name: nn.Linear(hidden, spec.num_labels) for name, spec in tasks.items()})
        for head in self.heads.values():
            nn.init.normal_(head.weight, std=0.02)
            nn.init.zeros_(head.bias)
        self._set_trainable()

    # --- what is shared and what belongs to a task ---

    @property
    def backbone(self) -> PreTrainedModel:
        """The transformers encoder underneath (PEFT's wrapper removed)."""
        return self.encoder.get_base_model() if self.method.kind == "peft" else self.encoder

    def task_parameters(self, task: str) -> Iterator[Tuple[str, nn.Parameter]]:
        """Named parameters that belong to ``task`` only (adapter or top layers, and head)."""
        for name, param in self.named_parameters():
            if _belongs_to(name, task, self.method.kind):
                yield name, param

    def shared_parameters(self) -> Iterator[Tuple[str, nn.Parameter]]:
        """Named parameters of the shared base (trained only with ``base="finetune"``)."""
        for name, param in self.named_parameters():
            if not any(_belongs_to(name, task, self.method.kind) for task in self.tasks):
                yield name, param

    def trainable_parameters(self) -> List[nn.Parameter]:
        """Everything the optimiser must hold. Not read from ``requires_grad``: PEFT switches that
        flag off for the adapters of the tasks that are not active in the current step."""
        params = [p for task in self.tasks for _, p in self.task_parameters(task)]
        if self.base_mode == "finetune":
            params += [p for _, p in self.shared_parameters()]
        return params

    def _set_trainable(self) -> None:
        for param in self.parameters():
            param.requires_grad = False
        # Kept for `activated`, which restores the flags on every PEFT step (hot path: no name matching).
        self._trainable = self.trainable_parameters()
        for param in self._trainable:
            param.requires_grad = True

    # --- forward ---

    @contextlib.contextmanager
    def activated(self, task: str):
        """Makes ``task``'s parameters the active ones for the encoder (thread-safe for adapters)."""
        if task not in self.tasks:
            raise ConfigError(f"task {task!r} is not part of this model; its tasks are {list(self.tasks)}")
        if self.method.kind == "adapters":
            with AdapterSetup(task):
                yield
        else:
            if self.method.kind == "peft":
                self.encoder.set_adapter(task)
                # set_adapter also freezes the other tasks' LoRA weights; keep every task trainable
                # so that a mixed-task step (MT-Uncertainty) still reaches all of them.
                for param in self._trainable:
                    param.requires_grad = True
            yield

    def forward(
        self,
        task: str,
        input_ids: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        token_type_ids: Optional[torch.Tensor] = None,
        labels: Optional[torch.Tensor] = None,
    ) -> Dict[str, torch.Tensor]:
        with self.activated(task):
            kwargs = {"attention_mask": attention_mask}
            if token_type_ids is not None:
                kwargs["token_type_ids"] = token_type_ids
            sequence = self.encoder(input_ids=input_ids, **kwargs).last_hidden_state
        if task in self.tops:
            sequence = self.tops[task](sequence, attention_mask)
        pooled = self.backbone.pooler(sequence)
        logits = self.heads[task](self.dropout(pooled))
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = task_loss(self.tasks[task], logits, labels)
        return out


def task_loss(spec: TaskSpec, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """MSE for regression tasks (STS-B), cross-entropy otherwise."""
    if spec.is_regression:
        return F.mse_loss(logits.squeeze(-1), labels.to(logits.dtype))
    return F.cross_entropy(logits, labels)


def build_model(
    model_name_or_path: str, tasks: Dict[str, TaskSpec], method: Method, base: str, **model_kwargs
) -> MultiTaskModel:
    """Loads the pretrained encoder (hub name or local folder) and adds the method's task parameters."""
    encoder = AutoModel.from_pretrained(model_name_or_path, **model_kwargs)
    if getattr(encoder, "pooler", None) is None:
        raise ConfigError(
            f"{model_name_or_path}: the harness uses the encoder's pretrained pooler as the paper does; "
            "this model has none (load it with add_pooling_layer=True)"
        )
    return MultiTaskModel(encoder, tasks, method, base)


def _top_module(method: Method, encoder: PreTrainedModel) -> nn.Module:
    if method.top == "bert_layer":
        return TopTransformerLayer(encoder)
    from .config import PALsConfig

    config = PALsConfig(**method.overrides)
    return TopProjectedAttention(
        encoder.config.hidden_size, config.projected_size(encoder.config.hidden_size), config.num_attention_heads
    )


def _add_peft_lora(encoder: PreTrainedModel, tasks: List[str], overrides: dict):
    from peft import LoraConfig, get_peft_model

    settings = {"r": 8, "lora_alpha": 8, "lora_dropout": 0.0, "target_modules": ["query", "value"], **overrides}
    try:
        config = LoraConfig(**settings)
    except TypeError as err:
        raise ConfigError(f"peft-lora settings {overrides}: {err}") from err
    model = get_peft_model(encoder, config, adapter_name=tasks[0])
    for task in tasks[1:]:
        model.add_adapter(task, config)
    return model


def _belongs_to(name: str, task: str, kind: str) -> bool:
    if name.startswith((f"heads.{task}.", f"tops.{task}.")):
        return True
    if kind == "adapters":
        return f".adapters.{task}." in name or f"shared_parameters.{task}." in name or f"loras.{task}." in name
    if kind == "peft":
        return f".lora_A.{task}." in name or f".lora_B.{task}." in name
    return False
