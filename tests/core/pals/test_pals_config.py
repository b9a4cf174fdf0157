"""PAL config forms, the presets and their budgets, invalid settings, registration."""

import copy
import json
import warnings

import adapters
import pytest
import torch
from helpers import batch
from tiny_models import PRESETS, bert
from transformers import BertConfig

import pals_adapters
from pals_adapters import ConfigError, PALsConfig

# --- config forms and presets -------------------------------------------------------------------


def test_config_from_string_instance_dict_and_file(tmp_path):
    path = tmp_path / "adapter_config.json"
    path.write_text(json.dumps({"config": PALsConfig(hidden_size_aug=24).to_dict()}))
    forms = {
        "string": "pals[hidden_size_aug=24]",
        "instance": PALsConfig(hidden_size_aug=24),
        "dict": {"architecture": "pals", "hidden_size_aug": 24},
        "file": str(path),
    }
    for form, config in forms.items():
        model = bert()
        model.add_adapter("t", config=config)
        assert model.adapters_config.match("t", PALsConfig) == PALsConfig(hidden_size_aug=24), form
        assert model.encoder.layer[0].pals.adapters["t"].inner.qkv.in_features == 24, form


@pytest.mark.parametrize(
    "preset, d768, d384, shared, inner, layers12",
    [
        ("pals", 204, 102, True, "attention", list(range(12))),
        ("pals_no_share", 84, 42, False, "attention", list(range(12))),
        ("low_rank", 100, 50, False, "identity", list(range(12))),
        ("pals_top_layers", 276, 138, True, "attention", list(range(6, 12))),
        ("pals_bottom_layers", 276, 138, True, "attention", list(range(6))),
    ],
)
def test_presets_follow_the_paper_and_scale_with_width(preset, d768, d384, shared, inner, layers12):
    config = pals_adapters.PALS_PRESETS[preset]
    assert config.projected_size(768) == d768
    assert config.projected_size(384) == d384
    assert (config.shared_projections, config.inner) == (shared, inner)
    assert config.layer_indices(12) == layers12


@pytest.mark.parametrize("old, new", [("pals_top", "pals_top_layers"), ("pals_bottom", "pals_bottom_layers")])
def test_old_preset_names_warn_and_give_exactly_the_new_presets(old, new):
    assert pals_adapters.RENAMED_PRESETS[old] == new
    for spelling, expected in [
        (old, pals_adapters.PALS_PRESETS[new]),
        (
            f"{old}[hidden_size_aug=24, leave_out=[11]]",
            pals_adapters.PALS_PRESETS[new].replace(hidden_size_aug=24, leave_out=[11]),
        ),
    ]:
        with pytest.warns(DeprecationWarning, match=f"{old!r} is deprecated.*write {new!r}"):
            config = adapters.AdapterConfig.load(spelling)
        assert config == expected
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the new name is silent
            assert adapters.AdapterConfig.load(spelling.replace(old, new)) == config
    with pytest.warns(DeprecationWarning, match=new):  # in a union too
        union = adapters.AdapterConfig.load(f"{old}|lora")
    assert union.configs[0] == pals_adapters.PALS_PRESETS[new]

    # what a user types: add_adapter(config=old) builds the same adapter as the new name, weight for weight
    torch.manual_seed(0)
    new_model = bert()
    old_model = copy.deepcopy(new_model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.manual_seed(1)  # the same initial weights
        new_model.add_adapter("t", config=new, set_active=True)
    with pytest.warns(DeprecationWarning, match=new):
        torch.manual_seed(1)
        old_model.add_adapter("t", config=old, set_active=True)
    assert old_model.adapters_config.get("t") == new_model.adapters_config.get("t")
    new_state, old_state = new_model.state_dict(), old_model.state_dict()
    assert new_state.keys() == old_state.keys() and any(".adapters.t." in k for k in new_state)
    assert all(torch.equal(new_state[k], old_state[k]) for k in new_state)
    ids, mask = batch()
    with torch.no_grad():
        torch.testing.assert_close(old_model(ids, attention_mask=mask)[0], new_model(ids, attention_mask=mask)[0])


@pytest.mark.parametrize("preset", PRESETS)
def test_bert_base_budget_matches_the_paper(preset):
    counts = pals_adapters.count_parameters(preset, BertConfig(), n_tasks=8)
    assert 1.78e6 < counts.per_task < 1.87e6  # paper: about 1.8M per task
    assert round(counts.multiplier, 2) in (1.13, 1.14)  # paper: 1.13x for 8 tasks


def test_pals_204_parameter_count_is_exact():
    d, s, layers = 768, 204, 12
    expected = (d * s + s) + (s * d + d) + layers * 3 * (s * s + s)
    assert pals_adapters.count_parameters("pals", BertConfig()).per_task == expected


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"hidden_size_aug": 0}, "hidden_size_aug"),
        ({"hidden_size_aug": -4}, "hidden_size_aug"),
        ({"hidden_size_aug": 20, "num_attention_heads": 6}, "hidden_size_aug"),
        ({"num_attention_heads": 0}, "num_attention_heads"),
        ({"inner": "mlp"}, "inner"),
        ({"activation": "swishy"}, "activation"),
        ({"layers": "middle"}, "layers"),
        ({"attention_dropout": 1.5}, "attention_dropout"),
        ({"leave_out": [-1]}, "leave_out"),
        ({"init_range": 0.0}, "init_range"),
        ({"init_weights": "lora"}, "init_weights"),
    ],
)
def test_invalid_settings_name_the_field(kwargs, field):
    with pytest.raises(ConfigError, match=f"PALsConfig.{field}"):
        PALsConfig(**kwargs)


def test_invalid_setting_in_string_syntax_is_a_clear_error():
    with pytest.raises(ConfigError, match="hidden_size_aug"):
        bert().add_adapter("t", config="pals[hidden_size_aug=0]")


def test_layers_out_of_range_is_an_error_and_leaves_nothing_behind():
    model = bert(layers=4)
    with pytest.raises(ConfigError, match="do not exist"):
        model.add_adapter("t", config=PALsConfig(leave_out=[7]))
    assert "t" not in model.adapters_config


def test_leave_out_skips_layers():
    model = bert(layers=4)
    model.add_adapter("t", config=PALsConfig(leave_out=[0, 2]))
    assert [("t" in layer.pals.adapters) for layer in model.encoder.layer] == [False, True, False, True]


def test_registration_is_idempotent():
    import importlib

    from adapters.model_mixin import ModelAdaptersMixin

    first = ModelAdaptersMixin._add_adapter_weights
    pals_adapters.register()
    importlib.reload(importlib.import_module("pals_adapters.pals.integration")).register()
    # the reload re-ran the module, and with it its registry of file policies: CA-MTL's entry is re-made
    # as a fresh import of the package would make it, so later tests see the plugin as users do
    importlib.import_module("pals_adapters.ca_mtl.integration").register()
    assert ModelAdaptersMixin._add_adapter_weights is first
    model = bert()
    model.add_adapter("t", config="pals")
    hooks = [len(layer._forward_pre_hooks) for layer in model.encoder.layer]
    model.add_adapter("u", config="pals")  # PAL layers and hooks are attached once
    assert [len(layer._forward_pre_hooks) for layer in model.encoder.layer] == hooks
    assert sum(isinstance(m, pals_adapters.pals.layer.PALsLayer) for m in model.modules()) == 4
    assert set(model.shared_parameters.keys()) == {"t", "u"}
