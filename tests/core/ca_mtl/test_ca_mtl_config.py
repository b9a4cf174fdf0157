"""CA-MTL's parameter accounting, its config and the models it supports."""

import json
import math

import pytest
import torch
from adapters import AdapterSetup
from adapters.composition import MultiTask
from ca_mtl_models import CONFIG, encoder, with_tasks
from helpers import batch, tiny_bert_config, tiny_roberta_config
from tiny_models import bert, wrapped
from transformers import BertConfig, GPT2Config, GPT2Model, RobertaModel, XLMRobertaConfig, XLMRobertaModel

import pals_adapters
from pals_adapters import ConfigError, UnsupportedModelError
from pals_adapters.ca_mtl import (
    CAMTLConfig,
    count_ca_mtl_parameters,
)

# --- accounting -------------------------------------------------------------------------------------------


def expected_counts(d, layers, length, blocks, frozen, first_norm, bottleneck, intermediate, vocab, positions):
    block = math.ceil(length / blocks)
    film = lambda size: d * 2 * size + 2 * size  # noqa: E731
    linear = lambda i, o: i * o + o  # noqa: E731
    per_layer = length * block + film(block)
    conditional = linear(d, d) + film(d) + layers * per_layer + 2 * (layers - first_norm) * film(d)
    conditional += linear(d, d) + film(d) + linear(d, bottleneck) + linear(bottleneck, d) + 2 * d + film(d)
    layer = 4 * linear(d, d) + linear(d, intermediate) + linear(intermediate, d) + 4 * d
    embeddings = (vocab + positions + 2) * d + 2 * d
    base = embeddings + layers * layer + linear(d, d)
    return base, (layers - frozen) * layer + linear(d, d), conditional


@pytest.mark.parametrize(
    "model_config, settings, sizes",
    [
        (tiny_bert_config(), "ca_mtl[max_seq_length=16,num_blocks=4]", (48, 4, 16, 4, 2, 2, 16, 64, 99, 64)),
        (
            tiny_bert_config(),
            "ca_mtl[max_seq_length=16,num_blocks=3,num_frozen_layers=1,bottleneck_size=8]",
            (48, 4, 16, 3, 1, 2, 8, 64, 99, 64),
        ),
        (BertConfig(), "ca_mtl", (768, 12, 128, 6, 6, 6, 256, 3072, 30522, 512)),
    ],
)
def test_parameter_accounting_matches_the_module_formulas(model_config, settings, sizes):
    base, base_trained, conditional = expected_counts(*sizes)
    count = count_ca_mtl_parameters(model_config, settings, n_tasks=8, num_labels=3)
    d = sizes[0]
    assert (count.base, count.base_trained, count.conditional, count.conditional_trained) == (
        base,
        base_trained,
        conditional,
        conditional,
    )
    assert (count.per_task, count.head_per_task) == (d, d * 3 + 3)
    general = pals_adapters.count_parameters(settings, model_config, n_tasks=8, num_labels=3)
    assert (general.base, general.shared, general.per_task) == (base, base + conditional, d)
    assert general.total == count.total


def test_bert_base_budget():
    count = count_ca_mtl_parameters(BertConfig(), n_tasks=8)
    # the shared modules at BERT-base (documented in docs/ca-mtl.md)
    assert count.conditional == 19_734_544 and round(count.multiplier, 3) == 1.18
    frozen = count_ca_mtl_parameters(BertConfig(), "ca_mtl[train_frozen_attention_film=False]")
    assert count.conditional_trained - frozen.conditional_trained == 6 * (768 * 44 + 44)


# --- config ---------------------------------------------------------------------------------------------


def test_config_from_string_instance_dict_and_file(tmp_path):
    path = tmp_path / "adapter_config.json"
    path.write_text(json.dumps({"config": CAMTLConfig(max_seq_length=16, num_blocks=4).to_dict()}))
    forms = {
        "string": CONFIG,
        "instance": CAMTLConfig(max_seq_length=16, num_blocks=4),
        "dict": {"architecture": "ca_mtl", "max_seq_length": 16, "num_blocks": 4},
        "file": str(path),
    }
    for form, config in forms.items():
        model = bert()
        model.add_adapter("t", config=config)
        assert model.adapters_config.match("t", CAMTLConfig) == CAMTLConfig(max_seq_length=16, num_blocks=4), form
        assert tuple(model.ca_mtl.layers[0].attention.blocks.shape) == (16, 4), form


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(max_seq_length=0), "max_seq_length"),
        (dict(num_blocks=-1), "num_blocks"),
        (dict(max_seq_length=10, num_blocks=6), "num_blocks"),  # blocks of 2 cover 10 positions in 5
        (dict(num_frozen_layers=-1), "num_frozen_layers"),
        (dict(bottleneck_size=0), "bottleneck_size"),
        (dict(train_pooler="yes"), "train_pooler"),
        (dict(init_range=0), "init_range"),
    ],
)
def test_invalid_settings_name_the_field(kwargs, field):
    with pytest.raises(ConfigError, match=field):
        CAMTLConfig(**kwargs)


def test_settings_that_do_not_fit_the_model_are_refused_before_anything_is_built():
    model = bert()
    with pytest.raises(ConfigError, match="num_frozen_layers"):
        model.add_adapter("t", config="ca_mtl[num_frozen_layers=5]")
    assert "t" not in model.adapters_config and not hasattr(model, "ca_mtl")


def test_all_ca_mtl_adapters_of_a_model_share_one_config():
    model = with_tasks(bert(), "a")
    with pytest.raises(ConfigError, match="max_seq_length"):
        model.add_adapter("b", config="ca_mtl[max_seq_length=32,num_blocks=4]")
    assert "b" not in model.adapters_config
    model.add_adapter("c", config=CONFIG)  # the same config is fine


def test_unsupported_architecture_is_refused_before_anything_is_built():
    model = wrapped(GPT2Model(GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=50)))
    with pytest.raises(UnsupportedModelError, match="gpt2"):
        model.add_adapter("t", config="ca_mtl")
    assert "t" not in model.adapters_config and not hasattr(model, "ca_mtl")


def test_registration_is_idempotent_and_leaves_other_methods_alone():
    from adapters import AdapterConfig, BnConfig
    from adapters.model_mixin import ModelAdaptersMixin

    resolve, add = AdapterConfig._get_config_class, ModelAdaptersMixin._add_adapter_weights
    pals_adapters.ca_mtl.register()
    pals_adapters.register()
    assert AdapterConfig._get_config_class is resolve and ModelAdaptersMixin._add_adapter_weights is add
    assert AdapterConfig._get_config_class({"architecture": None, "mh_adapter": True}) is BnConfig
    # a houlsby adapter computes the same with and without CA-MTL on the model
    ids, mask = batch()
    torch.manual_seed(3)
    model = bert()
    model.add_adapter("h", config="double_seq_bn", set_active=True)
    with torch.no_grad():
        before = encoder(model, ids, mask)
        with_tasks(model, "a")
        assert torch.equal(encoder(model, ids, mask), before)
    model.train_adapter("h")
    assert not any(
        p.requires_grad for n, p in model.named_parameters() if "ca_mtl" in n or "encoder.layer.3.attention.self" in n
    )


@pytest.mark.parametrize("model_class", [RobertaModel, XLMRobertaModel])
def test_roberta_and_xlm_roberta_route_rows_by_task(model_class):
    config = tiny_roberta_config("sdpa")
    if model_class is XLMRobertaModel:
        config = XLMRobertaConfig(**config.to_dict())
    model = with_tasks(wrapped(model_class(config)), "a", "b")
    ids, mask = batch()
    task_ids = torch.tensor([0, 1, 1, 0])
    with torch.no_grad():
        with AdapterSetup(MultiTask("a", "b")):
            out = encoder(model, ids, mask, task_ids=task_ids)
        for index, name in enumerate("ab"):
            rows = task_ids == index
            with AdapterSetup(name):
                torch.testing.assert_close(out[rows], encoder(model, ids[rows], mask[rows]), atol=1e-5, rtol=0)
