"""One base serving many tasks: load several task exports onto one model and answer requests that
each name their task, in one forward per batch where the method can route rows by task.

    predictor = MultiTaskPredictor.from_exports("runs/main_job/export")
    predictor.predict([
        {"task": "sst2", "text": "a gripping, funny film"},
        {"task": "rte", "text": "A man is sleeping.", "text_b": "Nobody sleeps."},
    ])
    # [Prediction(task='sst2', label='1', ...), Prediction(task='rte', label='not_entailment', ...)]

`read_requests` reads a file of requests (each JSON Lines record on its own), `write_answers` writes
the answers as TSV / CSV (quoted where a field needs it) or JSON Lines (exact).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from ...errors import ConfigError
from ..export.manifest import read_task_manifest
from ..export.read import load_tasks, load_tokenizer, task_folders
from ..methods.model import MultiTaskModel
from ..tasks.spec import TaskSpec

DEFAULT_MAX_LENGTH = 128
REQUEST_FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl"}
ANSWER_FORMATS = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl"}


@dataclass(frozen=True)
class Prediction:
    """One request's answer: the label as the task's files write it (or a score), the raw outputs, and for
    a classification task the probability of each label (softmax of the logits, in the task's label order)."""

    task: str
    label: str | float
    logits: tuple[float, ...]
    probabilities: tuple[float, ...] | None = None

    labels: tuple[str, ...] | None = None  # the task's labels, in the order of ``probabilities``

    @property
    def probability(self) -> float | None:
        """The probability of the predicted label (None for a regression task)."""
        return max(self.probabilities) if self.probabilities else None

    @property
    def by_label(self) -> dict[str, float] | None:
        """The probability of each label by its name (``{"negative": 0.1, "positive": 0.9}``); None for a
        regression task."""
        return dict(zip(self.labels, self.probabilities)) if self.probabilities and self.labels else None


def usable_positions(config: Any) -> int | None:
    """Tokens per example a base takes: its ``max_position_embeddings`` (a model config or its dict), less
    the padding offset of RoBERTa-style models; None when the config does not say."""
    get = config.get if isinstance(config, Mapping) else lambda name, default=None: getattr(config, name, default)
    positions = get("max_position_embeddings")
    if not isinstance(positions, int):
        return None
    if get("model_type") in ("roberta", "xlm-roberta", "camembert"):
        positions -= (get("pad_token_id") or 0) + 1  # their positions start after the padding index
    return positions


def check_max_length(value, positions: int | None, what: str = "max_length") -> int:
    """``value`` if it is a whole number from 1 to the base's positions, else a ConfigError saying so."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or (positions and value > positions):
        limit = f"1 to {positions} (the base's positions)" if positions else "a whole number >= 1"
        raise ConfigError(f"{what} {value!r}: give {limit}")
    return value


def check_batch_size(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"batch_size={value!r}: give a whole number >= 1 (requests per forward)")
    return value


def type_name(value) -> str:
    return "missing" if value is None else f"{type(value).__name__} {value!r}"


def checked_request(position: int, request, tasks: Mapping[str, TaskSpec]) -> tuple[str, list[str]]:
    """(task, texts) of one request, or ConfigError naming the request and what to fix. Each request stands
    alone: ``task``, ``text`` and, for a pair task, ``text_b``, as non-empty strings; a single-text task
    refuses a ``text_b`` (a sign of the wrong task)."""
    if not isinstance(request, Mapping):
        raise ConfigError(f"request {position}: expected a mapping with 'task' and 'text', found {type_name(request)}")
    where = request.get("where", f"request {position}")
    task = request.get("task")
    if not isinstance(task, str):
        raise ConfigError(f"{where}: 'task' must name a task (a string), found {type_name(task)}; tasks: {list(tasks)}")
    if task not in tasks:
        raise ConfigError(f"{where}: task {task!r} is not served here; tasks: {list(tasks)}")
    spec = tasks[task]
    names = ["text", "text_b"] if spec.is_pair else ["text"]
    texts = [request.get(name) for name in names]
    for name, text in zip(names, texts):
        if not isinstance(text, str) or not text.strip():
            needed = "'text' and 'text_b'" if spec.is_pair else "'text'"
            found = "empty" if isinstance(text, str) else type_name(text)
            raise ConfigError(f"{where}: task {task!r} needs {needed} as non-empty strings; {name!r} is {found}")
    if not spec.is_pair and request.get("text_b") not in (None, ""):
        raise ConfigError(
            f"{where}: task {task!r} takes one text ('text'), but the request also has 'text_b'; check the task "
            "name (leave 'text_b' out or empty for single-text tasks)"
        )
    return task, texts


SHOWN_PROBLEMS = 20  # the lines a message lists; the count says how many more


def every_problem(problems: list[str], what: str) -> str:
    """One message for every bad request or row (the first SHOWN_PROBLEMS, and how many more), one per line."""
    shown = problems[:SHOWN_PROBLEMS]
    more = f"\n... and {len(problems) - len(shown)} more" if len(problems) > len(shown) else ""
    return f"{len(problems)} {what} to fix:\n" + "\n".join(shown) + more


def check_requests(requests: Sequence, tasks: Mapping[str, TaskSpec]) -> None:
    """Every request checked (`checked_request`) before the model loads; one ConfigError naming each bad one."""
    problems = []
    for position, request in enumerate(requests):
        try:
            checked_request(position, request, tasks)
        except ConfigError as err:
            problems.append(str(err))
    if problems:
        raise ConfigError(every_problem(problems, "requests"))


@contextlib.contextmanager
def _quiet_padding(tokenizer) -> None:
    """`tokenizer.pad` on encoded requests, without transformers' advice to pad while tokenising (padding
    comes after sorting and batching here, on purpose)."""
    key = "Asking-to-pad-a-fast-tokenizer"
    warnings = getattr(tokenizer, "deprecation_warnings", None)
    if warnings is None:
        yield
        return
    before = warnings.get(key, False)
    warnings[key] = True
    try:
        yield
    finally:
        warnings[key] = before


class MultiTaskPredictor:
    """Answers requests for the tasks of one `MultiTaskModel`; each request names its task."""

    def __init__(
        self,
        model: MultiTaskModel,
        tokenizer: PreTrainedTokenizerBase,
        max_length: int | Mapping[str, int] = DEFAULT_MAX_LENGTH,
        batch_size: int = 64,
        sort_by_length: bool = True,
    ):
        self.batch_size = check_batch_size(batch_size)
        lengths = dict(max_length) if isinstance(max_length, Mapping) else {t: max_length for t in model.tasks}
        missing = [task for task in model.tasks if task not in lengths]
        if missing:
            raise ConfigError(f"max_length: give a length for tasks {missing} too (or one number for all)")
        positions = usable_positions(model.backbone.config)
        for task, length in lengths.items():
            check_max_length(length, positions, f"max_length of task {task!r}")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_length = lengths
        # Batches of similar length pad little; off, batches follow the order of the requests (a
        # serving window), and a batch that mixes tasks pads to its longest request.
        self.sort_by_length = sort_by_length
        self.task_index = {task: i for i, task in enumerate(model.tasks)}
        # One forward per batch when the method routes rows by task; else one per task in the batch.
        self.one_forward = model.backend.supports_mixed_batches

    @classmethod
    def from_exports(
        cls,
        exports,
        base=None,
        *,
        allow_pickle: bool = False,
        batch_size: int = 64,
        max_length: int | None = None,
    ):
        """Tasks from export folders (or a run's export folder), each with the max length it was trained
        with (``max_length``: one for all). Lengths and batch size are checked before anything loads, and the
        tokenizer against the record of every task."""
        check_batch_size(batch_size)
        folders = [
            f
            for item in ([exports] if isinstance(exports, (str, os.PathLike)) else exports)
            for f in task_folders(item)
        ]
        manifests = [read_task_manifest(folder) for folder in folders]
        lengths = {}
        for folder, manifest in zip(folders, manifests):
            length = max_length if max_length is not None else manifest.max_length or DEFAULT_MAX_LENGTH
            positions = usable_positions(manifest.base_config) if base is None else None
            what = "max_length" if max_length is not None else f"max_length of {folder}"
            lengths[manifest.task] = check_max_length(length, positions, what)
        model = load_tasks(folders, base, allow_pickle=allow_pickle)
        tokenizer = load_tokenizer(folders, base=str(base) if isinstance(base, (str, os.PathLike)) else None)
        return cls(model, tokenizer, lengths, batch_size)

    def predict(self, requests: Sequence[Mapping]) -> list[Prediction]:
        """``requests``: mappings with ``task``, ``text`` and, for pair tasks, ``text_b``; answers in order.
        Every request is checked before any is answered."""
        check_requests(requests, self.model.tasks)  # every bad request named at once, before any is answered
        encoded = [self._encode(i, request) for i, request in enumerate(requests)]
        order = list(range(len(encoded)))
        if self.sort_by_length:
            order.sort(key=lambda i: -len(encoded[i][1]["input_ids"]))
        answers: list[Prediction | None] = [None] * len(encoded)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            for position, answer in zip(chunk, self._answer([encoded[i] for i in chunk])):
                answers[position] = answer
        return answers

    def _encode(self, position: int, request: Mapping) -> tuple[str, dict]:
        task, texts = checked_request(position, request, self.model.tasks)
        return task, self.tokenizer(*texts, truncation=True, max_length=self.max_length[task])

    @torch.no_grad()
    def _answer(self, encoded: list[tuple[str, dict]]) -> list[Prediction]:
        device = next(self.model.parameters()).device
        tasks = [task for task, _ in encoded]
        logits: list[np.ndarray | None] = [None] * len(encoded)
        if self.one_forward:
            batch = self._pad([features for _, features in encoded], device)
            task_ids = torch.tensor([self.task_index[t] for t in tasks], device=device)
            for task, rows in self.model(task_ids=task_ids, **batch)["logits"].items():
                positions = [i for i, t in enumerate(tasks) if t == task]
                for position, row in zip(positions, rows.float().cpu().numpy()):
                    logits[position] = row
        else:  # one forward per task, each padded to its own longest request
            for task in dict.fromkeys(tasks):
                positions = [i for i, t in enumerate(tasks) if t == task]
                batch = self._pad([encoded[i][1] for i in positions], device)
                rows = self.model(task=task, **batch)["logits"]
                for position, row in zip(positions, rows.float().cpu().numpy()):
                    logits[position] = row
        return [self._decode(task, row) for task, row in zip(tasks, logits)]

    def _pad(self, features: list[dict], device) -> dict:
        with _quiet_padding(self.tokenizer):
            batch = self.tokenizer.pad(features, return_tensors="pt")
        return {k: v.to(device) for k, v in batch.items()}

    def _decode(self, task: str, logits: np.ndarray) -> Prediction:
        return decode(self.model.tasks[task], logits)


def decode(spec: TaskSpec, logits: np.ndarray) -> Prediction:
    """A task's answer from its logits: the label (a score clipped to the task's range for regression)
    and, for classification, the probability of each label."""
    if spec.is_regression:
        low, high = spec.label_range or (-np.inf, np.inf)
        return Prediction(spec.name, float(np.clip(logits[0], low, high)), tuple(float(x) for x in logits))
    values = np.asarray(logits, dtype=np.float64)
    exp = np.exp(values - values.max())
    probabilities = tuple(float(p) for p in exp / exp.sum())
    label = spec.labels[int(np.argmax(values))]
    return Prediction(spec.name, label, tuple(float(x) for x in logits), probabilities, tuple(spec.labels))
