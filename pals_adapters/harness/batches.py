"""Tokenised task data and the per-step batch stream of a multi-task run.

Item ``j`` of `MultiTaskBatches` is the whole batch of one rank at one step
(``step, rank = divmod(j, world_size)``), a pure function of the seed. So the stream is
deterministic, a resumed run continues it exactly (the Trainer skips the first items), and
with accelerate's usual round-robin sharding every rank trains the same task at every step.
"""

from collections import OrderedDict
from typing import Dict, List, Optional

import datasets
import numpy as np
from torch.utils.data import Dataset
from transformers import DataCollatorWithPadding, PreTrainedTokenizerBase

from .sampling import TaskSampler
from .tasks import TaskSpec

MODEL_COLUMNS = ("input_ids", "attention_mask", "token_type_ids", "label")


def tokenize(
    dataset: datasets.Dataset, spec: TaskSpec, tokenizer: PreTrainedTokenizerBase, max_length: int
) -> datasets.Dataset:
    """Adds the model inputs (no padding: batches are padded to their own longest row)."""

    def encode(rows):
        pair = (rows["text_a"], rows["text_b"]) if spec.is_pair else (rows["text_a"],)
        return tokenizer(*pair, truncation=True, max_length=max_length)

    encoded = dataset.map(encode, batched=True, desc=f"tokenising {spec.name}")
    return encoded.remove_columns([c for c in encoded.column_names if c not in MODEL_COLUMNS])


def rows_to_features(dataset: datasets.Dataset, indices) -> List[dict]:
    """Rows as the list of dicts that the padding collator takes."""
    columns = dataset[list(indices)]
    return [dict(zip(columns, values)) for values in zip(*columns.values())]


class MultiTaskBatches(Dataset):
    """The training batches of every step and rank (see the module docstring).

    Each task's examples are drawn from a stream of seeded permutations of its training set,
    one permutation per pass, so every example is seen once per pass whatever the task mix.
    With ``all_tasks=True`` (MT-Uncertainty) an item holds one candidate batch of every task.
    """

    def __init__(
        self,
        train_sets: Dict[str, datasets.Dataset],
        sampler: TaskSampler,
        tokenizer: PreTrainedTokenizerBase,
        batch_size: int,
        total_steps: int,
        world_size: int = 1,
        seed: int = 0,
        all_tasks: bool = False,
    ):
        self.train_sets = train_sets
        self.task_names = list(train_sets)
        if sampler.task_names != self.task_names:
            raise ValueError(f"sampler tasks {sampler.task_names} differ from the data's {self.task_names}")
        self.collate = DataCollatorWithPadding(tokenizer)
        self.batch_size = batch_size
        self.total_steps = total_steps
        self.world_size = world_size
        self.seed = seed
        self.all_tasks = all_tasks
        self.schedule = sampler.sequence(0, total_steps)
        # How many earlier steps chose the same task: the position in that task's stream.
        seen = [0] * len(self.task_names)
        self.occurrence = []
        for task in self.schedule:
            self.occurrence.append(seen[task])
            seen[task] += 1
        self._permutations: "OrderedDict[tuple, np.ndarray]" = OrderedDict()

    def __len__(self) -> int:
        return self.total_steps * self.world_size

    def __getitem__(self, item: int) -> dict:
        step, rank = divmod(item, self.world_size)
        if self.all_tasks:
            draw = step * self.world_size + rank
            return {"candidates": {name: self.task_batch(t, draw) for t, name in enumerate(self.task_names)}}
        task = self.schedule[step]
        draw = self.occurrence[step] * self.world_size + rank
        return {"task": self.task_names[task], **self.task_batch(task, draw)}

    def task_batch(self, task: int, draw: int) -> dict:
        """The ``draw``-th batch of ``task``'s example stream, padded and as tensors."""
        dataset = self.train_sets[self.task_names[task]]
        size = len(dataset)
        positions = range(draw * self.batch_size, (draw + 1) * self.batch_size)
        indices = [int(self._permutation(task, pos // size, size)[pos % size]) for pos in positions]
        return dict(self.collate(rows_to_features(dataset, indices)))

    def _permutation(self, task: int, epoch: int, size: int) -> np.ndarray:
        key = (task, epoch)
        if key not in self._permutations:
            self._permutations[key] = np.random.default_rng([self.seed, task, epoch]).permutation(size)
            if len(self._permutations) > 4 * len(self.task_names):
                self._permutations.popitem(last=False)
        return self._permutations[key]


def unwrap_single_item(items: List[dict]) -> dict:
    """DataLoader collate for `MultiTaskBatches` (batch_size=1: each item already is a batch)."""
    (item,) = items
    return item
