"""Tokenised task data and the per-step batch stream of a multi-task run.

Item ``j`` of `MultiTaskBatches` is the whole batch of one rank at one step
(``step, rank = divmod(j, world_size)``), a pure function of the seed. So the stream is
deterministic, a resumed run continues it exactly (the Trainer skips the first items), and
with accelerate's usual round-robin sharding every rank trains the same task at every step.
"""

from collections import OrderedDict

import datasets
import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset
from transformers import DataCollatorWithPadding, PreTrainedTokenizerBase

from ..tasks.spec import TaskSpec
from .sampling import TaskSampler

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


def rows_to_features(dataset: datasets.Dataset, indices) -> list[dict]:
    """Rows as the list of dicts that the padding collator takes."""
    columns = dataset[list(indices)]
    return [dict(zip(columns, values)) for values in zip(*columns.values())]


class TaskFeatures:
    """A tokenised split held once as padded integer arrays, so that a batch is an array slice.

    ``batch(indices)`` equals ``DataCollatorWithPadding(tokenizer)`` applied to those rows (right
    padding to the batch's longest row, ``label`` renamed ``labels``) without rebuilding Python
    dicts at every step: on the 5-task GLUE mix that rebuilding was a measurable share of a step.
    """

    def __init__(self, dataset: datasets.Dataset, pad_token_id: int = 0):
        ids = dataset["input_ids"]
        self.lengths = np.fromiter((len(row) for row in ids), dtype=np.int64, count=len(ids))
        width = int(self.lengths.max()) if len(ids) else 0
        self.arrays = {"input_ids": _pad(ids, width, pad_token_id)}
        self.arrays["attention_mask"] = (np.arange(width)[None, :] < self.lengths[:, None]).astype(np.int64)
        if "token_type_ids" in dataset.column_names:
            self.arrays["token_type_ids"] = _pad(dataset["token_type_ids"], width, 0)
        self.labels = None
        if "label" in dataset.column_names:
            labels = np.asarray(dataset["label"])
            self.labels = labels.astype(np.float32) if labels.dtype.kind == "f" else labels.astype(np.int64)

    def __len__(self) -> int:
        return len(self.lengths)

    def batch(self, indices) -> dict:
        indices = np.asarray(indices, dtype=np.int64)
        width = int(self.lengths[indices].max())
        out = {name: torch.from_numpy(array[indices, :width]) for name, array in self.arrays.items()}
        if self.labels is not None:
            out["labels"] = torch.from_numpy(self.labels[indices])
        return out


def _pad(rows, width: int, value: int) -> np.ndarray:
    array = np.full((len(rows), width), value, dtype=np.int64)
    for i, row in enumerate(rows):
        array[i, : len(row)] = row
    return array


def group_by_length(
    order: np.ndarray,
    lengths: np.ndarray,
    batch_size: int,
    offset: int,
    rng: np.random.Generator,
    group_batches: int = 50,
) -> np.ndarray:
    """``order`` (one pass over a task's examples) rearranged so that each batch holds examples
    of similar length: runs of ``group_batches`` batches are sorted by length and the batches of a
    run shuffled, as transformers' ``LengthGroupedSampler`` does. The result is a permutation of
    ``order`` (every example once per pass), only moved within its run.

    ``offset``: where the first batch boundary falls in ``order`` (the stream of passes is cut into
    batches continuously, so a pass need not start on a boundary); rows before it stay in place.
    """
    order = order.copy()
    span = batch_size * group_batches
    for start in range(offset, len(order), span):
        run = order[start : start + span]
        run = run[np.argsort(-lengths[run], kind="stable")]
        full = len(run) // batch_size
        blocks = [run[i * batch_size : (i + 1) * batch_size] for i in range(full)]
        blocks = [blocks[i] for i in rng.permutation(full)] + [run[full * batch_size :]]
        order[start : start + span] = np.concatenate(blocks)
    return order


class MultiTaskBatches(Dataset):
    """The training batches of every step and rank (see the module docstring).

    Each task's examples are drawn from a stream of seeded permutations of its training set,
    one permutation per pass, so every example is seen once per pass whatever the task mix.
    With ``group_by_length`` each permutation is rearranged so that a batch holds examples of
    similar length (less padding; still every example once per pass, still a function of the seed).
    With ``all_tasks=True`` (MT-Uncertainty) an item holds one candidate batch of every task.
    With ``mixed=True`` an item mixes tasks: each of its ``batch_size`` examples takes a task drawn
    from the sampler's distribution at that step (a function of the seed, step and rank), the
    examples of each task come next from that task's stream, and ``task_ids`` says whose each row is.
    ``features="collator"`` builds batches the older way (``dataset[rows]`` and the padding
    collator at every step; same tensors), kept for the throughput benchmark.
    """

    def __init__(
        self,
        train_sets: dict[str, datasets.Dataset],
        sampler: TaskSampler,
        tokenizer: PreTrainedTokenizerBase,
        batch_size: int,
        total_steps: int,
        world_size: int = 1,
        seed: int = 0,
        all_tasks: bool = False,
        group_by_length: bool = False,
        features: str = "arrays",
        mixed: bool = False,
    ):
        self.train_sets = train_sets
        self.task_names = list(train_sets)
        if sampler.task_names != self.task_names:
            raise ValueError(f"sampler tasks {sampler.task_names} differ from the data's {self.task_names}")
        if features not in ("arrays", "collator"):
            raise ValueError(f"features={features!r}: choose 'arrays' or 'collator'")
        if mixed and (all_tasks or features != "arrays"):
            raise ValueError("mixed batches are built from the feature arrays, one sampler draw per example")
        self.collate = DataCollatorWithPadding(tokenizer)
        self.features = features
        pad = tokenizer.pad_token_id or 0
        self.pad_token_id = pad
        # The arrays are needed for the lengths even when batches come from the collator.
        self.task_features = (
            [TaskFeatures(train_sets[name], pad) for name in self.task_names]
            if (features == "arrays" or group_by_length)
            else None
        )
        self.batch_size = batch_size
        self.total_steps = total_steps
        self.world_size = world_size
        self.seed = seed
        self.all_tasks = all_tasks
        self.group_by_length = group_by_length
        self.schedule = sampler.sequence(0, total_steps)
        # How many earlier steps chose the same task: the position in that task's stream.
        seen = [0] * len(self.task_names)
        self.occurrence = []
        for task in self.schedule:
            self.occurrence.append(seen[task])
            seen[task] += 1
        self.mixed = mixed
        if mixed:
            self.mix_counts, self.mix_starts = self._mixed_schedule(sampler)
        self._permutations: OrderedDict[tuple, np.ndarray] = OrderedDict()

    def _mixed_schedule(self, sampler: TaskSampler) -> tuple:
        """Examples per task of every item, and where each task's stream stands before it."""
        items = self.total_steps * self.world_size
        counts = np.zeros((items, len(self.task_names)), dtype=np.int64)
        for item in range(items):
            step, rank = divmod(item, self.world_size)
            draws = np.random.default_rng([self.seed, step, rank, 7]).choice(
                len(self.task_names), size=self.batch_size, p=sampler.probabilities(step)
            )
            counts[item] = np.bincount(draws, minlength=len(self.task_names))
        starts = np.cumsum(counts, axis=0) - counts  # exclusive running sum per task
        return counts, starts

    def __len__(self) -> int:
        return self.total_steps * self.world_size

    def __getitem__(self, item: int) -> dict:
        step, rank = divmod(item, self.world_size)
        if self.mixed:
            return self.mixed_batch(item)
        if self.all_tasks:
            draw = step * self.world_size + rank
            return {"candidates": {name: self.task_batch(t, draw) for t, name in enumerate(self.task_names)}}
        task = self.schedule[step]
        draw = self.occurrence[step] * self.world_size + rank
        return {"task": self.task_names[task], **self.task_batch(task, draw)}

    def task_indices(self, task: int, draw: int) -> list[int]:
        """Row indices of the ``draw``-th batch of ``task``'s example stream."""
        return self.stream_indices(task, draw * self.batch_size, self.batch_size)

    def stream_indices(self, task: int, start: int, count: int) -> list[int]:
        """Row indices at positions ``start .. start + count - 1`` of ``task``'s example stream."""
        size = len(self.train_sets[self.task_names[task]])
        return [int(self._permutation(task, pos // size, size)[pos % size]) for pos in range(start, start + count)]

    def mixed_batch(self, item: int) -> dict:
        """One batch of several tasks (rows grouped by task, in task order) with ``task_ids``."""
        parts, task_ids = [], []
        for task, count in enumerate(self.mix_counts[item]):
            if count:
                indices = self.stream_indices(task, int(self.mix_starts[item, task]), int(count))
                parts.append(self.task_features[task].batch(indices))
                task_ids += [task] * int(count)
        width = max(part["input_ids"].shape[1] for part in parts)
        pads = {"input_ids": self.pad_token_id, "attention_mask": 0, "token_type_ids": 0}
        batch = {
            name: torch.cat([F.pad(part[name], (0, width - part[name].shape[1]), value=value) for part in parts])
            for name, value in pads.items()
            if name in parts[0]
        }
        # one dtype for every task's labels: class indices are exact in float32
        batch["labels"] = torch.cat([part["labels"].to(torch.float32) for part in parts])
        batch["task_ids"] = torch.tensor(task_ids, dtype=torch.long)
        return batch

    def task_batch(self, task: int, draw: int) -> dict:
        """The ``draw``-th batch of ``task``'s example stream, padded and as tensors."""
        indices = self.task_indices(task, draw)
        if self.features == "arrays":
            return self.task_features[task].batch(indices)
        return dict(self.collate(rows_to_features(self.train_sets[self.task_names[task]], indices)))

    def _permutation(self, task: int, epoch: int, size: int) -> np.ndarray:
        key = (task, epoch)
        if key not in self._permutations:
            order = np.random.default_rng([self.seed, task, epoch]).permutation(size)
            if self.group_by_length:
                offset = (-epoch * size) % self.batch_size  # first batch boundary inside this pass
                rng = np.random.default_rng([self.seed, task, epoch, 1])
                order = group_by_length(order, self.task_features[task].lengths, self.batch_size, offset, rng)
            self._permutations[key] = order
            if len(self._permutations) > 4 * len(self.task_names):
                self._permutations.popitem(last=False)
        return self._permutations[key]


def unwrap_single_item(items: list[dict]) -> dict:
    """DataLoader collate for `MultiTaskBatches` (batch_size=1: each item already is a batch)."""
    (item,) = items
    return item
