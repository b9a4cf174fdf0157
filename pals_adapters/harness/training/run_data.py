"""The data of a run: each task's tokenised training set and the sets it is scored on (its dev splits, or
with ``selection`` the training rows held out as its selection part, dev then never read)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..data.batches import tokenize
from ..data.selection import SELECTION_SPLIT, split_training_rows
from ..run_config import RunConfig
from ..tasks.spec import TaskSpec
from ..tasks.splits import SkippedRows, load_split

if TYPE_CHECKING:
    import datasets


def load_train_sets(
    config: RunConfig,
    specs: dict[str, TaskSpec],
    tokenizer,
    skipped: list[SkippedRows] | None = None,
    held_out: dict | None = None,
) -> dict[str, datasets.Dataset]:
    """Tokenised training set per task (a seeded random subset if ``max_train_examples``; with ``selection``,
    of the rows left after the selection part); ``skipped`` receives the malformed rows that tasks with
    ``skip_bad_rows`` left out, ``held_out`` the record of each task's selection part."""
    train = {}
    for name, spec in specs.items():
        data = load_split(spec, "train", glue_dir=config.glue_dir, source=config.data_source, skipped=skipped)
        if config.selection is not None:
            data, _, record = split_training_rows(name, data, config.selection, config.selection_seed)
            if held_out is not None:
                held_out[name] = record
        if config.max_train_examples:
            data = data.shuffle(seed=config.seed).select(range(min(config.max_train_examples, len(data))))
        train[name] = tokenize(data, spec, tokenizer, config.max_length)
    return train


def regression_label_stats(train: dict[str, datasets.Dataset], specs: dict[str, TaskSpec]) -> dict:
    """Mean and standard deviation of the training labels of each regression task."""
    stats = {}
    for name, spec in specs.items():
        if spec.is_regression:
            labels = torch.tensor(train[name]["label"], dtype=torch.float64)
            stats[name] = (float(labels.mean()), float(labels.std(unbiased=False)))
    return stats


def load_dev_sets(
    config: RunConfig, specs: dict[str, TaskSpec], tokenizer, skipped: list[SkippedRows] | None = None
) -> dict[str, dict[str, datasets.Dataset]]:
    """Tokenised dev splits per task (MNLI has two), the first ``max_eval_examples`` rows if set; with
    ``selection``, the task's selection part instead (its first ``max_eval_examples`` rows)."""
    dev = {}
    for name, spec in specs.items():
        if config.selection is not None:  # the training rows held out: the dev splits are not read
            data = load_split(spec, "train", glue_dir=config.glue_dir, source=config.data_source)
            splits = {SELECTION_SPLIT: split_training_rows(name, data, config.selection, config.selection_seed)[1]}
        else:
            splits = {
                split: load_split(spec, split, glue_dir=config.glue_dir, source=config.data_source, skipped=skipped)
                for split in spec.dev_splits
            }
        dev[name] = {}
        for split, data in splits.items():
            if config.max_eval_examples:
                data = data.select(range(min(config.max_eval_examples, len(data))))
            dev[name][split] = tokenize(data, spec, tokenizer, config.max_length)
    return dev
