"""Reliability: distributed training, safe weight files, threads, config properties (interrupted runs and the
bad-input tables: tests/harness/reliability/)."""

import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import torch
from adapters import AdapterConfig, AdapterSetup, AutoAdapterModel
from helpers import REPO, batch, glue_dir, tiny_bert_config
from hypothesis import given, settings
from hypothesis import strategies as st
from launching import free_port
from reliability_cases import wrapped_bert
from task_files import needs_glue
from transformers import BertModel

from pals_adapters.errors import IntegrityError
from pals_adapters.harness.data.sampling import make_sampler
from pals_adapters.harness.methods.model import MultiTaskModel
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.harness.tasks.glue import GLUE_TASKS
from pals_adapters.pals.config import ACTIVATIONS, INNER_FUNCTIONS, LAYER_SPANS, PALsConfig

GLUE = glue_dir()


# --- 1. distributed training ---------------------------------------------------------------------


@pytest.mark.slow
@needs_glue
def test_two_process_gloo_training_keeps_ranks_in_step(tmp_path, tiny_model_dir):
    """torchrun, 2 CPU ranks: same task at every step, different examples, identical final weights."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(free_port()),
        str(REPO / "tests" / "harness" / "distributed_worker.py"),
        "--model",
        str(tiny_model_dir),
        "--glue-dir",
        str(GLUE),
        "--out",
        str(tmp_path),
    ]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]  # no "unused parameters" failure
    rank0, rank1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert (rank0["rank"], rank1["rank"]) == (0, 1)
    assert rank0["world_size"] == 2 and rank0["backend"] == rank1["backend"] == "gloo"  # real DDP, not 2 solo runs
    assert rank0["global_step"] == rank1["global_step"] == 6
    expected = make_sampler("annealed", {"rte": 32, "stsb": 32}, seed=42, total_steps=6, steps_per_epoch=2)
    assert rank0["tasks"] == rank1["tasks"] == [["rte", "stsb"][t] for t in expected.sequence(0, 6)]
    assert all(a != b for a, b in zip(rank0["batches"], rank1["batches"])), "each rank gets its own examples"
    assert rank0["fingerprint"] == rank1["fingerprint"]


# --- 3. safe weight files: the adapters API ------------------------------------------------------


@pytest.mark.parametrize("with_head", [False, True])
def test_load_adapter_refuses_pickle_weights_unless_allowed(tmp_path, with_head):
    if with_head:
        source = AutoAdapterModel.from_config(tiny_bert_config()).eval()
        source.add_adapter("t", config="pals")
        source.add_classification_head("t", num_labels=2)
        fresh = lambda: AutoAdapterModel.from_config(tiny_bert_config()).eval()  # noqa: E731
    else:
        source = wrapped_bert()
        source.add_adapter("t", config="pals")
        fresh = wrapped_bert
    source.save_adapter(str(tmp_path), "t", use_safetensors=False)
    pickled = "pytorch_model_head.bin" if with_head else "pytorch_adapter.bin"
    assert (tmp_path / pickled).is_file() and not (tmp_path / "adapter.safetensors").exists()

    model = fresh()
    with pytest.raises(IntegrityError, match=r"pytorch_\w+\.bin: pickle weight file refused.*allow_pickle=True"):
        model.load_adapter(str(tmp_path))
    assert "t" not in model.adapters_config  # refused before anything was loaded
    with pytest.raises(IntegrityError, match="pickle"):
        model.load_adapter(str(tmp_path), use_safetensors=False)

    name = model.load_adapter(str(tmp_path), allow_pickle=True)
    assert name == "t"
    loaded = dict(model.named_parameters())
    for key, value in source.named_parameters():
        if ".t." in key:
            assert torch.equal(loaded[key], value), key


def test_load_adapter_reads_safetensors_without_opting_in(tmp_path):
    source = wrapped_bert()
    source.add_adapter("t", config="pals")
    source.save_adapter(str(tmp_path), "t")
    torch.save({}, tmp_path / "pytorch_adapter.bin")  # a stale pickle next to it is never read
    assert wrapped_bert().load_adapter(str(tmp_path)) == "t"
    with pytest.raises(IntegrityError, match="pytorch_adapter.bin"):
        wrapped_bert().load_adapter(str(tmp_path), use_safetensors=False)  # asks for the pickle


# --- 5. threads ------------------------------------------------------------------------------------

THREAD_PRESETS = ["pals", "pals_no_share", "low_rank", "pals_top_layers"]


def run_in_threads(work, names):
    """Runs ``work(name)`` in one thread per name, started together; returns ``{name: result}``."""
    barrier = threading.Barrier(len(names))
    results, errors = {}, []

    def target(name):
        try:
            barrier.wait()
            results[name] = work(name)
        except BaseException as err:  # noqa: BLE001 (reported below)
            errors.append(err)

    threads = [threading.Thread(target=target, args=(n,)) for n in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return results


INPUTS = [batch(seed=s) for s in range(3)]
REPEATS = 8


def test_threads_with_different_pal_adapters_give_serial_outputs():
    model = wrapped_bert()
    for name in THREAD_PRESETS:
        model.add_adapter(name, config=name)
    model.eval()

    def outputs(name):
        with torch.no_grad(), AdapterSetup(name):
            return [model(ids, attention_mask=mask).last_hidden_state for _ in range(REPEATS) for ids, mask in INPUTS]

    serial = {name: outputs(name) for name in THREAD_PRESETS}
    assert not torch.equal(serial["pals"][0], serial["low_rank"][0])  # the adapters differ
    threaded = run_in_threads(outputs, THREAD_PRESETS)
    for name in THREAD_PRESETS:
        assert all(torch.equal(a, b) for a, b in zip(threaded[name], serial[name])), name


@pytest.mark.parametrize("method", ["pals", "houlsby", "peft_lora"])
def test_threads_running_different_tasks_of_a_multitask_model_give_serial_outputs(method):
    tasks = {name: GLUE_TASKS[name] for name in ("rte", "stsb", "mrpc", "cola")}
    model = MultiTaskModel(BertModel(tiny_bert_config()), tasks, get_method(method), "frozen").eval()
    with torch.no_grad():  # every task's own weights off their start (LoRA's B starts at 0: all tasks alike)
        for param in model.trainable_parameters():
            param.add_(torch.randn_like(param) * 0.1)

    def outputs(task):
        with torch.no_grad():
            return [model(task, ids, mask)["logits"] for _ in range(REPEATS) for ids, mask in INPUTS]

    serial = {task: outputs(task) for task in tasks}
    assert not torch.equal(serial["rte"][0], serial["mrpc"][0])  # a mix-up would show
    threaded = run_in_threads(outputs, list(tasks))
    for task in tasks:
        assert all(torch.equal(a, b) for a, b in zip(threaded[task], serial[task])), task


# --- 6. config properties ------------------------------------------------------------------------


@st.composite
def pal_configs(draw):
    inner = draw(st.sampled_from(INNER_FUNCTIONS))
    heads = draw(st.integers(1, 6))
    size = draw(st.one_of(st.none(), st.integers(1, 6).map(lambda k: k * heads)))
    return PALsConfig(
        hidden_size_aug=size,
        reference_hidden_size_aug=draw(st.integers(1, 400)),
        num_attention_heads=heads,
        shared_projections=draw(st.booleans()),
        inner=inner,
        activation=draw(st.sampled_from(ACTIVATIONS)),
        attention_dropout=draw(st.floats(0.0, 0.9, allow_nan=False)),
        layers=draw(st.sampled_from(LAYER_SPANS)),
        leave_out=draw(st.lists(st.integers(0, 1), max_size=2, unique=True)),
        init_range=draw(st.floats(1e-4, 1.0, allow_nan=False)),
    )


@settings(max_examples=25, deadline=None)
@given(config=pal_configs())
def test_pal_configs_survive_dict_and_file_round_trips(config):
    from_dict = AdapterConfig.load(config.to_dict())
    assert isinstance(from_dict, PALsConfig) and from_dict == config
    model = wrapped_bert(hidden=24, layers=2)
    model.add_adapter("t", config=config)
    with tempfile.TemporaryDirectory() as folder:
        model.save_adapter(folder, "t")
        saved = json.loads((Path(folder) / "adapter_config.json").read_text())
        from_file = AdapterConfig.load(str(Path(folder) / "adapter_config.json"))
    assert saved["config"]["architecture"] == "pals"
    assert isinstance(from_file, PALsConfig) and from_file == config
    assert from_file.to_dict() == config.to_dict()
