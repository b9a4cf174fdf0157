"""CA-MTL as an `adapters` config type: each module against a plain re-statement of its formula, the
identity modulation, mixed batches, what trains, accounting, save/load and errors."""

import json
import math

import adapters
import pytest
import torch
from adapters import AdapterSetup, AutoAdapterModel
from adapters.composition import Average, BatchSplit, Fuse, MultiTask, Parallel, Stack
from helpers import batch, tiny_bert_config, tiny_roberta_config
from safetensors.torch import load_file, save_file
from transformers import BertConfig, BertModel, GPT2Config, GPT2Model, RobertaModel, XLMRobertaConfig, XLMRobertaModel

import pals_adapters
from pals_adapters import AdapterLoadError, ConfigError, UnsupportedModelError, UnsupportedOperationError
from pals_adapters.ca_mtl import (
    SHARED_MODULES_FILE,
    CAMTLConfig,
    ConditionalAttentionBias,
    count_ca_mtl_parameters,
    load_shared_modules,
    save_shared_modules,
    trainable_shared_parameters,
)

# 16 positions in 4 blocks of 4, or 3 blocks of 6, 6 and 4 (the reference's uneven layout)
CONFIG = "ca_mtl[max_seq_length=16,num_blocks=4]"
UNEVEN = "ca_mtl[max_seq_length=16,num_blocks=3]"


def wrapped(model):
    adapters.init(model)
    return model.eval()


def bert(attn="eager", **kw):
    return wrapped(BertModel(tiny_bert_config(attn, **kw)))


def with_tasks(model, *names, config=CONFIG):
    for name in names:
        model.add_adapter(name, config=config)
    randomize(model)
    return model


def randomize(model):
    """Non-trivial shared modules: the attention blocks start at 0 and the biases at 0, as in the code."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in model.base_model.ca_mtl.parameters():
            param.add_(torch.randn(param.shape, generator=g) * 0.2)


def encoder(model, ids, mask, **kw):
    return model.base_model(ids, attention_mask=mask, **kw).last_hidden_state


# --- an independent, plain re-statement of the paper's / reference code's formulas -------------------


def split_film(z, projection):
    gamma, beta = (z @ projection.weight.T + projection.bias).chunk(2, dim=-1)
    return gamma, beta


def reference_block_bias(z, attention, length):
    """M(z) as the reference code builds it: modulate the columns of the stacked blocks, cut the rows
    into N chunks, ``torch.block_diag`` them, drop the columns beyond L, then take the T x T corner."""
    gamma, beta = split_film(z, attention.film.projection)
    out = []
    for row in range(z.shape[0]):
        modulated = (1 + gamma[row]) * attention.blocks + beta[row]  # (L, b)
        chunks = modulated.split(attention.block_size, dim=0)
        full = torch.block_diag(*chunks)[:, : attention.max_seq_length]
        out.append(full[:length, :length])
    return torch.stack(out)


def reference_layer_norm(x, layer_norm, cln, z, weight=None, bias=None, eps=None):
    weight = layer_norm.weight if weight is None else weight
    bias = layer_norm.bias if bias is None else bias
    eps = layer_norm.eps if eps is None else eps
    normed = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + eps)
    if cln is None:
        return normed * weight + bias
    gamma, beta = split_film(z, cln.modulation.projection)
    return normed * ((1 + gamma) * weight + beta)[:, None, :] + bias


def reference_forward(model, plain, ids, attention_mask, z):
    """CA-MTL_BASE written out with matmuls, for rows conditioned on ``z`` (B, d); ``plain`` is an
    unadapted BERT with the same base weights."""
    shared = model.base_model.ca_mtl
    batch_size, length = ids.shape
    mask = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
    embedded = plain.embeddings(input_ids=ids)
    gamma, beta = split_film(z, shared.alignment.film.projection)
    h = (1 + gamma[:, None, :]) * embedded + beta[:, None, :]  # conditional alignment
    zt = z @ shared.task_transform.weight.T + shared.task_transform.bias
    for layer, conditional in zip(plain.encoder.layer, shared.layers):
        sa = layer.attention.self
        heads, size = sa.num_attention_heads, sa.attention_head_size
        q, k, v = (
            (h @ lin.weight.T + lin.bias).reshape(batch_size, length, heads, size).transpose(1, 2)
            for lin in (sa.query, sa.key, sa.value)
        )
        bias = reference_block_bias(zt, conditional.attention, length)[:, None]
        scores = q @ k.transpose(-1, -2) / math.sqrt(size) + bias + mask
        context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch_size, length, heads * size)
        a = reference_layer_norm(
            layer.attention.output.dense(context) + h, layer.attention.output.LayerNorm, conditional.attention_norm, zt
        )
        ffn = layer.output.dense(layer.intermediate(a))
        out = reference_layer_norm(ffn + a, layer.output.LayerNorm, conditional.output_norm, zt)
        if conditional.bottleneck is not None:
            b = conditional.bottleneck
            c = zt @ b.condition.weight.T + b.condition.bias
            g, bt = split_film(c, b.film.projection)
            y = ((1 + g[:, None, :]) * out + bt[:, None, :]) @ b.down.weight.T + b.down.bias
            y = y @ b.up.weight.T + b.up.bias
            out = reference_layer_norm(y + a, None, b.norm, zt, b.norm.weight, b.norm.bias, b.norm.eps)
        h = out
    return h


def plain_copy(model, attn="eager", config=None):
    plain = BertModel(config or tiny_bert_config(attn)).eval()
    plain.load_state_dict(model.state_dict(), strict=False)
    return plain


def task_z(model, name, rows):
    return model.encoder.layer[0].ca_mtl_tasks.adapters[name].weight.expand(rows, -1)


@pytest.mark.parametrize("config", [CONFIG, UNEVEN])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("padded", [True, False])
def test_forward_matches_plain_formula(config, attn, padded):
    model = with_tasks(bert(attn), "a", config=config)
    ids, mask = batch(padded)
    with torch.no_grad(), AdapterSetup("a"):
        out = encoder(model, ids, mask)
        expected = reference_forward(model, plain_copy(model), ids, mask, task_z(model, "a", len(ids)))
    torch.testing.assert_close(out, expected, atol=2e-5, rtol=0)


@pytest.mark.parametrize("length, blocks", [(16, 4), (16, 3), (10, 3), (7, 1), (9, 9)])
def test_block_bias_is_the_reference_block_diagonal(length, blocks):
    config = CAMTLConfig(max_seq_length=length, num_blocks=blocks)
    sizes = config.sizes(hidden_size=24, num_layers=2)
    attention = ConditionalAttentionBias(24, length, sizes.block_size)
    with torch.no_grad():
        attention.blocks.normal_()
        attention.film.projection.bias.normal_()
    z = torch.randn(3, 24)
    for t in (length, length - 2, 1):
        if t < 1:
            continue
        got = attention(z, t)
        assert got.shape == (3, 1, t, t)
        torch.testing.assert_close(got[:, 0], reference_block_bias(z, attention, t))
    # off the diagonal blocks the bias is 0 (it is a bias, not a mask)
    full = attention(z, length)[:, 0]
    block = torch.arange(length) // sizes.block_size
    assert torch.all(full[:, block[:, None] != block[None, :]] == 0)


def test_sizes_scale_with_the_model_as_documented():
    bert_base = CAMTLConfig().sizes(768, 12)
    assert (bert_base.num_blocks, bert_base.block_size, bert_base.bottleneck_size) == (6, 22, 256)
    assert (bert_base.num_frozen_layers, bert_base.first_conditional_norm_layer) == (6, 6)
    minilm = CAMTLConfig().sizes(384, 6)
    assert (minilm.num_blocks, minilm.block_size, minilm.bottleneck_size) == (3, 43, 128)
    assert (minilm.num_frozen_layers, minilm.first_conditional_norm_layer) == (3, 3)
    tiny = CAMTLConfig().sizes(48, 4)
    assert (tiny.num_blocks, tiny.block_size) == (1, 128)


# --- identity modulation ------------------------------------------------------------------------------


def identity_modulation(model):
    with torch.no_grad():
        for name, param in model.base_model.ca_mtl.named_parameters():
            if ".projection." in name or name.startswith("layers.") and name.endswith("attention.blocks"):
                param.zero_()


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_at_identity_modulation_every_layer_below_the_bottleneck_is_the_pretrained_one(attn):
    model = with_tasks(bert(attn), "a")
    identity_modulation(model)
    ids, mask = batch()
    with torch.no_grad():
        base = model.base_model(ids, attention_mask=mask, output_hidden_states=True).hidden_states
        with AdapterSetup("a"):
            ours = model.base_model(ids, attention_mask=mask, output_hidden_states=True).hidden_states
        plain = plain_copy(model, attn)
        top = plain.encoder.layer[-1]
        a = top.attention(base[-2], attention_mask=(1.0 - mask[:, None, None, :].float()) * -1e9)[0]
        bottleneck = model.base_model.ca_mtl.layers[-1].bottleneck
        z = model.base_model.ca_mtl.task_transform(task_z(model, "a", len(ids)))
        expected_top = bottleneck(top.output(top.intermediate(a), a), a, z)
    # embeddings (alignment), attention with M = 0, conditional LayerNorms at BERT's own weights
    for level in range(len(base) - 1):
        torch.testing.assert_close(ours[level], base[level], atol=1e-5, rtol=0, msg=f"hidden states {level}")
    # the top layer = BERT's top layer, then the conditional bottleneck (residual: the attention output)
    torch.testing.assert_close(ours[-1], expected_top, atol=1e-5, rtol=0)


def test_an_inactive_ca_mtl_adapter_leaves_the_model_as_it_was():
    model = bert()
    ids, mask = batch()
    with torch.no_grad():
        before = encoder(model, ids, mask)
        with_tasks(model, "a")
        assert torch.equal(encoder(model, ids, mask), before)
        with AdapterSetup("a"):
            assert not torch.allclose(encoder(model, ids, mask), before)


# --- dynamic padding ----------------------------------------------------------------------------------


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_dynamic_padding_equals_padding_to_the_block_layout(attn):
    model = with_tasks(bert(attn), "a")
    ids, mask = batch(padded=True, length=9)
    full_ids = torch.cat([ids, torch.zeros(len(ids), 16 - 9, dtype=ids.dtype)], dim=1)
    full_mask = torch.cat([mask, torch.zeros(len(ids), 16 - 9, dtype=mask.dtype)], dim=1)
    with torch.no_grad(), AdapterSetup("a"):
        short = encoder(model, ids, mask)
        full = encoder(model, full_ids, full_mask)
    real = mask.bool()
    torch.testing.assert_close(short[real], full[:, :9][real], atol=1e-5, rtol=0)


def test_a_sequence_longer_than_the_block_layout_is_refused():
    model = with_tasks(bert(), "a")
    ids, mask = batch(padded=False, length=17)
    with pytest.raises(ValueError, match="max_seq_length=16"), AdapterSetup("a"):
        encoder(model, ids, mask)


# --- mixed batches and compositions -------------------------------------------------------------------


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_a_mixed_batch_equals_its_per_task_parts_in_outputs_and_gradients(attn):
    model = with_tasks(bert(attn), "a", "b", "c")
    model.train_adapter(MultiTask("a", "b", "c"))
    for module in model.modules():
        module.training = False  # no dropout: the two runs must see the same function
    ids, mask = batch(size=6)
    task_ids = torch.tensor([2, 0, 1, 0, 2, 2])
    target = torch.randn(6, ids.shape[1], model.config.hidden_size)
    with AdapterSetup(MultiTask("a", "b", "c")):
        mixed = encoder(model, ids, mask, task_ids=task_ids)
    ((mixed - target) ** 2).sum().backward()
    mixed_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    parts = torch.zeros_like(mixed)
    for index, name in enumerate("abc"):
        rows = task_ids == index
        with AdapterSetup(name):
            out = encoder(model, ids[rows], mask[rows])
        ((out - target[rows]) ** 2).sum().backward()
        parts[rows] = out.detach()
    torch.testing.assert_close(mixed.detach(), parts, atol=1e-5, rtol=0)
    part_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert mixed_grads.keys() == part_grads.keys()
    assert {f"encoder.layer.0.ca_mtl_tasks.adapters.{t}.weight" for t in "abc"} <= mixed_grads.keys()
    for name in mixed_grads:
        torch.testing.assert_close(mixed_grads[name], part_grads[name], atol=1e-4, rtol=1e-4, msg=name)


def test_batch_split_equals_separate_runs_and_average_mixes_the_embeddings():
    model = with_tasks(bert(), "a", "b")
    ids, mask = batch()
    with torch.no_grad():
        with AdapterSetup("a"):
            out_a = encoder(model, ids[:1], mask[:1])
        with AdapterSetup("b"):
            out_b = encoder(model, ids[1:], mask[1:])
        with AdapterSetup(BatchSplit("a", "b", batch_sizes=[1, 3])):
            split = encoder(model, ids, mask)
        torch.testing.assert_close(split, torch.cat([out_a, out_b]), atol=1e-5, rtol=0)
        with AdapterSetup(Average("a", "b", weights=[0.25, 0.75])):
            averaged = encoder(model, ids, mask)
        tasks = model.encoder.layer[0].ca_mtl_tasks.adapters
        z = 0.25 * tasks["a"].weight + 0.75 * tasks["b"].weight
        expected = reference_forward(model, plain_copy(model), ids, mask, z.expand(len(ids), -1))
    torch.testing.assert_close(averaged, expected, atol=2e-5, rtol=0)


@pytest.mark.parametrize(
    "block, says",
    [
        (Stack("a", "b"), "stacked on another CA-MTL adapter"),
        (Parallel("a", "b"), "Parallel"),
        (Fuse("a", "b"), "Fuse"),
    ],
)
def test_compositions_without_a_meaning_for_ca_mtl_are_refused(block, says):
    model = with_tasks(bert(), "a", "b")
    ids, mask = batch()
    with pytest.raises(ValueError, match=says), AdapterSetup(block):
        encoder(model, ids, mask)


def test_rows_without_a_ca_mtl_task_are_refused():
    model = with_tasks(bert(), "a")
    model.add_adapter("h", config="double_seq_bn")
    ids, mask = batch()
    with (
        pytest.raises(ValueError, match="without a CA-MTL task"),
        AdapterSetup(BatchSplit("a", "h", batch_sizes=[2, 2])),
    ):
        encoder(model, ids, mask)


def test_gradient_checkpointing_recomputes_with_the_condition():
    torch.manual_seed(0)
    model = AutoAdapterModel.from_config(tiny_bert_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    with_tasks(model, "a")
    model.train_adapter("a")
    ids, mask = batch()
    grads = []
    for checkpointing in (False, True):
        if checkpointing:
            model.gradient_checkpointing_enable()
        model.zero_grad()
        encoder(model, ids, mask).pow(2).mean().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-6, rtol=1e-5, msg=name)


# --- what trains ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("film_trains", [True, False])
def test_train_adapter_freezes_the_bottom_half_and_trains_the_rest(film_trains):
    model = with_tasks(
        bert(), "a", "b", config=f"ca_mtl[max_seq_length=16,num_blocks=4,train_frozen_attention_film={film_trains}]"
    )
    model.add_adapter("h", config="double_seq_bn")  # another method's adapter inside the upper layers
    model.train_adapter("a")
    trains = {n for n, p in model.named_parameters() if p.requires_grad}
    expected = {"encoder.layer.0.ca_mtl_tasks.adapters.a.weight"}
    expected |= {f"ca_mtl.{n}" for n, _ in model.ca_mtl.named_parameters()}
    if not film_trains:  # the reference code's quirk: the attention FiLM of the frozen layers stays as initialised
        expected -= {f"ca_mtl.layers.{i}.attention.film.projection.{p}" for i in (0, 1) for p in ("weight", "bias")}
    for i in (2, 3):  # the upper half (4 layers)
        expected |= {
            n for n, _ in model.named_parameters() if n.startswith(f"encoder.layer.{i}.") and ".adapters.h." not in n
        }
    expected |= {n for n, _ in model.named_parameters() if n.startswith("pooler.")}
    assert trains == expected
    assert {n for n, _ in trainable_shared_parameters(model)} == expected - {
        "encoder.layer.0.ca_mtl_tasks.adapters.a.weight"
    }


def test_training_leaves_the_embeddings_and_bottom_layers_as_pretrained():
    model = with_tasks(bert(), "a")
    model.train_adapter("a")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    ids, mask = batch()
    encoder(model, ids, mask).pow(2).mean().backward()
    optimizer.step()
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert not any(
        n.startswith(("embeddings.", "encoder.layer.0.", "encoder.layer.1.")) and "ca_mtl_tasks" not in n
        for n in changed
    )
    assert "encoder.layer.0.ca_mtl_tasks.adapters.a.weight" in changed
    assert any(n.startswith("encoder.layer.3.") for n in changed) and any(n.startswith("ca_mtl.") for n in changed)


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


# --- save and load ------------------------------------------------------------------------------------


MODEL_FACTORIES = {
    "AutoAdapterModel": lambda cfg: AutoAdapterModel.from_config(cfg).eval(),
    "BertModel": lambda cfg: wrapped(BertModel(cfg)),
}


def base_copy(factory, source, cfg):
    fresh = factory(cfg)
    keys = {k: v for k, v in source.state_dict().items() if "ca_mtl" not in k}
    fresh.load_state_dict(keys, strict=False)
    return fresh


@pytest.mark.parametrize("kind", list(MODEL_FACTORIES))
def test_save_load_round_trip(tmp_path, kind):
    factory, cfg = MODEL_FACTORIES[kind], tiny_bert_config()
    model = with_tasks(factory(cfg), "a", "b")
    ids, mask = batch()
    with torch.no_grad(), AdapterSetup(MultiTask("a", "b")):
        expected = encoder(model, ids, mask, task_ids=torch.tensor([1, 0, 1, 1]))
    for name in "ab":
        model.save_adapter(str(tmp_path / name), name)
        saved = load_file(tmp_path / name / "adapter.safetensors")
        assert [v.numel() for v in saved.values()] == [48]  # only the task embedding: the rest is shared
    save_shared_modules(model, tmp_path / "shared")
    fresh = base_copy(factory, model, cfg)
    for name in "ab":
        assert fresh.load_adapter(str(tmp_path / name)) == name
    load_shared_modules(fresh, tmp_path / "shared")
    with torch.no_grad(), AdapterSetup(MultiTask("a", "b")):
        torch.testing.assert_close(
            encoder(fresh, ids, mask, task_ids=torch.tensor([1, 0, 1, 1])), expected, atol=1e-6, rtol=0
        )


def test_adapter_moves_between_an_adapter_model_and_a_wrapped_plain_model(tmp_path):
    cfg = tiny_bert_config()
    source = with_tasks(AutoAdapterModel.from_config(cfg).eval(), "a")
    ids, mask = batch()
    with torch.no_grad(), AdapterSetup("a"):
        expected = encoder(source, ids, mask)
    source.save_adapter(str(tmp_path / "a"), "a", with_head=False)
    save_shared_modules(source, tmp_path / "shared")
    plain = wrapped(BertModel(cfg))
    plain.load_state_dict({k: v for k, v in source.bert.state_dict().items() if "ca_mtl" not in k}, strict=False)
    plain.load_adapter(str(tmp_path / "a"), load_as="renamed")
    load_shared_modules(plain, tmp_path / "shared")
    with torch.no_grad(), AdapterSetup("renamed"):
        torch.testing.assert_close(encoder(plain, ids, mask), expected, atol=1e-6, rtol=0)


def test_whole_model_save_pretrained_round_trip(tmp_path):
    model = with_tasks(AutoAdapterModel.from_config(tiny_bert_config()).eval(), "a")
    model.add_classification_head("a", num_labels=3)
    model.set_active_adapters("a")
    ids, mask = batch()
    with torch.no_grad():
        expected = model(ids, attention_mask=mask).logits
    model.save_pretrained(str(tmp_path))
    loaded = AutoAdapterModel.from_pretrained(str(tmp_path)).eval()
    loaded.set_active_adapters("a")
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids, attention_mask=mask).logits, expected, atol=1e-6, rtol=0)


EMBEDDING = "encoder.layer.0.ca_mtl_tasks.adapters.t.weight"


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda w: w.pop(EMBEDDING), "missing from the file"),
        (lambda w: w.update({"encoder.layer.1.ca_mtl_tasks.adapters.t.weight": torch.zeros(48)}), "no place for"),
        (lambda w: w.update({EMBEDDING: torch.zeros(40)}), "do not fit"),
    ],
)
def test_loading_never_drops_or_misplaces_weights(tmp_path, change, message):
    model = with_tasks(bert(), "t")
    model.save_adapter(str(tmp_path), "t")
    weights = load_file(tmp_path / "adapter.safetensors")
    change(weights)
    save_file(weights, tmp_path / "adapter.safetensors")
    fresh = bert()
    with pytest.raises(AdapterLoadError, match=message):
        fresh.load_adapter(str(tmp_path))
    assert "t" not in fresh.adapters_config


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda w: w.pop("task_transform.bias"), "missing"),
        (lambda w: w.update({"extra": torch.zeros(2)}), "unexpected"),
        (lambda w: w.update({"layers.0.attention.blocks": torch.zeros(16, 5)}), "wrong shape"),
    ],
)
def test_shared_modules_load_strictly(tmp_path, change, message):
    model = with_tasks(bert(), "t")
    save_shared_modules(model, tmp_path)
    weights = load_file(tmp_path / SHARED_MODULES_FILE)
    change(weights)
    save_file(weights, tmp_path / SHARED_MODULES_FILE)
    fresh = with_tasks(bert(), "t")
    before = {k: v.clone() for k, v in fresh.ca_mtl.state_dict().items()}
    with pytest.raises(AdapterLoadError, match=message):
        load_shared_modules(fresh, tmp_path)
    assert all(torch.equal(v, before[k]) for k, v in fresh.ca_mtl.state_dict().items())  # nothing loaded


def test_shared_modules_of_another_config_are_refused(tmp_path):
    model = with_tasks(bert(), "t")
    save_shared_modules(model, tmp_path)
    other = with_tasks(bert(), "t", config=UNEVEN)
    with pytest.raises(AdapterLoadError, match="num_blocks"):
        load_shared_modules(other, tmp_path)


def test_delete_adapter_removes_the_task_embedding_and_keeps_the_shared_modules():
    model = with_tasks(bert(), "a", "b")
    model.delete_adapter("a")
    names = {n for n, _ in model.named_parameters()}
    assert not any(".adapters.a." in n for n in names) and any(".adapters.b." in n for n in names)
    assert any(n.startswith("ca_mtl.") for n in names)


def test_average_adapter_starts_a_new_task_from_known_embeddings():
    model = with_tasks(bert(), "a", "b")
    model.average_adapter("c", ["a", "b"], weights=[0.25, 0.75])
    tasks = model.encoder.layer[0].ca_mtl_tasks.adapters
    torch.testing.assert_close(tasks["c"].weight, 0.25 * tasks["a"].weight + 0.75 * tasks["b"].weight)


def test_reinitialize_top_layer_reproduces_the_reference_and_touches_nothing_else():
    from pals_adapters.ca_mtl import reinitialize_top_layer

    model = with_tasks(bert(), "a")
    model.add_adapter("h", config="double_seq_bn")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    reinitialize_top_layer(model)
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    top = {n for n in before if n.startswith("encoder.layer.3.") and ".adapters.h." not in n}
    # every weight matrix of the top layer is drawn again; LayerNorms go back to 1 and biases to 0
    assert {n for n in top if n.endswith("weight") and "LayerNorm" not in n} <= changed <= top
    layer = model.encoder.layer[3]
    assert torch.equal(layer.output.LayerNorm.weight, torch.ones(48)) and torch.equal(
        layer.output.dense.bias, torch.zeros(48)
    )


# --- adapters' generic calls (issue 24.4) ------------------------------------------------------------


def shared_count(model):
    return sum(p.numel() for p in model.base_model.ca_mtl.parameters())


def test_adapter_summary_counts_the_shared_modules_with_the_ca_mtl_adapters_not_the_model():
    model = bert()
    base = sum(p.numel() for p in model.parameters())
    with_tasks(model, "a", "b")
    model.add_adapter("h", config="double_seq_bn")
    houlsby = sum(p.numel() for n, p in model.named_parameters() if ".adapters.h." in n)
    model.train_adapter("a")
    rows = {row["name"]: row for row in model.adapter_summary(as_dict=True)}
    shared = shared_count(model)
    assert rows["Full model"]["#param"] == base  # the base model's own parameters, nothing else
    assert rows["a"]["#param"] == rows["b"]["#param"] == 48 + shared
    assert rows["h"]["#param"] == houlsby
    assert (rows["a"]["train"], rows["b"]["train"]) == (True, False)
    assert rows["a"]["%param"] == pytest.approx(100 * (48 + shared) / base)
    text = model.adapter_summary()
    assert f"{base:,}" in text and f"{48 + shared:,}" in text and f"the {shared:,} parameters" in text


def test_deleting_the_last_ca_mtl_adapter_gives_back_the_base_model():
    model = bert()
    ids, mask = batch()
    plain_keys = set(model.state_dict())
    with torch.no_grad():
        before = encoder(model, ids, mask)
    with_tasks(model, "a", "b")
    model.delete_adapter("a")
    assert hasattr(model, "ca_mtl")  # "b" still uses the shared modules
    model.delete_adapter("b")
    assert set(model.state_dict()) == plain_keys  # shared modules and the task-embedding layer are gone
    assert not any(hook for m in model.modules() for hook in m._forward_hooks.values() if hasattr(hook, "func"))
    assert model.adapter_summary(as_dict=True)[-1]["#param"] == sum(p.numel() for p in model.parameters())
    with torch.no_grad():
        assert torch.equal(encoder(model, ids, mask), before)
    # a later CA-MTL adapter starts afresh (one set of hooks): it equals one added to an untouched model
    once = plain_copy_of(model)
    for target in (model, once):
        torch.manual_seed(5)
        with_tasks(target, "c")
    with torch.no_grad(), AdapterSetup("c"):
        torch.testing.assert_close(encoder(model, ids, mask), encoder(once, ids, mask), atol=1e-6, rtol=0)


def plain_copy_of(model):
    fresh = bert()
    fresh.load_state_dict({k: v for k, v in model.state_dict().items() if "ca_mtl" not in k}, strict=False)
    return fresh


def saved_tasks(tmp_path, *names):
    """A model with trained-looking CA-MTL tasks, their folders and its shared modules' folder."""
    model = with_tasks(bert(), *names)
    for name in names:
        model.save_adapter(str(tmp_path / name), name)
    save_shared_modules(model, tmp_path / "shared")
    return model


def test_a_task_loaded_without_its_shared_modules_refuses_to_run_until_they_are_loaded(tmp_path):
    model = saved_tasks(tmp_path, "a", "b")
    ids, mask = batch()
    fresh = plain_copy_of(model)
    fresh.load_adapter(str(tmp_path / "a"))
    fresh.load_adapter(str(tmp_path / "b"))
    for setup in ("a", MultiTask("a", "b")):
        kwargs = {"task_ids": torch.tensor([0, 1, 1, 0])} if isinstance(setup, MultiTask) else {}
        with pytest.raises(AdapterLoadError, match=r"'a' from .*/a.*load_shared_modules"), AdapterSetup(setup):
            encoder(fresh, ids, mask, **kwargs)
    load_shared_modules(fresh, tmp_path / "shared")
    with torch.no_grad(), AdapterSetup("b"):
        torch.testing.assert_close(encoder(fresh, ids, mask), encoder(model, ids, mask), atol=1e-6, rtol=0)


@pytest.mark.parametrize("how", ["state dict", "train_adapter"])
def test_a_state_dict_holding_the_shared_modules_or_training_them_ends_the_wait(tmp_path, how):
    model = saved_tasks(tmp_path, "a")
    fresh = plain_copy_of(model)
    fresh.load_adapter(str(tmp_path / "a"))
    if how == "state dict":
        fresh.load_state_dict(model.state_dict())
    else:
        fresh.train_adapter("a")
    ids, mask = batch()
    with AdapterSetup("a"):
        out = encoder(fresh, ids, mask)
    if how == "state dict":
        with AdapterSetup("a"):
            torch.testing.assert_close(out, encoder(model, ids, mask), atol=1e-6, rtol=0)


def test_a_task_loaded_onto_a_model_that_has_its_shared_modules_runs_at_once(tmp_path):
    model = with_tasks(AutoAdapterModel.from_config(tiny_bert_config()).eval(), "a", "b")
    model.save_adapter(str(tmp_path / "b"), "b", with_head=False)
    ids, mask = batch()
    with torch.no_grad(), AdapterSetup("b"):
        expected = encoder(model, ids, mask)
    model.delete_adapter("b")
    model.save_pretrained(str(tmp_path / "model"))  # the shared modules and task "a"
    loaded = AutoAdapterModel.from_pretrained(str(tmp_path / "model")).eval()
    loaded.load_adapter(str(tmp_path / "b"))
    with torch.no_grad(), AdapterSetup("b"):
        torch.testing.assert_close(encoder(loaded, ids, mask), expected, atol=1e-6, rtol=0)


def test_load_shared_modules_reads_the_files_of_earlier_versions(tmp_path):
    model = saved_tasks(tmp_path, "a")
    shared = tmp_path / "shared"
    (shared / SHARED_MODULES_FILE).rename(shared / "ca_mtl_shared.safetensors")  # save_shared_modules before
    fresh = plain_copy_of(model)
    fresh.load_adapter(str(tmp_path / "a"))
    load_shared_modules(fresh, shared)
    (shared / "ca_mtl_config.json").unlink()  # a harness export's base folder has the weights only
    (shared / "ca_mtl_shared.safetensors").rename(shared / SHARED_MODULES_FILE)
    load_shared_modules(fresh, shared)
    ids, mask = batch()
    with torch.no_grad(), AdapterSetup("a"):
        torch.testing.assert_close(encoder(fresh, ids, mask), encoder(model, ids, mask), atol=1e-6, rtol=0)
    with pytest.raises(AdapterLoadError, match="holds no CA-MTL shared modules"):
        load_shared_modules(fresh, tmp_path / "a")


def test_merging_and_fusing_ca_mtl_adapters_are_refused_and_change_nothing():
    model = with_tasks(bert(), "a", "b")
    model.add_adapter("h", config="double_seq_bn")
    ids, mask = batch()
    with torch.no_grad(), AdapterSetup("a"):
        before = encoder(model, ids, mask)
    with pytest.raises(UnsupportedOperationError, match="CA-MTL adapter 'a' cannot be merged"):
        model.merge_adapter("a")
    for names in (["a", "b"], "a,h", Fuse("h", "b")):
        with pytest.raises(UnsupportedOperationError, match="cannot be fused.*Average"):
            model.add_adapter_fusion(names)
    assert not model.adapters_config.fusions
    with torch.no_grad(), AdapterSetup("a"):
        assert torch.equal(encoder(model, ids, mask), before)


def test_supports_adapter_answers_for_ca_mtl():
    gpt2 = wrapped(GPT2Model(GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=50)))
    assert not gpt2.supports_adapter("ca_mtl") and not gpt2.supports_adapter(CAMTLConfig())
    assert gpt2.supports_adapter("lora") and bert().supports_adapter("ca_mtl")


@pytest.mark.parametrize("dtype, atol", [(torch.float16, 1e-2), (torch.bfloat16, 8e-2)])
def test_half_precision_gives_the_float32_outputs(dtype, atol):
    model = with_tasks(bert(), "a")
    ids, mask = batch()
    with torch.no_grad(), AdapterSetup("a"):
        expected = encoder(model, ids, mask)
        model.to(dtype)
        out = encoder(model, ids, mask)
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), expected, atol=atol, rtol=0)


def test_a_saved_setup_reloads_with_its_shared_modules(tmp_path):
    model = with_tasks(AutoAdapterModel.from_config(tiny_bert_config()).eval(), "a", "b")
    for i, name in enumerate("ab"):
        model.add_classification_head(name, num_labels=2 + i)
    setup = BatchSplit("a", "b", batch_sizes=[1, 3])
    model.save_adapter_setup(str(tmp_path / "setup"), setup, head_setup=setup)
    save_shared_modules(model, tmp_path / "shared")
    fresh = AutoAdapterModel.from_config(tiny_bert_config()).eval()
    fresh.load_state_dict({k: v for k, v in model.state_dict().items() if "ca_mtl" not in k}, strict=False)
    fresh.load_adapter_setup(str(tmp_path / "setup"), set_active=True)
    load_shared_modules(fresh, tmp_path / "shared")
    ids, mask = batch()
    for name in "ab":
        for m in (model, fresh):
            m.set_active_adapters(name)
            m.active_head = name
        with torch.no_grad():
            torch.testing.assert_close(
                fresh(ids, attention_mask=mask).logits, model(ids, attention_mask=mask).logits, atol=1e-6, rtol=0
            )
