"""One set of checks applied to every encoder family PALs support, and the clear refusal for the others."""

import json
import subprocess
import sys
import textwrap

import adapters
import pytest
import torch
from adapters import AutoAdapterModel
from adapters.composition import BatchSplit, MultiTask, Parallel
from safetensors.torch import load_file, save_file
from tiny_models import ARCHITECTURES, encode, inputs, plain_model, reference_forward, tiny_config
from transformers import AutoModel, BartConfig, DebertaConfig, GPT2Config, T5Config

import pals_adapters
from pals_adapters import PALsConfig, UnsupportedModelError

ARCHS = list(ARCHITECTURES)
# (arch, config overrides) cases for the formula: both mask paths where a family has two.
FORMULA_CASES = [(arch, {}) for arch in ARCHS] + [
    ("bert", {"attn_implementation": "sdpa"}),
    ("distilbert", {"attn_implementation": "sdpa"}),
    ("roberta", {"attn_implementation": "sdpa"}),
]
FORMULA_IDS = [f"{arch}-{overrides.get('attn_implementation', 'default')}" for arch, overrides in FORMULA_CASES]


def test_the_table_covers_every_family_tested_here():
    assert set(pals_adapters.ARCHITECTURES) == set(ARCHITECTURES)


@pytest.mark.parametrize("arch, overrides", FORMULA_CASES, ids=FORMULA_IDS)
@pytest.mark.parametrize("preset", ["pals", "pals_no_share", "low_rank"])
def test_forward_equals_the_plain_formula(arch, overrides, preset):
    model = plain_model(arch, **overrides)
    model.add_adapter("t", config=preset, set_active=True)
    batch = inputs()
    heads = model.adapters_config.match("t", PALsConfig).num_attention_heads
    with torch.no_grad():
        out = encode(model, batch)
        expected = reference_forward(model, arch, "t", batch, heads)
    valid = batch["attention_mask"].bool()  # padded positions are not compared: families mask them differently
    torch.testing.assert_close(out[valid], expected[valid], atol=2e-5, rtol=0)


@pytest.mark.parametrize("arch, overrides", FORMULA_CASES, ids=FORMULA_IDS)
def test_parallel_batch_split_and_multitask_equal_single_runs(arch, overrides):
    model = plain_model(arch, **overrides)
    model.add_adapter("a", config="pals")
    model.add_adapter("b", config="pals_no_share")
    batch = inputs()
    single = {}
    with torch.no_grad():
        for name in ("a", "b"):
            model.set_active_adapters(name)
            single[name] = encode(model, batch)
        # Parallel twice in a row: the second layer gets a batch already widened by the first
        model.set_active_adapters(Parallel("a", "b"))
        par = encode(model, batch)
        model.set_active_adapters(BatchSplit("a", "b", batch_sizes=[1, 2]))
        split = encode(model, batch)
        model.set_active_adapters(MultiTask("a", "b"))
        routed = model(**batch, task_ids=torch.tensor([1, 0, 1])).last_hidden_state
    valid = batch["attention_mask"].bool()
    torch.testing.assert_close(par[:3][valid], single["a"][valid], atol=1e-5, rtol=0)
    torch.testing.assert_close(par[3:][valid], single["b"][valid], atol=1e-5, rtol=0)
    expected_split = torch.cat([single["a"][:1], single["b"][1:]])
    torch.testing.assert_close(split[valid], expected_split[valid], atol=1e-5, rtol=0)
    expected_routed = torch.stack([single["b"][0], single["a"][1], single["b"][2]])
    torch.testing.assert_close(routed[valid], expected_routed[valid], atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch", ARCHS)
def test_zero_pal_output_equals_the_unadapted_model_exactly(arch):
    model = plain_model(arch)
    batch = inputs()
    with torch.no_grad():
        before = encode(model, batch)
        model.add_adapter("s", config="pals", set_active=False)
        model.add_adapter("n", config="pals_no_share", set_active=False)
        model.base_model.shared_parameters["s"]["up_weight"].zero_()
        model.base_model.shared_parameters["s"]["up_bias"].zero_()
        for _, layer in model.base_model.iter_layers():
            layer.pals.adapters["n"].projections["up_weight"].zero_()
            layer.pals.adapters["n"].projections["up_bias"].zero_()
        for name in ("s", "n"):
            model.set_active_adapters(name)
            assert torch.equal(encode(model, batch), before), name
        model.set_active_adapters("s")
        model.base_model.shared_parameters["s"]["up_weight"].normal_()  # (a constant bias would vanish in LayerNorm)
        assert not torch.allclose(encode(model, batch), before)  # and the PAL is really on the path


@pytest.mark.parametrize("arch", ARCHS)
def test_train_adapter_trains_only_pal_and_head(arch):
    torch.manual_seed(0)
    model = AutoAdapterModel.from_config(tiny_config(arch))
    for name in ("a", "b"):
        model.add_adapter(name, config="pals")
        model.add_classification_head(name, num_labels=2)
    model.train_adapter("a")
    model.active_head = "a"
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".a." in n or n.startswith("heads.") for n in trainable), trainable
    assert any("shared_parameters.a." in n for n in trainable) and any(".pals.adapters.a." in n for n in trainable)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    batch = inputs()
    loss = model(**batch, labels=torch.tensor([0, 1, 1])).loss
    loss.backward()
    torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1).step()
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert any(".pals.adapters.a." in n for n in changed) and any("shared_parameters.a." in n for n in changed)
    assert all(".a." in n or n.startswith("heads.a.") for n in changed), changed


LOAD_IN_FRESH_PROCESS = textwrap.dedent(
    """
    import json, sys
    import adapters, torch
    from safetensors.torch import load_file
    from transformers import AutoModel
    import pals_adapters

    root = sys.argv[1]
    results = {}
    for arch in json.loads(open(root + "/archs.json").read()):
        model = AutoModel.from_pretrained(f"{root}/{arch}/base").eval()
        adapters.init(model)
        name = model.load_adapter(f"{root}/{arch}/adapter", set_active=True)
        data = load_file(f"{root}/{arch}/expected.safetensors")
        with torch.no_grad():
            got = model(input_ids=data["input_ids"], attention_mask=data["attention_mask"]).last_hidden_state
        results[arch] = [name, bool(torch.equal(got, data["expected"]))]
    print(json.dumps(results))
    """
)


def test_save_then_load_in_a_fresh_process_gives_the_same_outputs(tmp_path):
    for arch in ARCHS:
        model = plain_model(arch)
        model.add_adapter("t", config="pals", set_active=True)
        batch = inputs()
        with torch.no_grad():
            expected = encode(model, batch)
        model.save_adapter(str(tmp_path / arch / "adapter"), "t")
        model.delete_adapter("t")
        model.save_pretrained(str(tmp_path / arch / "base"))
        save_file({"expected": expected, **batch}, str(tmp_path / arch / "expected.safetensors"))
        assert load_file(str(tmp_path / arch / "adapter" / "adapter.safetensors"))
    (tmp_path / "archs.json").write_text(json.dumps(ARCHS))
    result = subprocess.run(
        [sys.executable, "-c", LOAD_IN_FRESH_PROCESS, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded == {arch: ["t", True] for arch in ARCHS}


# --- what does not fit -------------------------------------------------------------------------

UNSUPPORTED = {
    "gpt2": (lambda: GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=99), "model_type 'gpt2'"),
    "t5": (lambda: T5Config(d_model=32, d_ff=37, num_layers=2, num_heads=4, d_kv=8, vocab_size=99), "model_type 't5'"),
    "bart": (
        lambda: BartConfig(
            d_model=32,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=37,
            decoder_ffn_dim=37,
            vocab_size=99,
        ),
        "model_type 'bart'",
    ),
    "deberta": (
        lambda: DebertaConfig(
            vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37
        ),
        "model_type 'deberta'",
    ),
    "bert-chunked": (lambda: tiny_config("bert", chunk_size_feed_forward=2), "chunk_size_feed_forward"),
    "bert-decoder": (lambda: tiny_config("bert", is_decoder=True), "is_decoder"),
    "xmod-pre-norm": (lambda: tiny_config("xmod", pre_norm=True), "pre_norm"),
}


@pytest.mark.parametrize("case", list(UNSUPPORTED))
def test_what_does_not_fit_is_refused_before_anything_is_built(case):
    make_config, message = UNSUPPORTED[case]
    model = AutoModel.from_config(make_config())
    adapters.init(model)
    n_params = sum(p.numel() for p in model.parameters())
    assert not model.supports_adapter(PALsConfig()) and not model.supports_adapter("pals")
    with pytest.raises(UnsupportedModelError, match=message):
        model.add_adapter("t", config="pals")
    assert "t" not in model.adapters_config
    assert sum(p.numel() for p in model.parameters()) == n_params
    assert not any(isinstance(m, pals_adapters.pals.layer.PALsLayer) for m in model.modules())


@pytest.mark.parametrize("arch", ARCHS)
def test_supported_families_say_so(arch):
    model = plain_model(arch)
    assert model.supports_adapter(PALsConfig()) and model.supports_adapter("pals")
