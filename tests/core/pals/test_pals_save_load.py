"""Saving and loading PAL adapters: round trips, strict loading, errors."""

import pytest
import torch
from adapters import AutoAdapterModel
from helpers import batch, tiny_bert_config
from safetensors.torch import load_file, save_file
from tiny_models import bert, wrapped
from transformers import BertConfig, BertForSequenceClassification, BertModel

import pals_adapters
from pals_adapters import AdapterLoadError, PALsConfig

# --- save and load ---------------------------------------------------------------------------


MODEL_FACTORIES = {
    "AutoAdapterModel": lambda cfg: AutoAdapterModel.from_config(cfg).eval(),
    "BertModel": lambda cfg: wrapped(BertModel(cfg)),
    "BertForSequenceClassification": lambda cfg: wrapped(BertForSequenceClassification(cfg)),
}


def clone_base(factory, source, cfg):
    """A fresh model of the same class holding the source's base weights but no adapters."""
    fresh = factory(cfg)
    base_keys = {k: v for k, v in source.state_dict().items() if ".pals." not in k and "shared_parameters" not in k}
    fresh.load_state_dict(base_keys, strict=False)
    return fresh


def encoder_output(model, ids, mask):
    base = model.base_model
    return base(ids, attention_mask=mask).last_hidden_state


@pytest.mark.parametrize("kind", list(MODEL_FACTORIES))
@pytest.mark.parametrize("preset", ["pals", "pals_no_share", "low_rank", "pals_top_layers"])
def test_save_load_round_trip(tmp_path, kind, preset):
    factory, cfg = MODEL_FACTORIES[kind], tiny_bert_config()
    model = factory(cfg)
    model.add_adapter("t", config=preset, set_active=True)
    ids, mask = batch()
    with torch.no_grad():
        expected = encoder_output(model, ids, mask)
    model.save_adapter(str(tmp_path), "t")
    assert (tmp_path / "adapter_config.json").exists() and (tmp_path / "adapter.safetensors").exists()
    saved = load_file(tmp_path / "adapter.safetensors")
    assert sum(v.numel() for v in saved.values()) == sum(
        p.numel() for n, p in model.named_parameters() if ".adapters.t." in n or "shared_parameters.t." in n
    )
    fresh = clone_base(factory, model, cfg)
    name = fresh.load_adapter(str(tmp_path), set_active=True)
    with torch.no_grad():
        assert torch.allclose(encoder_output(fresh, ids, mask), expected, atol=1e-6)
    assert name == "t"


def test_adapter_saved_on_adapter_model_loads_on_wrapped_plain_model_and_back(tmp_path):
    cfg = tiny_bert_config()
    source = AutoAdapterModel.from_config(cfg).eval()
    source.add_adapter("t", config="pals", set_active=True)
    ids, mask = batch()
    with torch.no_grad():
        expected = encoder_output(source, ids, mask)
    source.save_adapter(str(tmp_path / "a"), "t", with_head=False)
    plain = wrapped(BertModel(cfg))
    plain.load_state_dict(source.bert.state_dict(), strict=False)
    plain.load_adapter(str(tmp_path / "a"), load_as="renamed", set_active=True)
    with torch.no_grad():
        assert torch.allclose(plain(ids, attention_mask=mask).last_hidden_state, expected, atol=1e-6)
    plain.save_adapter(str(tmp_path / "b"), "renamed")
    back = clone_base(MODEL_FACTORIES["AutoAdapterModel"], source, cfg)
    back.load_adapter(str(tmp_path / "b"), set_active=True)
    with torch.no_grad():
        assert torch.allclose(encoder_output(back, ids, mask), expected, atol=1e-6)


def test_whole_model_save_pretrained_round_trip(tmp_path):
    model = AutoAdapterModel.from_config(tiny_bert_config()).eval()
    model.add_adapter("t", config="pals_no_share")
    model.add_classification_head("t", num_labels=3)
    model.set_active_adapters("t")
    ids, mask = batch()
    with torch.no_grad():
        expected = model(ids, attention_mask=mask).logits
    model.save_pretrained(str(tmp_path))
    loaded = AutoAdapterModel.from_pretrained(str(tmp_path)).eval()
    loaded.set_active_adapters("t")
    with torch.no_grad():
        assert torch.allclose(loaded(ids, attention_mask=mask).logits, expected, atol=1e-6)


def corrupt(tmp_path, change):
    model = bert()
    model.add_adapter("t", config="pals")
    model.save_adapter(str(tmp_path), "t")
    weights = load_file(tmp_path / "adapter.safetensors")
    change(weights)
    save_file(weights, tmp_path / "adapter.safetensors")
    return tmp_path


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda w: w.pop("shared_parameters.t.up_weight"), "missing from the file"),
        (lambda w: w.pop("encoder.layer.2.pals.adapters.t.inner.qkv.bias"), "missing from the file"),
        (lambda w: w.update({"encoder.layer.9.pals.adapters.t.inner.qkv.bias": torch.zeros(3)}), "no place for"),
        (lambda w: w.update({"shared_parameters.t.down_weight": torch.zeros(5, 48)}), "do not fit"),
    ],
)
def test_loading_never_drops_or_misplaces_weights(tmp_path, change, message):
    path = corrupt(tmp_path, change)
    fresh = bert()
    with pytest.raises(AdapterLoadError, match=message):
        fresh.load_adapter(str(path))
    assert "t" not in fresh.adapters_config and "t" not in fresh.shared_parameters


@pytest.mark.parametrize(
    "target, message",
    [
        (lambda: bert(hidden=64), "do not fit"),  # another width
        (lambda: bert(layers=2), "no place for"),  # fewer layers
    ],
)
def test_loading_onto_a_model_it_does_not_fit_is_refused(tmp_path, target, message):
    source = bert()
    source.add_adapter("t", config="pals")
    source.save_adapter(str(tmp_path), "t")
    model = target()
    with pytest.raises(AdapterLoadError, match=message):
        model.load_adapter(str(tmp_path))
    assert "t" not in model.adapters_config


def test_save_adapter_creates_missing_parent_folders(tmp_path):
    model = bert()
    model.add_adapter("t", config="pals")
    model.save_adapter(str(tmp_path / "a" / "b" / "t"), "t")
    assert (tmp_path / "a" / "b" / "t" / "adapter.safetensors").is_file()


def test_count_parameters_takes_config_objects():
    from adapters import LoRAConfig

    cfg = BertConfig()
    assert (
        pals_adapters.count_parameters(LoRAConfig(r=8), cfg).per_task
        == pals_adapters.count_parameters("lora", cfg).per_task
    )
    assert (
        pals_adapters.count_parameters(PALsConfig(), cfg).per_task
        == pals_adapters.count_parameters("pals", cfg).per_task
    )
