"""scale_shared_lr: PALs' V_E/V_D, shared by every layer, learn at lr / (layers sharing them).

With a frozen base and one learning rate for everything, a step on the shared projections moves the PAL
output of all layers at once; frozen PALs then learn a near-constant offset in every layer and CoLA stays
at a constant prediction (docs/notes/frozen-base-learning.md). These tests pin the wiring: which weights get
which learning rate, the defaults, and that runs recorded before the setting resume as they trained.
"""

import adapters
import pytest
import torch
from helpers import tiny_bert_config, tiny_run_config
from transformers import AutoConfig, BertModel

import pals_adapters  # noqa: F401  (registers "pals")
from pals_adapters.harness.cli import build_parser
from pals_adapters.harness.cli.options import config_from_args
from pals_adapters.harness.training.run_folder import setting_differences
from pals_adapters.harness.training.runner import run
from pals_adapters.harness.training.trainer import MultiTaskTrainer
from pals_adapters.pals import shared_projections

LAYERS = tiny_bert_config().num_hidden_layers


def encoder_with(config):
    model = BertModel(tiny_bert_config())
    adapters.init(model)
    model.add_adapter("a", config=config)
    return model


@pytest.mark.parametrize(
    "config, layers",
    [("pals", LAYERS), ("pals_top_layers", LAYERS // 2), ("pals_no_share", 0), ("seq_bn", 0), ("lora", 0)],
)
def test_shared_projections_are_the_shared_v_e_v_d_and_the_layers_using_them(config, layers):
    model = encoder_with(config)
    params, count = shared_projections(model, "a")
    assert count == layers
    if layers:
        shared = model.base_model.shared_parameters["a"]
        assert {id(p) for p in params} == {id(shared[n]) for n in ("down_weight", "down_bias", "up_weight", "up_bias")}
    else:
        assert params == []
    assert shared_projections(model, "not-there") == ([], 0)


def optimizer_groups(tmp_path, tiny_model_dir, monkeypatch, **changes):
    """The (lr, parameter shapes) of the optimizer groups of a one-step run."""
    seen = []
    original = MultiTaskTrainer.create_optimizer

    def record(self):
        optimizer = original(self)
        if not seen:
            seen.extend((g["lr"], sorted(tuple(p.shape) for p in g["params"])) for g in optimizer.param_groups)
        return optimizer

    monkeypatch.setattr(MultiTaskTrainer, "create_optimizer", record)
    settings = {"tasks": ["rte"], "max_steps": 1, "export": False, **changes}
    results = run(tiny_run_config(tiny_model_dir, tmp_path, **settings))
    return results, seen


def run_layers(model_dir) -> int:
    return AutoConfig.from_pretrained(model_dir).num_hidden_layers


def test_a_frozen_pals_run_trains_the_shared_projections_at_lr_over_the_layers(tmp_path, tiny_model_dir, monkeypatch):
    results, groups = optimizer_groups(tmp_path, tiny_model_dir, monkeypatch, base="frozen")
    assert results["config"]["scale_shared_lr"] is True
    layers = run_layers(tiny_model_dir)
    assert layers > 1
    hidden = AutoConfig.from_pretrained(tiny_model_dir).hidden_size
    assert sorted(lr for lr, _ in groups) == [pytest.approx(1e-3 / layers), 1e-3]
    shared = next(shapes for lr, shapes in groups if lr != 1e-3)
    assert len(shared) == 4 and (hidden,) in shared  # V_E, V_D and their biases, nothing else
    assert all(len(s) == 1 or hidden in s for s in shared)


@pytest.mark.parametrize(
    "changes",
    [
        dict(base="finetune"),  # the paper's recipe: one learning rate
        dict(base="frozen", scale_shared_lr=False),  # one option away with a frozen base
        dict(base="frozen", method="houlsby"),  # nothing shared by layers: nothing to scale
    ],
)
def test_one_learning_rate_for_the_task_weights_otherwise(tmp_path, tiny_model_dir, monkeypatch, changes):
    _, groups = optimizer_groups(tmp_path, tiny_model_dir, monkeypatch, **changes)
    assert {lr for lr, _ in groups} == {1e-3}


def test_adapter_lr_is_what_the_shared_projections_divide(tmp_path, tiny_model_dir, monkeypatch):
    _, groups = optimizer_groups(tmp_path, tiny_model_dir, monkeypatch, base="frozen", adapter_lr=4e-3)
    assert sorted(lr for lr, _ in groups) == [pytest.approx(4e-3 / run_layers(tiny_model_dir)), 4e-3]


@pytest.mark.parametrize(
    "argv, expected",
    [
        ([], False),
        (["--base", "frozen"], True),
        (["--base", "frozen", "--no-scale-shared-lr"], False),
        (["--scale-shared-lr"], True),
    ],
)
def test_the_default_follows_the_base(argv, expected):
    args = build_parser().parse_args(["train", *argv])
    assert config_from_args(args).scale_shared_lr is expected


def test_a_task_added_to_an_export_scales_by_default(tmp_path, tiny_model_dir, monkeypatch):
    run(tiny_run_config(tiny_model_dir, tmp_path / "first", tasks=["rte"], max_steps=1))
    results, groups = optimizer_groups(
        tmp_path / "added", tiny_model_dir, monkeypatch, tasks=["mrpc"], add_to=str(tmp_path / "first" / "export")
    )
    assert results["config"]["base"] == "frozen" and results["config"]["scale_shared_lr"] is True
    assert any(lr == pytest.approx(1e-3 / run_layers(tiny_model_dir)) for lr, _ in groups)


def test_a_run_recorded_before_the_setting_resumes_as_it_trained(tmp_path, tiny_model_dir):
    config = tiny_run_config(tiny_model_dir, tmp_path, base="frozen")
    recorded = {k: v for k, v in vars(config).items() if k not in ("scale_shared_lr", "standardise_targets")}
    refused, _ = setting_differences(recorded, config)
    assert sorted(refused) == ["scale_shared_lr: run False, now True", "standardise_targets: run False, now True"]
    config.scale_shared_lr = config.standardise_targets = False  # what --no-... gives: the record's behaviour
    assert setting_differences(recorded, config)[0] == []


def test_each_pal_adapter_has_its_own_shared_projections():
    model = encoder_with("pals")
    model.add_adapter("b", config="pals")
    a, b = shared_projections(model, "a")[0], shared_projections(model, "b")[0]
    assert not {id(p) for p in a} & {id(p) for p in b}
    assert all(isinstance(p, torch.nn.Parameter) for p in a + b)
