"""Dev-set evaluation of a multi-task model: predictions, the official metrics, a GLUE-style average,
and for classification tasks a per-class view (precision, recall, F1, confusion matrix)."""

import datasets
import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from ..data.batches import TaskFeatures
from .metrics import class_report, compute_metrics, glue_average, task_score


@torch.no_grad()
def predict(
    model,
    task: str,
    dataset: datasets.Dataset,
    tokenizer: PreTrainedTokenizerBase,
    batch_size: int = 64,
    sort_by_length: bool = True,
    progress: str | None = None,
    leave: bool = True,
) -> np.ndarray:
    """Logits of ``task`` for every row of a tokenised dataset, in row order.

    ``sort_by_length`` runs the rows in order of length (each batch padded to its own longest row,
    so little padding) and puts the logits back in row order; the logits are the same either way.
    ``progress``: a label for a progress bar of the batches (tqdm, on stderr); None shows none.
    ``leave``: keep the finished bar on screen.
    """
    features = TaskFeatures(dataset, tokenizer.pad_token_id or 0)
    order = np.argsort(-features.lengths, kind="stable") if sort_by_length else np.arange(len(features))
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    outputs = []
    starts = range(0, len(order), batch_size)
    for start in tqdm(starts, desc=progress, unit="batch", disable=progress is None, leave=leave):
        batch = features.batch(order[start : start + batch_size])
        batch.pop("labels", None)
        batch = {k: v.to(device) for k, v in batch.items()}
        outputs.append(model(task=task, **batch)["logits"].float().cpu().numpy())
    model.train(was_training)
    if not outputs:
        return np.zeros((0, model.tasks[task].num_labels))
    logits = np.empty_like(np.concatenate(outputs))
    logits[order] = np.concatenate(outputs)
    return logits


def split_suffix(split: str) -> str:
    """``validation`` -> ``""``; ``validation_matched`` -> ``"matched_"`` (for metric names)."""
    rest = split[len("validation") :].lstrip("_")
    return f"{rest}_" if rest else ""


def evaluate_tasks(
    model,
    eval_sets: dict[str, dict[str, datasets.Dataset]],
    tokenizer: PreTrainedTokenizerBase,
    batch_size: int = 64,
    sort_by_length: bool = True,
    progress: bool = False,
    leave: bool = True,
    per_class: dict | None = None,
    predictions: dict | None = None,
) -> dict[str, float]:
    """Flat metrics: ``<task>_[<split>_]<metric>``, ``<task>_score`` and ``average`` (fractions).

    ``progress``: a progress bar per task and split (``leave``: kept when done). ``per_class``: a dict
    that receives ``{task: {split: class_report}}`` for the classification tasks (`metrics.class_report`).
    ``predictions``: a dict that receives ``{task: {split: (predictions, labels)}}`` per dev row (the class
    index, or a regression task's value), e.g. for a paired bootstrap between two runs.
    """
    results: dict[str, float] = {}
    scores = {}
    for task, splits in eval_sets.items():
        spec = model.tasks[task]
        split_scores = []
        for split, dataset in splits.items():
            label = f"{task} {split}" if progress else None
            logits = predict(model, task, dataset, tokenizer, batch_size, sort_by_length, label, leave)
            metrics = compute_metrics(spec, logits, np.asarray(dataset["label"]))
            if predictions is not None:
                values = logits[:, 0] if spec.is_regression else logits.argmax(axis=1)
                predictions.setdefault(task, {})[split] = (values, np.asarray(dataset["label"]))
            if per_class is not None and not spec.is_regression:
                per_class.setdefault(task, {})[split] = class_report(spec, logits, np.asarray(dataset["label"]))
            for name, value in metrics.items():
                results[f"{task}_{split_suffix(split)}{name}"] = value
            split_scores.append(task_score(spec, metrics))
        scores[task] = float(np.mean(split_scores))
        results[f"{task}_score"] = scores[task]
    results["average"] = glue_average(scores)
    return results
