"""Saving and loading CA-MTL adapters and their shared modules, and adapters' generic calls on them."""

import pytest
import torch
from adapters import AdapterSetup, AutoAdapterModel
from adapters.composition import BatchSplit, Fuse, MultiTask
from ca_mtl_models import UNEVEN, encoder, plain_copy_of, saved_tasks, shared_count, with_tasks
from helpers import batch, tiny_bert_config
from safetensors.torch import load_file, save_file
from tiny_models import bert, wrapped
from transformers import BertModel, GPT2Config, GPT2Model

from pals_adapters import AdapterLoadError, UnsupportedOperationError
from pals_adapters.ca_mtl import (
    SHARED_MODULES_FILE,
    CAMTLConfig,
    load_shared_modules,
    save_shared_modules,
)

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


# --- adapters' generic calls ------------------------------------------------------------------------


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
