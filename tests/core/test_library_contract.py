"""PALs in every call `adapters` offers: seeds, averaging, merging, round trips, dtypes, compile, composition."""

import copy
import os

import pytest
import torch
from adapters import AutoAdapterModel, LoRAConfig
from adapters.composition import BatchSplit, Fuse, MultiTask, Split, Stack
from tiny_models import encode, inputs, plain_model, tiny_config

from pals_adapters import PALsConfig, UnsupportedOperationError
from pals_adapters.errors import IntegrityError

PRESETS = ["pals", "pals_no_share"]


def adapter_params(model, name):
    return {
        k.replace(f".{name}.", ".<name>."): v
        for k, v in model.named_parameters()
        if f".pals.adapters.{name}." in k or f"shared_parameters.{name}." in k
    }


def head_model(names=("a", "b"), preset="pals", arch="bert"):
    torch.manual_seed(0)
    model = AutoAdapterModel.from_config(tiny_config(arch)).eval()
    for i, name in enumerate(names):
        model.add_adapter(name, config=preset)
        model.add_classification_head(name, num_labels=2 + i)
    return model


# --- init_weights_seed ----------------------------------------------------------------------------


@pytest.mark.parametrize("preset", PRESETS)
def test_same_seed_gives_the_same_weights_whatever_was_added_before(preset):
    config = PALsConfig(init_weights_seed=42, shared_projections=preset == "pals")
    first = plain_model("bert")
    first.add_adapter("a", config=config)
    second = plain_model("bert", seed=1)
    second.add_adapter("lora", config="lora")
    second.add_adapter("x", config="pals")
    rng_before = torch.get_rng_state()
    second.add_adapter("a", config=config)
    second.add_adapter("b", config=config)
    assert torch.equal(torch.get_rng_state(), rng_before)  # the global random stream is left alone
    a1, a2, b2 = adapter_params(first, "a"), adapter_params(second, "a"), adapter_params(second, "b")
    assert a1.keys() == a2.keys() == b2.keys() and a1
    assert all(torch.equal(a1[k], a2[k]) and torch.equal(a1[k], b2[k]) for k in a1)
    other = plain_model("bert")
    other.add_adapter("a", config=config.replace(init_weights_seed=43))
    assert not torch.equal(adapter_params(other, "a")[next(iter(a1))], next(iter(a1.values())))


# --- average_adapter ------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("weights, normalize", [(None, True), ([0.75, 0.25, -0.25], False), ([3.0, 1.0, 1.0], True)])
def test_average_adapter_averages_every_weight_shared_ones_included(preset, weights, normalize):
    model = plain_model("bert")
    names = ["a0", "a1", "a2"]
    for name in names:
        model.add_adapter(name, config=preset)
    model.average_adapter("avg", names, weights=weights, normalize_weights=normalize)
    w = [1 / 3] * 3 if weights is None else [x / (sum(weights) if normalize else 1.0) for x in weights]
    inputs_ = [adapter_params(model, n) for n in names]
    averaged = adapter_params(model, "avg")
    assert averaged.keys() == inputs_[0].keys()
    for key, value in averaged.items():
        torch.testing.assert_close(value, sum(wi * p[key] for wi, p in zip(w, inputs_)))
    model.set_active_adapters("avg")
    with torch.no_grad():
        assert torch.isfinite(encode(model, inputs())).all()


def test_averaging_pals_with_another_method_is_refused():
    model = plain_model("bert")
    model.add_adapter("p", config="pals")
    model.add_adapter("l", config="lora")
    with pytest.raises(ValueError):
        model.average_adapter("avg", ["p", "l"])
    assert "avg" not in model.adapters_config


# --- merge_adapter / reset_adapter ---------------------------------------------------------------------


@pytest.mark.parametrize("config", ["pals", "pals_no_share", "pals|lora"])
def test_merge_adapter_names_pals_and_changes_nothing(config):
    model = plain_model("bert")
    model.add_adapter("t", config=config, set_active=True)
    batch = inputs()
    with torch.no_grad():
        before = encode(model, batch)
        with pytest.raises(UnsupportedOperationError, match="PAL adapters cannot be merged"):
            model.merge_adapter("t")
        model.reset_adapter()  # PALs are never merged: nothing to undo
        assert torch.equal(encode(model, batch), before)


def test_lora_merge_still_works_next_to_pals():
    model = plain_model("bert")
    model.add_adapter("p", config="pals")
    model.add_adapter("l", config=LoRAConfig(init_weights="bert"), set_active=True)
    batch = inputs()
    with torch.no_grad():
        active = encode(model, batch)
        model.set_active_adapters(None)
        model.merge_adapter("l")
        torch.testing.assert_close(encode(model, batch), active, atol=1e-5, rtol=0)
        model.reset_adapter()


# --- round trips -----------------------------------------------------------------------------------


def reload_setup(model, tmp_path, save_kwargs, load_kwargs):
    setup, head_setup = Stack("a", "b"), BatchSplit("a", "b", batch_sizes=[2, 1])
    model.set_active_adapters(setup)
    model.active_head = head_setup
    model.save_adapter_setup(str(tmp_path), setup, head_setup=head_setup, **save_kwargs)
    fresh = copy.deepcopy(model)
    for name in ("a", "b"):
        fresh.delete_adapter(name)
        fresh.delete_head(name)
    fresh.load_adapter_setup(str(tmp_path), set_active=True, **load_kwargs)
    return fresh


def reload_all(model, tmp_path, save_kwargs, load_kwargs):
    model.save_all_adapters(str(tmp_path), **save_kwargs)
    fresh = copy.deepcopy(model)
    for name in ("a", "b"):
        fresh.delete_adapter(name)
        fresh.delete_head(name)
    for name in ("a", "b"):
        fresh.load_adapter(str(tmp_path / name), **load_kwargs)
    return fresh


def reload_pushed(model, tmp_path, save_kwargs, load_kwargs):
    """push_adapter_to_hub up to the upload: the folder it would upload must load back."""
    uploaded = {}
    model._create_repo = lambda repo_id, **kw: repo_id
    model._upload_modified_files = lambda work_dir, *a, **kw: uploaded.setdefault("files", os.listdir(work_dir))
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        model.push_adapter_to_hub(f"user/{name}", name, local_path=str(tmp_path / name), datasets_tag="glue")
    assert "adapter.safetensors" in uploaded["files"] and "README.md" in uploaded["files"]
    fresh = copy.deepcopy(model)
    for name in ("a", "b"):
        fresh.delete_adapter(name)
        fresh.delete_head(name)
        fresh.load_adapter(str(tmp_path / name), **load_kwargs)
    return fresh


ROUND_TRIPS = {
    "setup-defaults": (reload_setup, {}, {}, "adapter.safetensors"),
    "setup-safetensors": (reload_setup, {"use_safetensors": True}, {"use_safetensors": True}, "adapter.safetensors"),
    "setup-pickle-opt-in": (
        reload_setup,
        {"use_safetensors": False},
        {"use_safetensors": False, "allow_pickle": True},
        "pytorch_adapter.bin",
    ),
    "all-adapters-defaults": (reload_all, {}, {}, "adapter.safetensors"),
    "all-adapters-safetensors": (
        reload_all,
        {"use_safetensors": True},
        {"use_safetensors": True},
        "adapter.safetensors",
    ),
    "push-to-hub-folder": (reload_pushed, {}, {}, "adapter.safetensors"),
}


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("case", list(ROUND_TRIPS))
def test_round_trips_give_the_same_outputs(tmp_path, case, preset):
    reload, save_kwargs, load_kwargs, weights_file = ROUND_TRIPS[case]
    model = head_model(preset=preset)
    batch = inputs()
    fresh = reload(model, tmp_path, save_kwargs, load_kwargs)
    assert (tmp_path / "a" / weights_file).is_file()
    for name in ("a", "b"):
        model.set_active_adapters(name)
        fresh.set_active_adapters(name)
        model.active_head = fresh.active_head = name
        with torch.no_grad():
            assert torch.equal(model(**batch).logits, fresh(**batch).logits), name


def test_setup_saved_as_pickle_is_refused_unless_allowed(tmp_path):
    model = head_model()
    with pytest.raises(IntegrityError, match="pytorch_adapter.bin: pickle weight file refused"):
        reload_setup(model, tmp_path, {"use_safetensors": False}, {"use_safetensors": False})


# --- dtypes and compile ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype, atol", [(torch.float16, 1e-2), (torch.bfloat16, 8e-2)])
@pytest.mark.parametrize("how", ["model.to", "adapter_to", "added to a half model"])
def test_half_precision(dtype, atol, how):
    model = plain_model("bert")
    model.add_adapter("t", config="pals", set_active=True)
    batch = inputs()
    with torch.no_grad():
        expected = encode(model, batch)
        if how == "model.to":
            model.to(dtype)
        elif how == "adapter_to":
            model.adapter_to("t", dtype=dtype)
            assert model.base_model.shared_parameters["t"]["down_weight"].dtype == dtype
            assert model.encoder.layer[0].pals.adapters["t"].inner.qkv.weight.dtype == dtype
        else:  # a float32 PAL on a half-precision model: it computes in float32 and returns the model's dtype
            state = {k: v for k, v in model.state_dict().items() if ".t." in k}
            model.delete_adapter("t")
            model.to(dtype)
            model.add_adapter("t", config="pals", set_active=True)
            model.load_state_dict(state, strict=False)
            assert model.base_model.shared_parameters["t"]["down_weight"].dtype == torch.float32
        out = encode(model, batch)
    assert out.dtype == (torch.float32 if how == "adapter_to" else dtype)
    torch.testing.assert_close(out.float(), expected, atol=atol, rtol=0)


@pytest.mark.parametrize("preset", PRESETS)
def test_torch_compile_gives_the_eager_outputs(preset):
    # aot_eager: the full dynamo capture of the hooks and autograd tracing, without C++ code generation
    # (inductor gives the same outputs but needs about a minute to compile on two CPU cores).
    model = plain_model("bert")
    model.add_adapter("t", config=preset, set_active=True)
    compiled = torch.compile(model, backend="aot_eager")
    for seed in (0, 1):
        batch = inputs(seed=seed)
        with torch.no_grad():
            torch.testing.assert_close(encode(compiled, batch), encode(model, batch), atol=1e-6, rtol=0)


# --- composition and training modes -----------------------------------------------------------------


def test_multitask_routes_each_example_to_its_task():
    model = plain_model("bert")
    for name in ("a", "b", "c"):
        model.add_adapter(name, config="pals")
    batch = inputs()
    model.set_active_adapters(MultiTask("a", "b", "c"))
    with torch.no_grad():
        out = model(**batch, task_ids=torch.tensor([2, 0, 1])).last_hidden_state
        for row, name in enumerate(["c", "a", "b"]):
            model.set_active_adapters(name)
            single = encode(model, {k: v[row : row + 1] for k, v in batch.items()})
            torch.testing.assert_close(out[row : row + 1], single, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "block", [Fuse("a", "b"), Split("a", "b", splits=[4, 5]), Stack("a", Split("a", "b", splits=[4, 5]))]
)
def test_fuse_and_split_are_refused_naming_pals(block):
    model = plain_model("bert")
    model.add_adapter("a", config="pals")
    model.add_adapter("b", config="pals")
    model.set_active_adapters(block)
    with pytest.raises(ValueError, match=r"PAL adapters \['a', 'b'\] cannot be used inside a (Fuse|Split) block"):
        encode(model, inputs())


def test_gradient_checkpointing_trains_exactly_like_normal_training():
    states = []
    for checkpointing in (True, False):
        model = head_model(("a",))
        model.train_adapter("a")
        if checkpointing:
            model.gradient_checkpointing_enable()
        optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
        for seed in range(2):
            batch = inputs(seed=seed)
            model(**batch, labels=torch.tensor([0, 1, 1])).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        states.append({k: v.clone() for k, v in model.state_dict().items()})
    assert states[0].keys() == states[1].keys()
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])


def test_generate_with_a_causal_lm_head():
    torch.manual_seed(0)
    model = AutoAdapterModel.from_config(tiny_config("bert"))
    model.add_adapter("g", config="pals")
    model.add_causal_lm_head("g")
    model.set_active_adapters("g")
    generated = model.generate(inputs()["input_ids"], max_new_tokens=4, do_sample=False)
    assert generated.shape == (3, 13)


def test_adapter_trainer_checkpoints_and_resumes_pal_adapters(tmp_path):
    from adapters import AdapterTrainer
    from transformers import TrainingArguments

    def trainer_for(model):
        batch = inputs(size=4)
        data = [{**{k: v[i] for k, v in batch.items()}, "labels": torch.tensor(i % 2)} for i in range(4)]
        args = TrainingArguments(
            output_dir=str(tmp_path),
            max_steps=2,
            save_steps=2,
            per_device_train_batch_size=2,
            learning_rate=0.1,
            use_cpu=True,
            report_to=[],
            remove_unused_columns=False,
            disable_tqdm=True,
        )
        return AdapterTrainer(model=model, args=args, train_dataset=data)

    model = head_model(("a",))
    model.train_adapter("a")
    trainer_for(model).train()
    checkpoint = tmp_path / "checkpoint-2"
    assert (checkpoint / "a" / "adapter.safetensors").is_file()
    resumed = head_model(("a",))
    resumed.train_adapter("a")
    trainer_for(resumed).train(resume_from_checkpoint=str(checkpoint))
    trained, loaded = adapter_params(model, "a"), adapter_params(resumed, "a")
    initial = adapter_params(head_model(("a",)), "a")
    assert trained.keys() == loaded.keys() and all(torch.equal(trained[k], loaded[k]) for k in trained)
    assert not all(torch.equal(trained[k], initial[k]) for k in trained)  # the weights came from the checkpoint


# --- every registered config on one model ----------------------------------------------------------------


def test_adapter_summary_of_every_registered_config_keeps_full_model_the_base_model():
    """adapters' own test_model_adapter_summary (run in full by test_adapters_suite.py when its files are
    there): with "pals" and "ca_mtl" registered, every config of ADAPTER_CONFIG_MAP on one BERT."""
    from adapters import ADAPTER_CONFIG_MAP

    model = AutoAdapterModel.from_config(tiny_config("bert"))
    base = sum(p.numel() for p in model.parameters())
    for name, config in ADAPTER_CONFIG_MAP.items():
        if getattr(config, "phm_layer", False):  # a phm_dim of 4 needs a smaller reduction on a 32-wide model
            config = config.replace(reduction_factor=4)
        model.add_adapter(name, config=config)
    rows = model.adapter_summary(as_dict=True)
    assert [row["name"] for row in rows] == [*ADAPTER_CONFIG_MAP, "Full model"]
    assert {"pals", "ca_mtl"} <= set(ADAPTER_CONFIG_MAP)
    assert rows[-1]["#param"] == base
