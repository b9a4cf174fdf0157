"""PALs as an `adapters` config type: the forward, composition, training modes, save/load, errors."""

import copy
import json
import math
import warnings

import adapters
import pytest
import torch
import torch.nn.functional as F
from adapters import AutoAdapterModel
from adapters.composition import Average, BatchSplit, Fuse, Parallel, Stack
from helpers import batch, tiny_bert_config, tiny_roberta_config
from safetensors.torch import load_file, save_file
from transformers import BertConfig, BertForSequenceClassification, BertModel, GPT2Config, GPT2Model, RobertaModel

import pals_adapters
from pals_adapters import AdapterLoadError, ConfigError, PALsConfig, UnsupportedModelError

PRESETS = ["pals", "pals_no_share", "low_rank", "pals_top_layers", "pals_bottom_layers"]


def wrapped(model):
    adapters.init(model)
    return model.eval()


def bert(attn="eager", **kw):
    return wrapped(BertModel(tiny_bert_config(attn, **kw)))


# --- an independent, plain re-statement of the paper's formula ---------------------------------


def reference_pal(h, mask, down_w, down_b, qkv_w, qkv_b, up_w, up_b, heads, inner):
    """TS(h) = GELU(V_D · MH_small(V_E · h)), written out with matmuls and softmax."""
    x = h @ down_w.T + down_b
    if inner == "attention":
        batch_size, length, size = x.shape
        head = size // heads
        q, k, v = (x @ qkv_w.T + qkv_b).split(size, dim=-1)
        q, k, v = (t.reshape(batch_size, length, heads, head).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(head) + mask
        x = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch_size, length, size)
    return F.gelu(x @ up_w.T + up_b)


def reference_forward(model, plain, name, ids, attention_mask):
    """Encoder output of ``plain`` (an unadapted BERT with the same weights) plus the PALs of ``model``."""
    config = model.adapters_config.match(name, PALsConfig)
    mask = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
    h = plain.embeddings(input_ids=ids)
    for i, layer in enumerate(plain.encoder.layer):
        a = layer.attention(h, attention_mask=mask)[0]  # LN1(h + MH(h))
        ffn = layer.output.dense(layer.intermediate(a))
        ts = torch.zeros_like(h)
        pal_modules = model.encoder.layer[i].pals.adapters
        if name in pal_modules:
            module = pal_modules[name]
            p = module.projections if module.projections is not None else model.shared_parameters[name]
            qkv = module.inner.qkv if module.inner is not None else None
            ts = reference_pal(
                h,
                mask,
                p["down_weight"],
                p["down_bias"],
                qkv.weight if qkv else None,
                qkv.bias if qkv else None,
                p["up_weight"],
                p["up_bias"],
                config.num_attention_heads,
                config.inner,
            )
        h = layer.output.LayerNorm(ffn + a + ts)  # LN2(FFN(a) + a + TS(h))
    return h


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("padded", [True, False])
def test_forward_matches_plain_formula(preset, attn, padded):
    model = bert(attn)
    model.add_adapter("t", config=preset, set_active=True)
    plain = BertModel(tiny_bert_config("eager")).eval()
    plain.load_state_dict(model.state_dict(), strict=False)
    ids, mask = batch(padded)
    with torch.no_grad():
        out = model(ids, attention_mask=mask).last_hidden_state
        expected = reference_forward(model, plain, "t", ids, mask)
    assert torch.allclose(out, expected, atol=1e-5), (out - expected).abs().max()


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_zero_pal_output_equals_unadapted_model_exactly(attn):
    model = bert(attn)
    ids, mask = batch()
    with torch.no_grad():
        before = model(ids, attention_mask=mask).last_hidden_state
        model.add_adapter("t", config="pals", set_active=True)
        model.shared_parameters["t"]["up_weight"].zero_()
        model.shared_parameters["t"]["up_bias"].zero_()
        after = model(ids, attention_mask=mask).last_hidden_state
    assert torch.equal(before, after)


@pytest.mark.parametrize("preset", PRESETS)
def test_zero_output_init_starts_as_a_no_op_with_features_at_the_hidden_scale(preset):
    model = bert()
    ids, mask = batch()
    with torch.no_grad():
        before = model(ids, attention_mask=mask).last_hidden_state
        model.add_adapter("t", config=f"{preset}[init_weights='zero_output']", set_active=True)
        assert torch.equal(model(ids, attention_mask=mask).last_hidden_state, before)
    module = model.encoder.layer[-1 if preset != "pals_bottom_layers" else 0].pals.adapters["t"]
    p = module.projections if module.projections is not None else model.shared_parameters["t"]
    hidden, projected = p["down_weight"].shape[1], p["down_weight"].shape[0]
    assert torch.count_nonzero(p["up_weight"]) == 0
    assert p["down_weight"].std().item() == pytest.approx(hidden**-0.5, rel=0.2)
    if module.inner is not None:
        assert module.inner.qkv.weight.std().item() == pytest.approx(projected**-0.5, rel=0.2)


def test_zero_output_init_learns_every_pal_weight_after_the_first_step():
    model = bert()
    model.add_adapter("t", config="pals[init_weights='zero_output']", set_active=True)
    model.train_adapter("t")
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    ids, mask = batch()
    for _ in range(2):  # the first step moves V_D off zero; the second reaches everything before it
        optimizer.zero_grad()
        model(ids, attention_mask=mask).last_hidden_state.pow(2).mean().backward()
        optimizer.step()
    qkv = model.encoder.layer[0].pals.adapters["t"].inner.qkv.weight
    assert qkv.grad is not None and qkv.grad.abs().sum() > 0
    assert model.shared_parameters["t"]["down_weight"].grad.abs().sum() > 0


def test_default_init_draws_exactly_the_authors_weights():
    """The default ("bert") draws V_E then V_D from the seeded generator at N(0, init_range), as before the
    option existed: seeded runs keep their initial weights."""
    from pals_adapters.pals.modeling import seeded_generator

    model = bert()
    model.add_adapter("t", config=PALsConfig(init_weights_seed=3))
    shared = model.shared_parameters["t"]
    projected, hidden = shared["down_weight"].shape
    generator = seeded_generator(3, -1)
    down = torch.randn(projected, hidden, generator=generator) * 0.02
    up = torch.randn(hidden, projected, generator=generator) * 0.02
    assert torch.equal(shared["down_weight"], down) and torch.equal(shared["up_weight"], up)
    qkv = model.encoder.layer[1].pals.adapters["t"].inner.qkv.weight
    expected = torch.empty_like(qkv)
    torch.nn.init.normal_(expected, std=0.02, generator=seeded_generator(3, 1))
    assert torch.equal(qkv, expected)


def test_pal_changes_the_output_when_active_only():
    model = bert()
    ids, mask = batch()
    with torch.no_grad():
        base = model(ids, attention_mask=mask).last_hidden_state
        model.add_adapter("t", config="pals")
        assert torch.equal(model(ids, attention_mask=mask).last_hidden_state, base)
        model.set_active_adapters("t")
        assert not torch.allclose(model(ids, attention_mask=mask).last_hidden_state, base)


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


# --- adapter life cycle -----------------------------------------------------------------------------


def trainable(model):
    return {n for n, p in model.named_parameters() if p.requires_grad}


def test_train_adapter_trains_only_pal_and_head():
    model = AutoAdapterModel.from_config(tiny_bert_config())
    for task in ("a", "b"):
        model.add_adapter(task, config="pals")
        model.add_classification_head(task, num_labels=2)
    model.train_adapter("a")
    names = trainable(model)
    # adapters leaves every head trainable (an inactive head gets no gradient); the base and PAL "b" are frozen
    assert names and all(".adapters.a." in n or "shared_parameters.a." in n or n.startswith("heads.") for n in names)
    assert any("shared_parameters.a.down_weight" in n for n in names)
    assert any(n.startswith("heads.a.") for n in names)


def test_fine_tuning_the_base_with_pals_updates_both():
    model = AutoAdapterModel.from_config(tiny_bert_config())
    model.add_adapter("a", config="pals")
    model.add_classification_head("a", num_labels=2)
    model.set_active_adapters("a")
    model.train()
    ids, mask = batch()
    labels = torch.tensor([0, 1, 1, 0])
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(5):
        loss = model(ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert any("encoder.layer.0.attention" in n for n in changed)  # base trained
    assert any(".pals.adapters.a." in n for n in changed) and any("shared_parameters.a" in n for n in changed)
    assert losses[-1] < losses[0]


def test_delete_adapter_removes_every_weight():
    model = bert()
    n_before = sum(p.numel() for p in model.parameters())
    model.add_adapter("t", config="pals")
    model.delete_adapter("t")
    assert sum(p.numel() for p in model.parameters()) == n_before
    assert "t" not in model.shared_parameters and "t" not in model.adapters_config


@pytest.mark.parametrize("preset", PRESETS)
def test_adapter_summary_counts_match_added_parameters(preset):
    model = bert()
    n_before = sum(p.numel() for p in model.parameters())
    model.add_adapter("t", config=preset)
    added = sum(p.numel() for p in model.parameters()) - n_before
    (row,) = [r for r in model.adapter_summary(as_dict=True) if r["name"] == "t"]
    assert row["#param"] == added > 0
    assert row["architecture"] == "pals"


def test_several_pal_adapters_are_independent():
    model = bert()
    model.add_adapter("a", config="pals")
    model.add_adapter("b", config="pals_no_share")
    ids, mask = batch()
    with torch.no_grad():
        model.set_active_adapters("a")
        out_a = model(ids, attention_mask=mask).last_hidden_state
        model.delete_adapter("b")
        assert torch.equal(model(ids, attention_mask=mask).last_hidden_state, out_a)


# --- composition -----------------------------------------------------------------------------


def outputs_per_adapter(model, names, ids, mask):
    out = {}
    for name in names:
        model.set_active_adapters(name)
        out[name] = model(ids, attention_mask=mask).last_hidden_state
    return out


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("padded", [True, False])
def test_parallel_and_batch_split_equal_separate_runs(attn, padded):
    model = bert(attn)
    names = ["a", "b", "c"]
    for name, preset in zip(names, ["pals", "pals_top_layers", "low_rank"]):
        model.add_adapter(name, config=preset)
    ids, mask = batch(padded, size=6)
    with torch.no_grad():
        single = outputs_per_adapter(model, names, ids, mask)
        model.set_active_adapters(Parallel(*names))
        par = model(ids, attention_mask=mask).last_hidden_state
        model.set_active_adapters(BatchSplit(*names, batch_sizes=[1, 3, 2]))
        split = model(ids, attention_mask=mask).last_hidden_state
    for i, name in enumerate(names):
        assert torch.allclose(par[6 * i : 6 * (i + 1)], single[name], atol=1e-6)
    for name, rows in zip(names, [slice(0, 1), slice(1, 4), slice(4, 6)]):
        assert torch.allclose(split[rows], single[name][rows], atol=1e-6)


def test_parallel_heads_on_adapter_model_equal_separate_runs():
    model = AutoAdapterModel.from_config(tiny_bert_config()).eval()
    for name, labels in (("a", 2), ("b", 3)):
        model.add_adapter(name, config="pals")
        model.add_classification_head(name, num_labels=labels)
    ids, mask = batch()
    with torch.no_grad():
        single = {}
        for name in ("a", "b"):
            model.set_active_adapters(name)
            model.active_head = name
            single[name] = model(ids, attention_mask=mask).logits
        model.set_active_adapters(Parallel("a", "b"))
        outputs = model(ids, attention_mask=mask)
    assert torch.allclose(outputs[0].logits, single["a"], atol=1e-6)
    assert torch.allclose(outputs[1].logits, single["b"], atol=1e-6)


def test_average_weights_the_pal_outputs():
    model = bert()
    model.add_adapter("a", config="pals")
    model.add_adapter("b", config="pals")
    ids, mask = batch()
    with torch.no_grad():
        model.set_active_adapters(Average("a", "b", weights=[1.0, 0.0]))
        avg = model(ids, attention_mask=mask).last_hidden_state
        model.set_active_adapters("a")
        assert torch.allclose(avg, model(ids, attention_mask=mask).last_hidden_state, atol=1e-6)


@pytest.mark.parametrize("block", [Fuse("a", "b"), Stack(Fuse("a", "b"))])
def test_unsupported_composition_names_the_block(block):
    model = bert()
    model.add_adapter("a", config="pals")
    model.add_adapter("b", config="pals")
    model.set_active_adapters(block)
    ids, mask = batch()
    with pytest.raises(ValueError, match="Fuse block"):
        model(ids, attention_mask=mask)


def test_pals_with_houlsby_on_one_model():
    model = bert()
    model.add_adapter("p", config="pals")
    model.add_adapter("h", config="double_seq_bn")
    model.add_adapter("u", config="pals|double_seq_bn")  # one adapter with both
    ids, mask = batch()
    with torch.no_grad():
        out = outputs_per_adapter(model, ["p", "h", "u"], ids, mask)
        model.set_active_adapters(Stack("h", "p"))
        both = model(ids, attention_mask=mask).last_hidden_state
    assert not torch.allclose(both, out["p"]) and not torch.allclose(both, out["h"])
    assert torch.isfinite(both).all() and torch.isfinite(out["u"]).all()
    model.train_adapter("u")
    names = trainable(model)
    assert any(".pals.adapters.u." in n for n in names) and any(".adapters.u.adapter_down" in n for n in names)


# --- models ------------------------------------------------------------------------------------


def test_roberta_and_sequence_classification_models_work():
    for model in (
        wrapped(RobertaModel(tiny_roberta_config("sdpa"))),
        wrapped(BertForSequenceClassification(tiny_bert_config())),
    ):
        ids, mask = batch()
        with torch.no_grad():
            base = model(ids, attention_mask=mask)[0]
            model.add_adapter("t", config="pals", set_active=True)
            assert not torch.allclose(model(ids, attention_mask=mask)[0], base)


def test_unsupported_architecture_is_a_clear_error():
    model = wrapped(GPT2Model(GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=99)))
    with pytest.raises(UnsupportedModelError, match="model_type 'gpt2'"):
        model.add_adapter("t", config="pals")
    assert "t" not in model.adapters_config
    model.add_adapter("lora", config="lora")  # the model itself still works


def test_feed_forward_chunking_is_refused():
    model = bert(chunk_size_feed_forward=2)
    with pytest.raises(UnsupportedModelError, match="chunk_size_feed_forward"):
        model.add_adapter("t", config="pals")


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
