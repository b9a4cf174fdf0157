"""Backend for the paper's "on top" variants (Table 3): per-task layers above the shared encoder."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from transformers import PreTrainedModel

from ...errors import ConfigError
from ...pals import PALsConfig, ProjectedSelfAttention
from ...pals.layer import additive_mask  # (B, T) padding mask -> BERT's additive (B, 1, 1, T)
from .backend import MethodBackend, register_backend
from .weights import load_module, save_tensors


class TopProjectedAttention(nn.Module):
    """The paper's "projected attention on top": project the encoder output down once (``V_E``), run
    ``num_layers`` attention blocks in the small space (with an output matrix here, unlike PALs inside
    BERT, and a LayerNorm each), project back up (``V_D``) and add the result to the encoder output.
    1.10x BERT-base for 8 tasks at ``d_s = 204``, as in the paper."""

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

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        mask = additive_mask(attention_mask, "keep", hidden_states.dtype)
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

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        return self.layer(hidden_states, attention_mask=additive_mask(attention_mask, "keep", hidden_states.dtype))[0]


@register_backend
class TopLayersBackend(MethodBackend):
    kind = "top"
    weight_files = ("top.safetensors", "top.bin")
    supports_mixed_batches = False  # each task runs its own layers on its own rows

    @classmethod
    def check_settings(cls, method) -> None:
        if method.top == "bert_layer":
            return super().check_settings(method)
        try:
            PALsConfig(**method.overrides)
        except TypeError as err:
            raise ConfigError(f"method {method.spec!r}: {err}; settings are those of PALsConfig") from None

    def attach(self, model, encoder, tasks):
        for task in tasks:
            model.tops[task] = self._build(encoder)
        return encoder

    def _build(self, encoder: PreTrainedModel) -> nn.Module:
        if self.method.top == "bert_layer":
            return TopTransformerLayer(encoder)
        config = PALsConfig(**self.method.overrides)
        hidden = encoder.config.hidden_size
        return TopProjectedAttention(hidden, config.projected_size(hidden), config.num_attention_heads)

    def task_modules(self, model, task) -> list[nn.Module]:
        return [model.tops[task]]

    def after_encoder(self, model, task, sequence, attention_mask):
        return model.tops[task](sequence, attention_mask)

    def save_task(self, model, task, folder: Path, base_model_name) -> None:
        save_tensors(folder / self.weight_files[0], model.tops[task].state_dict(), task, "top")

    def load_task(self, model, task, folder: Path, weights: Path) -> None:
        load_module(model.tops[task], weights)
