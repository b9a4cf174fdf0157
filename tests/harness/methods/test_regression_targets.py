"""standardise_targets: a regression task's loss in units of its label variance, its head starting at
the label mean, its predictions still in label units."""

import pytest
import torch
import torch.nn.functional as F
from helpers import glue_dir, tiny_bert_config, tiny_run_config
from transformers import BertModel

from pals_adapters.errors import ConfigError
from pals_adapters.harness.cli import build_parser
from pals_adapters.harness.cli.options import config_from_args
from pals_adapters.harness.methods.model import MultiTaskModel
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.harness.tasks.glue import GLUE_TASKS
from pals_adapters.harness.tasks.splits import load_split
from pals_adapters.harness.training.runner import RunConfig, run

TASKS = {name: GLUE_TASKS[name] for name in ("rte", "stsb")}


def model(seed=0):
    torch.manual_seed(seed)
    return MultiTaskModel(BertModel(tiny_bert_config()), TASKS, get_method("pals"), "finetune").eval()


def inputs(rows=6, length=9):
    g = torch.Generator().manual_seed(0)
    return torch.randint(5, 99, (rows, length), generator=g), torch.ones(rows, length, dtype=torch.long)


def test_the_loss_is_the_mse_over_the_label_variance_and_the_head_starts_at_the_mean():
    m = model()
    ids, mask = inputs()
    labels = torch.tensor([0.0, 1.5, 5.0, 3.2, 2.0, 4.4])
    m.standardise_targets({"stsb": (2.6, 1.5)})
    assert torch.all(m.heads["stsb"].bias == 2.6)
    out = m(task="stsb", input_ids=ids, attention_mask=mask, labels=labels)
    predictions = out["logits"].squeeze(-1)
    assert abs(float(predictions.detach().mean()) - 2.6) < 0.1  # label units, near the mean at the start
    expected = F.mse_loss(predictions, labels) / 1.5**2
    torch.testing.assert_close(out["loss"], expected)
    # The classification task keeps its plain cross-entropy.
    plain = model()
    cls_labels = torch.tensor([0, 1, 1, 0, 1, 0])
    torch.testing.assert_close(
        m(task="rte", input_ids=ids, attention_mask=mask, labels=cls_labels)["loss"],
        plain(task="rte", input_ids=ids, attention_mask=mask, labels=cls_labels)["loss"],
    )


def test_a_mixed_batch_uses_the_standardised_loss_of_each_task():
    m = model()
    m.standardise_targets({"stsb": (2.6, 1.5)})
    ids, mask = inputs()
    task_ids = torch.tensor([0, 1, 1, 0, 1, 0])
    labels = torch.tensor([1, 3.5, 0.5, 0, 4.0, 1])
    mixed = m(input_ids=ids, attention_mask=mask, task_ids=task_ids, labels=labels)["loss"]
    parts = []
    for index, task in enumerate(TASKS):
        rows = task_ids == index
        task_labels = labels[rows] if TASKS[task].is_regression else labels[rows].long()
        parts.append(m(task=task, input_ids=ids[rows], attention_mask=mask[rows], labels=task_labels)["loss"])
    torch.testing.assert_close(mixed, torch.stack(parts).mean())


@pytest.mark.parametrize(
    "stats, message",
    [({"rte": (0.5, 0.5)}, "'rte' is not a regression task"), ({"stsb": (3.0, 0.0)}, "are all 3.0")],
)
def test_what_cannot_be_standardised_is_refused(stats, message):
    with pytest.raises(ConfigError, match=message):
        model().standardise_targets(stats)


def test_label_stats_come_from_the_training_examples_used(tmp_path, tiny_model_dir, monkeypatch):
    seen = {}
    original = MultiTaskModel.standardise_targets

    def record(self, stats):
        seen.update(stats)
        return original(self, stats)

    monkeypatch.setattr(MultiTaskModel, "standardise_targets", record)
    config = RunConfig(
        model=str(tiny_model_dir),
        tasks=["rte", "stsb"],
        glue_dir=str(glue_dir()),
        method="pals",
        max_steps=2,
        batch_size=8,
        max_length=32,
        max_train_examples=40,
        max_eval_examples=16,
        standardise_targets=True,
        seed=3,
        output_dir=str(tmp_path / "run"),
    )
    results = run(config)
    assert results["config"]["standardise_targets"] is True
    assert {"rte_score", "stsb_score"} <= set(results["metrics"])
    used = load_split(GLUE_TASKS["stsb"], "train", glue_dir=str(glue_dir())).shuffle(seed=3).select(range(40))
    labels = torch.tensor(used["label"], dtype=torch.float64)
    assert seen.keys() == {"stsb"}
    assert seen["stsb"] == pytest.approx((float(labels.mean()), float(labels.std(unbiased=False))))


# --- a frozen base: the regression head starts at the label mean by default -----------------------


@pytest.mark.parametrize(
    "argv, expected",
    [
        ([], False),  # the paper's recipe: base fine-tuned, head at 0, plain MSE
        (["--base", "frozen"], True),
        (["--base", "frozen", "--no-standardise-targets"], False),  # the old frozen behaviour, one option away
        (["--standardise-targets"], True),
    ],
)
def test_standardised_targets_are_the_default_with_a_frozen_base_only(argv, expected):
    args = build_parser().parse_args(["train", *argv])
    assert config_from_args(args).standardise_targets is expected


def test_a_frozen_run_and_a_task_added_later_start_their_regression_head_at_the_label_mean(
    tmp_path, tiny_model_dir, monkeypatch
):
    seen = []
    original = MultiTaskModel.standardise_targets
    monkeypatch.setattr(MultiTaskModel, "standardise_targets", lambda self, s: seen.append(s) or original(self, s))
    frozen = run(tiny_run_config(tiny_model_dir, tmp_path / "frozen", tasks=["stsb"], base="frozen", export=False))
    assert frozen["config"]["standardise_targets"] is True and list(seen.pop()) == ["stsb"]
    run(tiny_run_config(tiny_model_dir, tmp_path / "first", tasks=["rte"]))  # base fine-tuned: not standardised
    assert not seen
    added = run(
        tiny_run_config(tiny_model_dir, tmp_path / "added", tasks=["stsb"], add_to=str(tmp_path / "first" / "export"))
    )
    assert added["config"]["base"] == "frozen" and added["config"]["standardise_targets"] is True
    assert list(seen.pop()) == ["stsb"]


def _offset_regression(rows, seed):
    """Random token ids; the label is 1 + 8 x the share of ids below 30 (mean about 2.9, far from 0)."""
    ids = torch.randint(5, 99, (rows, 12), generator=torch.Generator().manual_seed(seed))
    return ids, 1.0 + 8.0 * (ids < 30).float().mean(1)


def _frozen_pals_dev_correlation(start_at_mean: bool) -> float:
    torch.manual_seed(0)
    encoder = BertModel(tiny_bert_config(layers=2))
    m = MultiTaskModel(encoder, {"stsb": GLUE_TASKS["stsb"]}, get_method("pals"), "frozen")
    ids, labels = _offset_regression(2000, seed=1)
    if start_at_mean:
        m.standardise_targets({"stsb": (float(labels.mean()), float(labels.std()))})
    optimizer = torch.optim.AdamW(m.trainable_parameters(), lr=1e-3, weight_decay=0.01)
    m.train()
    for step in range(300):
        rows = slice(step * 16 % 2000, step * 16 % 2000 + 16)
        mask = torch.ones_like(ids[rows])
        loss = m(task="stsb", input_ids=ids[rows], attention_mask=mask, labels=labels[rows])["loss"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    dev_ids, dev_labels = _offset_regression(500, seed=2)
    with torch.no_grad():
        predicted = m.eval()(task="stsb", input_ids=dev_ids, attention_mask=torch.ones_like(dev_ids))["logits"]
    return float(torch.corrcoef(torch.stack([predicted.squeeze(-1), dev_labels]))[0, 1])


def test_frozen_pals_learn_a_regression_target_far_from_zero_once_the_head_starts_at_its_mean():
    # From 0, the PALs learn the offset of ~2.9 instead (their output swamps the frozen features): flat.
    assert abs(_frozen_pals_dev_correlation(start_at_mean=False)) < 0.15
    assert _frozen_pals_dev_correlation(start_at_mean=True) > 0.35
