"""One base serving many tasks: load several task exports onto one model and answer requests that
each name their task, in one forward per batch where the method can route rows by task.

    predictor = MultiTaskPredictor.from_exports("runs/main_job/export")
    predictor.predict([
        {"task": "sst2", "text": "a gripping, funny film"},
        {"task": "rte", "text": "A man is sleeping.", "text_b": "Nobody sleeps."},
    ])
    # [Prediction(task='sst2', label='1', ...), Prediction(task='rte', label='not_entailment', ...)]
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from ..errors import ConfigError, DataError
from .export.manifest import read_task_manifest
from .export.read import load_tasks, load_tokenizer, task_folders
from .model import MultiTaskModel
from .readers import MissingKey, getter, iter_records

DEFAULT_MAX_LENGTH = 128


@dataclass(frozen=True)
class Prediction:
    """One request's answer: the label as the task's files write it (or a score), and the raw outputs."""

    task: str
    label: str | float
    logits: tuple[float, ...]


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
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_length = max_length if isinstance(max_length, Mapping) else {t: max_length for t in model.tasks}
        self.batch_size = batch_size
        # Batches of similar length pad little; off, batches follow the order of the requests (a
        # serving window), and a batch that mixes tasks pads to its longest request.
        self.sort_by_length = sort_by_length
        self.task_index = {task: i for i, task in enumerate(model.tasks)}
        # One forward per batch when the method routes rows by task; else one per task in the batch.
        self.one_forward = model.backend.supports_mixed_batches

    @classmethod
    def from_exports(cls, exports, base=None, *, allow_pickle: bool = False, batch_size: int = 64):
        """Tasks from export folders (or a run's export folder), each with the max length it was trained with."""
        folders = [
            f
            for item in ([exports] if isinstance(exports, (str, os.PathLike)) else exports)
            for f in task_folders(item)
        ]
        model = load_tasks(folders, base, allow_pickle=allow_pickle)
        manifests = {folder: read_task_manifest(folder) for folder in folders}
        lengths = {m.task: m.max_length or DEFAULT_MAX_LENGTH for m in manifests.values()}
        # checked against the tokenizer files recorded at export
        tokenizer = load_tokenizer(folders[0], base=str(base) if isinstance(base, (str, os.PathLike)) else None)
        return cls(model, tokenizer, lengths, batch_size)

    def predict(self, requests: Sequence[Mapping]) -> list[Prediction]:
        """``requests``: mappings with ``task``, ``text`` and, for pair tasks, ``text_b``; answers in order."""
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
        where = request.get("where", f"request {position}")
        task = request.get("task")
        if task not in self.task_index:
            raise ConfigError(f"{where}: task {task!r} is not served here; tasks: {list(self.task_index)}")
        spec = self.model.tasks[task]
        texts = [request.get("text")] + ([request.get("text_b")] if spec.is_pair else [])
        if not all(isinstance(t, str) for t in texts):
            needed = "'text' and 'text_b'" if spec.is_pair else "'text'"
            raise ConfigError(f"{where}: task {task!r} needs {needed} as strings")
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
        batch = self.tokenizer.pad(features, return_tensors="pt")
        return {k: v.to(device) for k, v in batch.items()}

    def _decode(self, task: str, logits: np.ndarray) -> Prediction:
        spec = self.model.tasks[task]
        if spec.is_regression:
            low, high = spec.label_range or (-np.inf, np.inf)
            label = float(np.clip(logits[0], low, high))
        else:
            label = spec.labels[int(logits.argmax())]
        return Prediction(task, label, tuple(float(x) for x in logits))


REQUEST_FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl"}


def read_requests(path: str | os.PathLike) -> list[dict]:
    """Requests from a CSV / TSV / JSON Lines file with columns ``task``, ``text`` and (for pair
    tasks) ``text_b``; an ``id`` column, if present, is kept."""
    path = Path(path)
    fmt = REQUEST_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise DataError(f"{path}: name the file .csv, .tsv or .jsonl so that its format is known")
    columns, rows, unit = iter_records(path, fmt, True, None)
    wanted = [c for c in ("id", "task", "text", "text_b") if c in columns or c in ("task", "text")]
    getters = {name: getter(path, columns, fmt, name) for name in wanted}
    requests = []
    for position, row in rows:
        try:
            requests.append({name: get(row) for name, get in getters.items()})
        except MissingKey as err:
            raise DataError(f"{path}, {unit} {position}: {err}") from None
        requests[-1]["where"] = f"{path}, {unit} {position}"
    return requests
