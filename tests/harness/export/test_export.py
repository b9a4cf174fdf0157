"""Per-task export: every method round-trips exactly, native loaders read the files, damage is caught."""

import copy
import json
import shutil
import subprocess
import sys
import warnings

import adapters
import pytest
import torch
from helpers import batch, tiny_bert_config
from safetensors.torch import load_file
from transformers import BertModel, BertTokenizerFast

from pals_adapters.errors import AdapterLoadError, IntegrityError
from pals_adapters.harness.export import (
    base_state_dict,
    export_base,
    export_run,
    export_task,
    fingerprint,
    fingerprint_model,
    load_task,
    load_tasks,
)
from pals_adapters.harness.export.manifest import MANIFEST, read_task_manifest
from pals_adapters.harness.methods.method import BASE_MODES
from pals_adapters.harness.methods.model import MultiTaskModel
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.harness.tasks.glue import GLUE_TASKS

TASKS = {"rte": GLUE_TASKS["rte"], "stsb": GLUE_TASKS["stsb"]}
METHODS = ["pals", "houlsby", "lora", "peft_lora", "shared", "attention_on_top"]
CASES = [(m, b) for m in METHODS for b in BASE_MODES if b == "finetune" or get_method(m).allows_frozen_base]
BASE_NAME = "tiny-bert"


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    # tiny matrices: extra threads only add contention (16 ms instead of 0.05 ms per linear on a busy box)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def inputs():
    ids, mask = batch()
    token_types = torch.zeros_like(ids)
    token_types[:, 5:] = 1  # pair tasks: a second segment
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": token_types}


def build(method, base_mode, seed=0):
    """(untouched pretrained base, trained-looking MultiTaskModel on a copy of it)."""
    torch.manual_seed(seed)
    base = BertModel(tiny_bert_config())
    model = MultiTaskModel(copy.deepcopy(base), TASKS, get_method(method), base_mode)
    with torch.no_grad():  # move every trainable weight off its initial value (LoRA's B starts at 0)
        for param in model.trainable_parameters():
            param.add_(torch.randn_like(param) * 0.05)
    return base, model.eval()


@torch.no_grad()
def predict(model, task):
    return model(task, **inputs())["logits"]


_EXPORTS = {}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Builds and exports each (method, base mode) once per module: (base, model, out_dir)."""

    def get(method, base_mode):
        key = (method, base_mode)
        if key not in _EXPORTS:
            base, model = build(method, base_mode)
            out = tmp_path_factory.mktemp(f"{method}-{base_mode}")
            export_run(model, out, base_model_name=BASE_NAME, metrics_by_task={"rte": {"accuracy": 0.75}})
            _EXPORTS[key] = (base, model, out)
        return _EXPORTS[key]

    yield get
    _EXPORTS.clear()


def copy_export(exported, tmp_path, method="pals", base_mode="frozen"):
    base, model, out = exported(method, base_mode)
    target = tmp_path / "export"
    shutil.copytree(out, target)
    return base, model, target


def rewrite_manifest(folder, change):
    manifest = json.loads((folder / MANIFEST).read_text())
    change(manifest)
    (folder / MANIFEST).write_text(json.dumps(manifest))


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("method,base_mode", CASES)
def test_every_task_round_trips_exactly(exported, method, base_mode):
    base, model, out = exported(method, base_mode)
    expected_dirs = set(TASKS) | ({"base"} if base_mode == "finetune" else set())
    assert {p.name for p in out.iterdir()} == expected_dirs  # no stray temporary folders
    for task in TASKS:
        loaded = load_task(out / task, base=base if base_mode == "frozen" else None)
        assert list(loaded.tasks) == [task] and loaded.method.name == method and loaded.base_mode == base_mode
        assert not loaded.training
        torch.testing.assert_close(predict(loaded, task), predict(model, task), atol=1e-6, rtol=0)


def test_manifest_records_task_method_base_and_hashes(exported):
    base, model, out = exported("pals", "finetune")
    manifest = json.loads((out / "rte" / MANIFEST).read_text())
    spec = manifest["task_spec"]
    assert spec["labels"] == ["entailment", "not_entailment"] and spec["is_regression"] is False
    assert spec["metrics"] == ["accuracy"] and spec["num_text_columns"] == 2
    assert manifest["task"] == "rte" and manifest["format_version"] == 3
    assert manifest["base_config"]["hidden_act"] == "gelu" and "_name_or_path" not in manifest["base_config"]
    assert manifest["method"] == {"name": "pals", "kind": "adapters", "overrides": {}}
    assert manifest["base_mode"] == "finetune" and manifest["base_model_name"] == BASE_NAME
    assert manifest["base_fingerprint"] == fingerprint_model(model) and manifest["base_path"] == "../base"
    assert manifest["metrics"] == {"accuracy": 0.75}
    assert manifest["num_parameters"] == sum(p.numel() for _, p in model.task_parameters("rte"))
    assert set(manifest["files"]) == {"adapter_config.json", "adapter.safetensors", "head.safetensors"} | {
        "head_config.json",  # the head as adapters saves it
        "model_head.safetensors",
    }
    stsb = json.loads((out / "stsb" / MANIFEST).read_text())
    assert stsb["task_spec"]["is_regression"] is True and stsb["metrics"] is None
    assert json.loads((out / "base" / MANIFEST).read_text())["fingerprint"] == manifest["base_fingerprint"]
    frozen = json.loads((exported("pals", "frozen")[2] / "rte" / MANIFEST).read_text())
    assert frozen["base_path"] is None
    assert frozen["base_fingerprint"] == fingerprint_model(exported("pals", "frozen")[0])


@pytest.mark.parametrize("method", METHODS)
def test_base_state_dict_has_plain_transformers_names(method):
    base, model = build(method, "frozen")
    state = base_state_dict(model)
    assert set(state) == set(base.state_dict())
    assert fingerprint(state) == fingerprint_model(base)  # a frozen base is untouched


def test_fingerprint_sees_values_dtypes_and_names():
    state = {"a": torch.arange(6.0).reshape(2, 3), "b": torch.ones(2)}
    same = {"b": torch.ones(2), "a": torch.arange(6.0).reshape(2, 3)}
    assert fingerprint(state) == fingerprint(same)
    one_value = {**state, "b": torch.tensor([1.0, 1.0 + 1e-6])}
    other_dtype = {**state, "b": torch.ones(2, dtype=torch.float64)}
    other_shape = {**state, "a": torch.arange(6.0).reshape(3, 2)}
    renamed = {"c": state["a"], "b": state["b"]}
    bf16 = {**state, "b": torch.ones(2, dtype=torch.bfloat16)}
    prints = {fingerprint(s) for s in (state, one_value, other_dtype, other_shape, renamed, bf16)}
    assert len(prints) == 6


def test_re_export_replaces_the_folder_in_place(exported, tmp_path):
    base, model, out = copy_export(exported, tmp_path, "pals", "finetune")
    with torch.no_grad():
        model.heads["rte"].bias.add_(1.0)
    try:
        export_task(model, "rte", out, base_model_name=BASE_NAME)
        assert {p.name for p in out.iterdir()} == {"rte", "stsb", "base"}
        torch.testing.assert_close(predict(load_task(out / "rte"), "rte"), predict(model, "rte"), atol=1e-6, rtol=0)
    finally:
        with torch.no_grad():
            model.heads["rte"].bias.sub_(1.0)


def test_a_failed_export_keeps_the_old_folder_and_leaves_no_temp(exported, tmp_path, monkeypatch):
    from pals_adapters.harness.export import write

    base, model, out = copy_export(exported, tmp_path)
    before = (out / "rte" / MANIFEST).read_bytes()

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(write, "write_manifest", crash)
    with pytest.raises(OSError, match="disk full"):
        export_task(model, "rte", out, base_model_name=BASE_NAME)
    assert {p.name for p in out.iterdir()} == {"rte", "stsb"}
    assert (out / "rte" / MANIFEST).read_bytes() == before


def test_a_folder_without_manifest_does_not_load(exported, tmp_path):
    base, _, out = copy_export(exported, tmp_path)
    (out / "rte" / MANIFEST).unlink()
    with pytest.raises(IntegrityError, match="manifest.json is missing"):
        load_task(out / "rte", base=base)


def test_base_by_name_or_path(exported, tmp_path):
    base, model, out = exported("houlsby", "frozen")
    base.save_pretrained(tmp_path / "pretrained")
    loaded = load_task(out / "rte", base=str(tmp_path / "pretrained"))
    torch.testing.assert_close(predict(loaded, "rte"), predict(model, "rte"), atol=1e-6, rtol=0)
    # default: the base model name recorded at export
    export_task(model, "stsb", tmp_path / "by-name", base_model_name=str(tmp_path / "pretrained"))
    loaded = load_task(tmp_path / "by-name" / "stsb")
    torch.testing.assert_close(predict(loaded, "stsb"), predict(model, "stsb"), atol=1e-6, rtol=0)


def test_export_base_writes_a_plain_model_and_tokenizer_files(exported, tmp_path):
    _, model, _ = exported("peft_lora", "finetune")

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(f"{token}\n" for token in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]))
    folder = export_base(model, tmp_path / "out", BertTokenizerFast(str(vocab)))
    files = json.loads((folder / MANIFEST).read_text())["files"]
    assert {"config.json", "model.safetensors", "tokenizer_config.json", "vocab.txt"} <= set(files)
    plain = BertModel.from_pretrained(folder, attn_implementation="eager")
    assert fingerprint_model(plain) == fingerprint_model(model)


# --------------------------------------------------------------------------- native loaders


@pytest.mark.parametrize("method", ["pals", "houlsby", "lora"])
def test_plain_adapters_model_loads_the_export(exported, method):
    base, model, out = exported(method, "frozen")
    plain = copy.deepcopy(base).eval()
    adapters.init(plain)
    name = plain.load_adapter(str(out / "rte"), use_safetensors=True)  # the library reads pickle by default
    assert name == "rte"
    plain.set_active_adapters("rte")
    with torch.no_grad(), model.activated("rte"):
        expected = model.encoder(**inputs()).last_hidden_state
        got = plain(**inputs()).last_hidden_state
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)


def test_auto_adapter_model_loads_exported_base_and_adapter(exported):
    from adapters import AutoAdapterModel

    _, model, out = exported("pals", "finetune")
    auto = AutoAdapterModel.from_pretrained(out / "base", attn_implementation="eager").eval()
    auto.load_adapter(str(out / "stsb"), set_active=True)
    with torch.no_grad(), model.activated("stsb"):
        expected = model.encoder(**inputs()).last_hidden_state
        got = auto.base_model(**inputs()).last_hidden_state
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)


def test_peft_loads_the_export(exported):
    # as PEFT saves a sequence-classification task: its LoRA and its head over transformers' classifier model
    from peft import PeftModel
    from transformers import BertForSequenceClassification

    base, model, out = exported("peft_lora", "frozen")
    for task, spec in TASKS.items():
        config = copy.deepcopy(base.config)
        config.num_labels = spec.num_labels
        classifier = BertForSequenceClassification(config)
        classifier.bert.load_state_dict(base.state_dict())
        peft_model = PeftModel.from_pretrained(classifier, out / task).eval()
        with torch.no_grad():
            torch.testing.assert_close(
                peft_model(**inputs()).logits, model(task, **inputs())["logits"], atol=1e-6, rtol=0
            )


# --------------------------------------------------------------------------- damage and mix-ups


@pytest.mark.parametrize("file", ["adapter.safetensors", "head.safetensors", "adapter_config.json"])
def test_a_flipped_byte_names_the_file(exported, tmp_path, file):
    base, _, out = copy_export(exported, tmp_path)
    path = out / "rte" / file
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=f"{file} is corrupted"):
        load_task(out / "rte", base=base)


def test_a_flipped_byte_in_the_exported_base_names_the_file(exported, tmp_path):
    _, _, out = copy_export(exported, tmp_path, "shared", "finetune")
    path = out / "base" / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x80
    path.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="model.safetensors is corrupted"):
        load_task(out / "stsb")


@pytest.mark.parametrize("method", ["pals", "attention_on_top"])
def test_a_truncated_file_is_an_error(exported, tmp_path, method):
    base, _, out = copy_export(exported, tmp_path, method)
    weights = "adapter.safetensors" if method == "pals" else "top.safetensors"
    path = out / "stsb" / weights
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(IntegrityError, match=f"{weights} is corrupted or truncated"):
        load_task(out / "stsb", base=base)


@pytest.mark.parametrize("method", ["pals", "peft_lora", "shared"])
def test_files_of_another_task_are_refused(exported, tmp_path, method):
    base, _, out = copy_export(exported, tmp_path, method)
    for path in (out / "stsb").iterdir():
        if path.name != MANIFEST:
            shutil.copy(path, out / "rte" / path.name)
    with pytest.raises(IntegrityError, match=r"belongs to task 'stsb'.*is for task 'rte'"):
        load_task(out / "rte", base=base)


def test_a_base_that_differs_by_one_value_is_refused(exported):
    base, model, out = exported("lora", "frozen")
    other = copy.deepcopy(base)
    with torch.no_grad():
        other.encoder.layer[2].output.dense.weight[3, 5] += 1e-4
    with pytest.raises(AdapterLoadError, match="fingerprint") as info:
        load_task(out / "rte", base=other)
    message = str(info.value)
    assert fingerprint_model(other) in message and fingerprint_model(base) in message
    assert BASE_NAME in message  # says which base is expected


def test_a_fine_tuned_task_refuses_the_pretrained_base(exported):
    base, model, out = exported("attention_on_top", "finetune")
    with pytest.raises(AdapterLoadError, match="fine-tuned base"):
        load_task(out / "rte", base=base)


def test_an_export_whose_manifest_says_top_pals_loads_silently_as_attention_on_top(exported, tmp_path):
    base, model, out = copy_export(exported, tmp_path, "attention_on_top", "frozen")
    for task in TASKS:  # as the harness wrote it before the method was renamed
        rewrite_manifest(out / task, lambda m: m["method"].update(name="top_pals"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # reading what an older version wrote: no warning
        assert read_task_manifest(out / "rte").method.name == "attention_on_top"
        loaded = load_task(out / "rte", base=base)
        both = load_tasks(out, base=base)
    assert loaded.method == get_method("attention_on_top") == both.method
    for task in TASKS:
        torch.testing.assert_close(predict(both, task), predict(model, task), atol=1e-6, rtol=0)
    torch.testing.assert_close(predict(loaded, "rte"), predict(model, "rte"), atol=1e-6, rtol=0)


def test_manifest_method_that_contradicts_the_adapter_config_is_refused(exported, tmp_path):
    base, _, out = copy_export(exported, tmp_path, "houlsby")
    rewrite_manifest(out / "rte", lambda m: m["method"].update(overrides={"reduction_factor": 4}))
    with pytest.raises(AdapterLoadError, match="does not match method"):
        load_task(out / "rte", base=base)


def _to_pickle(folder, safetensors_name, bin_name):
    torch.save(load_file(str(folder / safetensors_name)), folder / bin_name)
    (folder / safetensors_name).unlink()


def test_pickle_weights_are_refused_unless_allowed(exported, tmp_path):
    import hashlib

    base, model, out = copy_export(exported, tmp_path)
    folder = out / "rte"
    _to_pickle(folder, "adapter.safetensors", "pytorch_adapter.bin")
    _to_pickle(folder, "head.safetensors", "head.bin")

    def relist(manifest):
        manifest["files"] = {
            p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir() if p.name != MANIFEST
        }

    rewrite_manifest(folder, relist)
    with pytest.raises(IntegrityError, match="pickle.*allow_pickle=True"):
        load_task(folder, base=base)
    loaded = load_task(folder, base=base, allow_pickle=True)
    torch.testing.assert_close(predict(loaded, "rte"), predict(model, "rte"), atol=1e-6, rtol=0)


def test_a_stray_pickle_file_is_refused(exported, tmp_path):
    base, _, out = copy_export(exported, tmp_path, "shared")
    torch.save({}, out / "rte" / "pytorch_model.bin")
    with pytest.raises(IntegrityError, match="pytorch_model.bin: pickle"):
        load_task(out / "rte", base=base)


def test_a_weight_file_has_the_same_bytes_in_every_process(tmp_path):
    # safetensors orders its header's metadata by a per-process hash: the same weights written by
    # two processes (two exports of one checkpoint) must still be the same file.
    script = (
        "import sys, torch; from pathlib import Path;"
        "from pals_adapters.harness.methods.weights import save_tensors;"
        "save_tensors(Path(sys.argv[1]), {'b': torch.ones(3), 'a': torch.arange(4.0)}, 'cola', 'head')"
    )
    files = [tmp_path / f"{i}.safetensors" for i in range(4)]
    for path in files:
        subprocess.run([sys.executable, "-c", script, str(path)], check=True)
    assert len({path.read_bytes() for path in files}) == 1
    from pals_adapters.harness.methods.weights import read_tensors, weights_task

    assert weights_task(files[0]) == "cola"
    assert torch.equal(read_tensors(files[0])["a"], torch.arange(4.0))


@pytest.mark.parametrize("version,accepted", [(1, False), (2, True), (3, True), (4, False)])
def test_manifest_format_versions_read_and_refused(exported, tmp_path, version, accepted):
    # 2 was written before the tokenizer record of token-id parts and pooling: still read. 1 cannot be
    # checked against its base, 4 comes from a newer pals_adapters: both refused with what to do.
    base, model, out = copy_export(exported, tmp_path, base_mode="finetune")
    path = out / "rte" / MANIFEST
    manifest = json.loads(path.read_text())
    path.write_text(json.dumps({**manifest, "format_version": version}))
    if accepted:
        assert list(load_task(out / "rte").tasks) == ["rte"]
    else:
        with pytest.raises(IntegrityError, match="re-export the run" if version == 1 else "upgrade it"):
            load_task(out / "rte")
