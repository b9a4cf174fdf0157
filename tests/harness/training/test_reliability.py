"""Reliability: distributed training, interrupted runs, safe weight files, bad input, threads, config properties."""

import dataclasses
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import types
from pathlib import Path

import adapters
import pytest
import reliability_cases as cases
import safetensors
import safetensors.torch
import torch
from adapters import AdapterConfig, AdapterSetup, AutoAdapterModel
from helpers import REPO, batch, fake_checkpoint, glue_dir, tiny_bert_config
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import BertModel, GPT2Config, GPT2Model, TrainerCallback

import pals_adapters
from pals_adapters.errors import (
    AdapterLoadError,
    ConfigError,
    DataError,
    IntegrityError,
    UnknownNameError,
    UnsupportedModelError,
)
from pals_adapters.harness import RunConfig
from pals_adapters.harness.checks import POSITIVE, POSITIVE_OR_UNSET
from pals_adapters.harness.data.sampling import make_sampler
from pals_adapters.harness.methods.method import check_base_mode
from pals_adapters.harness.methods.model import MultiTaskModel
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.harness.scoring.report import task_metrics
from pals_adapters.harness.tasks.glue import GLUE_TASKS, get_task
from pals_adapters.harness.tasks.splits import load_split
from pals_adapters.harness.tasks.user_tasks import custom_task, load_task_specs
from pals_adapters.harness.training import checkpoints
from pals_adapters.harness.training import runner as harness
from pals_adapters.harness.training.run_folder import prepare_run_folder
from pals_adapters.harness.training.trainer import MultiTaskTrainer
from pals_adapters.pals.config import ACTIVATIONS, INNER_FUNCTIONS, LAYER_SPANS, PALsConfig

GLUE = glue_dir()
needs_glue = pytest.mark.skipif(GLUE is None, reason="GLUE data not found: set GLUE_DIR or provide ../shared/glue")
PACKAGE_DIR = Path(pals_adapters.__file__).resolve().parent


def wrapped_bert(**kw):
    model = BertModel(tiny_bert_config(**kw))
    adapters.init(model)
    return model.eval()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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


# --- 2. interrupted runs -------------------------------------------------------------------------


class Interrupted(Exception):
    pass


class StopBeforeStep(TrainerCallback):
    """Raises as step ``step`` begins (the checkpoints before it are already written)."""

    def __init__(self, step):
        self.step = step

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step + 1 == self.step:
            raise Interrupted(f"simulated crash at step {self.step}")


BUILD_TRAINER = harness.build_trainer


def instrument(monkeypatch, stop_before=None):
    """Makes `harness.run` record ``{step: task}`` and its trainers (and optionally crash)."""
    record = {"tasks": {}, "trainers": []}

    def build_trainer(*args, **kwargs):
        trainer = BUILD_TRAINER(*args, **kwargs)
        compute_loss = trainer.compute_loss

        def recording(model, inputs, *rest, **kw):
            record["tasks"][trainer.state.global_step + 1] = inputs["task"]
            return compute_loss(model, inputs, *rest, **kw)

        trainer.compute_loss = recording
        if stop_before is not None:
            trainer.add_callback(StopBeforeStep(stop_before))
        record["trainers"].append(trainer)
        return trainer

    monkeypatch.setattr(harness, "build_trainer", build_trainer)
    return record


def small_run(model_dir, output_dir, **changes):
    settings_ = dict(
        model=str(model_dir),
        tasks=["rte", "stsb"],
        glue_dir=str(GLUE),
        data_source="local",
        method="pals",
        base="finetune",
        sampler="annealed",
        steps_per_epoch=2,
        max_steps=8,
        save_steps=4,
        batch_size=4,
        max_length=48,
        lr=1e-3,
        max_train_examples=32,
        max_eval_examples=8,
        logging_steps=4,
        eval_batch_size=8,
        output_dir=str(output_dir),
        export=False,
    )
    return harness.RunConfig(**{**settings_, **changes})


@needs_glue
def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path, tiny_model_dir, monkeypatch, caplog):
    whole = instrument(monkeypatch)
    results_a = harness.run(small_run(tiny_model_dir, tmp_path / "a"))

    crashed = instrument(monkeypatch, stop_before=5)
    with pytest.raises(Interrupted):
        harness.run(small_run(tiny_model_dir, tmp_path / "b"))
    for callback in crashed["trainers"][0].callback_handler.callbacks:  # close the crashed run's progress bar
        if getattr(callback, "training_bar", None) is not None:
            callback.training_bar.close()
    assert sorted(p.name for p in (tmp_path / "b").glob("checkpoint-*")) == ["checkpoint-4"]
    # a newer checkpoint whose optimizer file was cut short: resume falls back to checkpoint-4
    shutil.copytree(tmp_path / "b" / "checkpoint-4", tmp_path / "b" / "checkpoint-6")
    truncate(tmp_path / "b" / "checkpoint-6" / "optimizer.pt")
    resumed = instrument(monkeypatch)
    monkeypatch.setattr(logging.getLogger("transformers"), "propagate", True)  # transformers keeps its logs to itself
    with caplog.at_level(logging.WARNING, logger="transformers.trainer"):
        results_b = harness.run(small_run(tiny_model_dir, tmp_path / "b", resume="last"))
    # the prompt-tuning alias of the word embeddings is stored once: no false "missing keys" alarm on resume
    assert not [r for r in caplog.records if "keys in the checkpoint" in r.getMessage()]

    assert list(whole["tasks"]) == list(range(1, 9))
    assert {**crashed["tasks"], **resumed["tasks"]} == whole["tasks"]  # same sampler sequence
    assert sorted(resumed["tasks"]) == [5, 6, 7, 8]  # resumed after step 4, not from scratch
    state_a = whole["trainers"][0].model.state_dict()
    state_b = resumed["trainers"][0].model.state_dict()
    assert state_a.keys() == state_b.keys()
    assert all(torch.equal(state_a[k], state_b[k]) for k in state_a)
    assert results_a["metrics"] == results_b["metrics"]
    losses = lambda r: [row["loss"] for row in r["log_history"] if "loss" in row]  # noqa: E731
    assert losses(results_a) == losses(results_b)
    assert not list(tmp_path.rglob(".model.safetensors.*")), "no temporary weight file is left behind"


def test_only_a_tied_name_whose_tensor_was_loaded_is_not_missing():
    model = torch.nn.Module()
    model.embeddings, model.head = torch.nn.Embedding(4, 2), torch.nn.Linear(2, 2)
    model.alias = model.embeddings  # one module under two names, as adapters' prompt-tuning alias
    tied = checkpoints.loaded_under_another_name
    assert tied(model, ["alias.weight"]) == {"alias.weight"}
    assert tied(model, ["alias.weight", "embeddings.weight"]) == set()  # neither name was loaded
    assert tied(model, ["head.weight", "alias.weight"]) == {"alias.weight"}


def test_resume_last_skips_a_checkpoint_whose_write_did_not_finish(tmp_path):
    fake_checkpoint(tmp_path / "checkpoint-4")
    fake_checkpoint(tmp_path / "checkpoint-12")
    fake_checkpoint(tmp_path / "checkpoint-16", missing=["trainer_state.json"])  # crashed while saving
    fake_checkpoint(tmp_path / "checkpoint-20", missing=["model.safetensors"])
    (tmp_path / "checkpoint-99.tmp").mkdir()  # not a checkpoint name
    assert checkpoints.last_complete_checkpoint(str(tmp_path)) == str(
        tmp_path / "checkpoint-12"
    )  # numeric, not text order


def truncate(path, keep=0.5):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


DAMAGE = {
    "truncated trainer_state.json": lambda c: truncate(c / "trainer_state.json"),
    "truncated optimizer.pt": lambda c: truncate(c / "optimizer.pt"),
    "truncated scheduler.pt": lambda c: truncate(c / "scheduler.pt", keep=0.9),
    "truncated model.safetensors": lambda c: truncate(c / "model.safetensors", keep=0.99),
    "flipped byte in optimizer.pt": lambda c: c.joinpath("optimizer.pt").write_bytes(
        bytes(b ^ (i == 200) for i, b in enumerate(c.joinpath("optimizer.pt").read_bytes()))
    ),
    "truncated rng_state.pth": lambda c: (
        torch.save({"x": torch.ones(64)}, c / "rng_state.pth"),
        truncate(c / "rng_state.pth"),
    ),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_resume_last_falls_back_from_a_damaged_checkpoint_and_says_so(tmp_path, damage, caplog):
    fake_checkpoint(tmp_path / "checkpoint-4")
    fake_checkpoint(tmp_path / "checkpoint-8")
    DAMAGE[damage](tmp_path / "checkpoint-8")
    with caplog.at_level("WARNING"):
        assert checkpoints.last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-4")
    file = damage.split()[-1]
    assert f"checkpoint-8 ({file}" in caplog.text and "resuming from checkpoint-4" in caplog.text


def test_resume_last_without_a_complete_checkpoint_is_a_clear_error(tmp_path):
    fake_checkpoint(tmp_path / "checkpoint-4", missing=["optimizer.pt"])
    expected = r"resume='last'.*no complete checkpoint.*checkpoint-4 \(optimizer.pt missing"
    with pytest.raises(ConfigError, match=expected):
        checkpoints.last_complete_checkpoint(str(tmp_path))
    with pytest.raises(ConfigError, match="save_steps"):
        checkpoints.last_complete_checkpoint(str(tmp_path / "never-written"))


def fake_trainer(output_dir, model):
    return types.SimpleNamespace(
        args=types.SimpleNamespace(output_dir=str(output_dir)),
        accelerator=types.SimpleNamespace(unwrap_model=lambda m: m),
        model=model,
        processing_class=None,
        is_deepspeed_enabled=False,
    )


def test_checkpoint_weights_are_written_atomically(tmp_path, monkeypatch):
    model = torch.nn.Linear(3, 2)
    trainer = fake_trainer(tmp_path, model)
    MultiTaskTrainer._save(trainer)
    whole = (tmp_path / "model.safetensors").read_bytes()

    def crash_midway(module, filename, *args, **kwargs):
        Path(filename).write_bytes(whole[: len(whole) // 2])
        raise KeyboardInterrupt("killed while writing")

    monkeypatch.setattr(safetensors.torch, "save_model", crash_midway)
    with pytest.raises(KeyboardInterrupt):
        MultiTaskTrainer._save(trainer)
    assert (tmp_path / "model.safetensors").read_bytes() == whole  # the previous file is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors", "training_args.bin"]


def test_a_truncated_weight_file_does_not_load_as_if_whole(tmp_path):
    path = tmp_path / "model.safetensors"
    safetensors.torch.save_model(torch.nn.Linear(8, 8), str(path))
    path.write_bytes(path.read_bytes()[:-16])
    with pytest.raises(safetensors.SafetensorError):
        safetensors.torch.load_file(str(path))


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


# --- 4. bad input ----------------------------------------------------------------------------------

RTE_HEADER = "index\tsentence1\tsentence2\tlabel\n"


def glue_file(tmp, folder, text, name="train.tsv"):
    (tmp / folder).mkdir(parents=True, exist_ok=True)
    (tmp / folder / name).write_bytes(text.encode() if isinstance(text, str) else text)
    return tmp


def load_rte(text):
    return lambda tmp: load_split(GLUE_TASKS["rte"], "train", glue_dir=glue_file(tmp, "RTE", text), source="local")


def load_stsb(score):
    text = f"sentence1\tsentence2\tscore\na\tb\t1.0\nc\td\t{score}\n"
    return lambda tmp: load_split(GLUE_TASKS["stsb"], "train", glue_dir=glue_file(tmp, "STS-B", text), source="local")


def load_user(name, content, **kw):
    def load(tmp):
        path = tmp / name
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        spec = custom_task("mine", train=str(path), labels=["a", "b"], **kw)
        return load_split(spec, "train", source="local")

    return load


def user_task_file(tmp):
    path = tmp / "tasks.yaml"
    path.write_text("tasks:\n  - name: mine\n    train: train.csv\n    labelz: [a, b]\n")
    return load_task_specs(path)


def export_then_load_on_another_base(tmp):
    torch.manual_seed(1)
    model = MultiTaskModel(BertModel(tiny_bert_config()), {"rte": GLUE_TASKS["rte"]}, get_method("pals"), "frozen")
    from pals_adapters.harness.export import export_task, load_task

    export_task(model, "rte", tmp / "export", base_model_name="tiny-bert")
    torch.manual_seed(2)
    return load_task(tmp / "export" / "rte", base=BertModel(tiny_bert_config()))


def cli(*argv):
    def call(tmp):
        from pals_adapters.harness.cli import main

        return main(["train", "--output-dir", str(tmp / "run"), *argv])

    return call


def cli_config_file(tmp):
    from pals_adapters.harness.cli import main

    (tmp / "run.yaml").write_text("metod: pals\n")
    return main(["train", "--config", str(tmp / "run.yaml")])


def add_pal(config, model=None):
    return lambda tmp: (model or wrapped_bert)().add_adapter("t", config=config)


def gpt2():
    model = GPT2Model(GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=99))
    adapters.init(model)
    return model


def forward_unknown_task(tmp):
    model = MultiTaskModel(BertModel(tiny_bert_config()), {"rte": GLUE_TASKS["rte"]}, get_method("pals"), "frozen")
    ids, mask = batch()
    return model("cola", ids, mask)


BAD_INPUT = {
    **cases.SERVING_AND_ADD_TO,  # issue 25: serving and adding a task
    **cases.OWN_DATA,  # issue 25: a user's own data
    # malformed rows and files
    "tsv-too-few-fields": (
        load_rte(RTE_HEADER + "0\ta\tb\tentailment\n1\tonly one\tentailment\n"),
        DataError,
        ["train.tsv, line 3", "too few fields"],
    ),
    "tsv-too-many-fields": (
        load_rte(RTE_HEADER + "0\ta\tb\tentailment\textra\n"),
        DataError,
        ["train.tsv, line 2", "too many fields"],
    ),
    "tsv-blank-line": (
        load_rte(RTE_HEADER + "0\ta\tb\tentailment\n\n1\tc\td\tentailment\n"),
        DataError,
        ["train.tsv, line 3", "blank line"],
    ),
    "tsv-duplicate-header": (
        load_rte("index\tsentence1\tsentence1\tlabel\n0\ta\tb\tentailment\n"),
        DataError,
        ["train.tsv, line 1", "duplicate column name 'sentence1'"],
    ),
    "csv-unterminated-quote": (
        load_user("train.csv", 'text,label\nfine,a\n"open quote,b\n', text_columns="text"),
        DataError,
        ["train.csv, line", "too few fields"],
    ),
    "csv-not-utf8": (
        load_user("train.csv", b"text,label\n\xff\xfe\xfa,a\n", text_columns="text"),
        DataError,
        ["train.csv, line", "UTF-8"],
    ),
    "jsonl-broken-line": (
        load_user("train.jsonl", '{"text": "x", "label": "a"}\n{"text": \n', text_columns="text"),
        DataError,
        ["train.jsonl, line 2", "invalid JSON"],
    ),
    "tsv-missing-column": (
        load_rte("index\tsentence1\tsentence2\tgold\n0\ta\tb\tentailment\n"),
        DataError,
        ["train.tsv", "missing column 'label'", "gold"],
    ),
    "jsonl-missing-key": (
        load_user("train.jsonl", '{"text": "x", "label": "a"}\n{"text": "y"}\n', text_columns="text"),
        DataError,
        ["train.jsonl, line 2", "missing key 'label'"],
    ),
    # labels
    "label-outside-label-set": (
        load_rte(RTE_HEADER + "0\ta\tb\tmaybe\n"),
        DataError,
        ["train.tsv, line 2", "'maybe'", "column 'label'", "entailment"],
    ),
    "user-label-outside-set": (
        load_user("train.csv", "text,label\nx,a\ny,c\n", text_columns="text"),
        DataError,
        ["train.csv, line 3", "'c'"],
    ),
    "regression-nan": (load_stsb("nan"), DataError, ["train.tsv, line 3", "column 'score'", "not finite"]),
    "regression-out-of-range": (load_stsb("7.5"), DataError, ["train.tsv, line 3", "outside", "[0.0, 5.0]"]),
    "regression-not-a-number": (load_stsb("high"), DataError, ["train.tsv, line 3", "'high'", "not a number"]),
    # empty or missing files
    "empty-file": (load_rte(""), DataError, ["RTE/train.tsv", "file is empty"]),
    "header-only": (load_rte(RTE_HEADER), DataError, ["RTE/train.tsv", "no data rows"]),
    "missing-file": (
        lambda tmp: load_split("rte", "train", glue_dir=tmp, source="local"),
        DataError,
        ["RTE/train.tsv", "missing file", "glue_dir"],
    ),
    "task-file-unknown-key": (user_task_file, ConfigError, ["tasks.yaml", "task #1", "'labelz'"]),
    # unknown names
    "unknown-task": (lambda tmp: get_task("rtee"), UnknownNameError, ["task 'rtee'", "choose one of", "rte"]),
    "unknown-method": (lambda tmp: get_method("palz"), UnknownNameError, ["method 'palz'", "houlsby"]),
    "unknown-preset": (
        lambda tmp: get_method("pals_xl[hidden_size_aug=12]"),
        UnknownNameError,
        ["method 'pals_xl'", "pals_no_share", "low_rank"],
    ),
    "unknown-sampler": (
        lambda tmp: make_sampler("anealed", {"rte": 5, "stsb": 5}, total_steps=10),
        UnknownNameError,
        ["sampling strategy 'anealed'", "annealed"],
    ),
    "unknown-base-mode": (
        lambda tmp: check_base_mode(get_method("pals"), "half"),
        UnknownNameError,
        ["base mode 'half'", "frozen", "finetune"],
    ),
    "temperature-without-alpha": (
        lambda tmp: make_sampler("temperature", {"rte": 5}, total_steps=10),
        ConfigError,
        ["alpha"],
    ),
    "unknown-task-in-model": (forward_unknown_task, ConfigError, ["task 'cola'", "['rte']"]),
    # PAL settings
    "d_s-zero": (lambda tmp: PALsConfig(hidden_size_aug=0), ConfigError, ["PALsConfig.hidden_size_aug=0", "positive"]),
    "d_s-negative": (lambda tmp: PALsConfig(hidden_size_aug=-12), ConfigError, ["hidden_size_aug=-12"]),
    "heads-do-not-divide-d_s": (
        lambda tmp: PALsConfig(hidden_size_aug=10, num_attention_heads=4),
        ConfigError,
        ["hidden_size_aug=10", "num_attention_heads=4"],
    ),
    "zero-heads": (lambda tmp: PALsConfig(num_attention_heads=0), ConfigError, ["num_attention_heads=0"]),
    "layer-span-unknown": (lambda tmp: PALsConfig(layers="middle"), ConfigError, ["PALsConfig.layers='middle'", "top"]),
    "layer-out-of-range": (
        add_pal(PALsConfig(leave_out=[1, 7])),
        ConfigError,
        ["PALsConfig.leave_out", "[7] do not exist", "0..3"],
    ),
    "method-override-invalid": (
        lambda tmp: MultiTaskModel(
            BertModel(tiny_bert_config()), {"rte": GLUE_TASKS["rte"]}, get_method("pals[hidden_size_aug=-4]"), "frozen"
        ),
        ConfigError,
        ["hidden_size_aug=-4"],
    ),
    # models and weights
    "unsupported-architecture": (add_pal("pals", gpt2), UnsupportedModelError, ["model_type 'gpt2'", "bert"]),
    "wrong-base-fingerprint": (
        export_then_load_on_another_base,
        AdapterLoadError,
        ["export/rte", "fingerprint", "tiny-bert"],
    ),
    "resume-without-checkpoint": (
        lambda tmp: checkpoints.last_complete_checkpoint(str(tmp)),
        ConfigError,
        ["resume='last'", "checkpoint"],
    ),
    # contradictory or invalid CLI options (exit code 2, message on stderr)
    "cli-full-with-frozen-base": (
        cli("--method", "full", "--base", "frozen"),
        SystemExit,
        ["method 'full'", "--base frozen", "--base finetune"],
    ),
    "cli-select-best-without-eval-steps": (cli("--select-best"), SystemExit, ["select_best needs eval_steps"]),
    "cli-zero-steps": (cli("--max-steps", "0"), SystemExit, ["max_steps=0"]),
    "cli-unknown-precision": (cli("--precision", "fp8"), SystemExit, ["precision='fp8'", "bf16"]),
    "cli-malformed-method": (cli("--method", "pals[hidden_size_aug="), SystemExit, ["pals[hidden_size_aug="]),
    "cli-config-file-unknown-key": (cli_config_file, SystemExit, ["run.yaml", "metod"]),
    # issue 9.1: evaluate / predict use what was trained
    "evaluate-task-file-with-reordered-labels": (
        cases.evaluate_with_reordered_labels,
        SystemExit,
        ["task 'mine' differs", "labels: trained ('neg', 'pos'), task file ('pos', 'neg')", "leave out --task-file"],
    ),
    "evaluate-base-with-another-tokenizer": (
        cases.evaluate_on_a_base_with_another_tokenizer,
        SystemExit,
        ["tokenizer of", "other-base", "(padding_side differ)", "use the base the task was trained on"],
    ),
    # issue 9.2: one run per output folder
    "second-run-into-a-busy-folder": (
        cases.second_run_into_a_busy_folder,
        ConfigError,
        ["in use by another run", ".pals-bench.lock", "choose another output_dir"],
    ),
    # issue 9.3: resume only what it was
    **{
        f"resume-with-other-{name}": (
            cases.resumed_with(**change),
            ConfigError,
            ["resume:", "other settings", fragment, "start a new run"],
        )
        for name, change, fragment in [
            ("tasks", {"tasks": ["a"]}, "tasks: run ['a', 'a_b'], now ['a']"),
            ("seed", {"seed": 7}, "seed: run 42, now 7"),
            ("sampler", {"sampler": "proportional"}, "sampler: run 'round_robin', now 'proportional'"),
            ("method", {"method": "houlsby"}, "method: run 'pals', now 'houlsby'"),
            ("widths", {"method": "pals[hidden_size_aug=12]"}, "now 'pals[hidden_size_aug=12]'"),
            ("lr", {"lr": 1e-3}, "lr: run 2e-05, now 0.001"),
            ("adapter-lr", {"adapter_lr": 1e-3}, "adapter_lr: run None, now 0.001"),
            ("batch-size", {"batch_size": 8}, "batch_size: run 4, now 8"),
            ("steps", {"max_steps": 16}, "max_steps: run 8, now 16"),
            (
                "compile-mode",
                {"compile": True, "compile_mode": "reduce-overhead"},
                "compile_mode: run None, now 'reduce-overhead'",
            ),
        ]
    },
    "resume-with-reordered-task-labels": (
        cases.resumed_with(edit=lambda tmp: cases.user_tasks(tmp, labels="[pos, neg]")),
        ConfigError,
        ["task 'a' labels: run ['neg', 'pos'], now ['pos', 'neg']"],
    ),
    "fresh-run-over-checkpoints": (
        cases.fresh_run_over_checkpoints,
        ConfigError,
        ["already holds checkpoints", "checkpoint-4", "resume='last'", "new output_dir"],
    ),
    # issue 9.4: names and settings checked before training
    "tasks-listed-twice-in-two-spellings": (cli("--tasks", "rte", "RTE"), SystemExit, ["'rte' is listed twice"]),
    **{
        f"task-name-{label}": (cases.task_named(name), SystemExit, [f"task name {name!r}", "letters, digits"])
        for label, name in [
            ("base", "base"),
            ("slash", "a/b"),
            ("dotted", "a.b"),
            ("300-characters", "x" * 300),
            ("leading-dot", ".hidden"),
        ]
    },
    "negative-adapter-lr": (cli("--adapter-lr=-1e-3"), SystemExit, ["adapter_lr=-0.001", "must be > 0"]),
    "max-eval-examples-minus-one": (cli("--max-eval-examples", "-1"), SystemExit, ["max_eval_examples=-1", "> 0"]),
    "eval-steps-zero": (cli("--eval-steps", "0"), SystemExit, ["eval_steps=0", "> 0"]),
    "warmup-ratio-above-one": (cli("--warmup-ratio", "1.5"), SystemExit, ["warmup_ratio=1.5", "< 1"]),
    "max-length-beyond-positions": (
        cases.cli_train("--max-length", "4096", "--tasks", "rte", model=True),
        SystemExit,
        ["max_length=4096", "has 128 positions", "max_length <= 128"],
    ),
    "ca-mtl-layout-shorter-than-max-length": (
        cases.ca_mtl_train("--method", "ca_mtl[max_seq_length=16]", "--max-length", "32"),
        SystemExit,
        ["max_length=32", "max_seq_length=16 tokens", "choose max_length <= 16", "max_seq_length=32"],
    ),
    "ca-mtl-default-layout-under-max-length-200-on-a-512-position-base": (
        cases.ca_mtl_train("--method", "ca_mtl", "--max-length", "200", positions=512),
        SystemExit,
        ["max_length=200", "max_seq_length=128 tokens", "choose max_length <= 128"],
    ),
    "ca-mtl-more-frozen-layers-than-the-model-has": (
        cases.ca_mtl_train("--method", "ca_mtl[num_frozen_layers=5]", "--max-length", "32"),
        SystemExit,
        ["num_frozen_layers=5", "the model has only 2 layers"],
    ),
    "model-that-does-not-exist": (
        cli("--model", "/no/such/model", "--tasks", "rte"),
        SystemExit,
        ["model '/no/such/model'", "cannot read its config"],
    ),
    "config-file-yaml-syntax-error": (
        cases.config_file("method: pals\ntasks: [rte, \n  sst2: x\n"),
        SystemExit,
        ["run.yaml, line", "not valid YAML"],
    ),
    "config-file-select-best-as-string": (
        cases.config_file("select_best: 'false'\n"),
        SystemExit,
        ["select_best='false' (str)", "true or false"],
    ),
    "config-file-tasks-as-string": (
        cases.config_file("tasks: rte\n"),
        SystemExit,
        ["tasks='rte' (str)", "a list of str values"],
    ),
    "config-file-steps-as-float": (cases.config_file("max_steps: 10.5\n"), SystemExit, ["max_steps=10.5", "whole"]),
    # issue 9.5: the base is part of the fingerprint
    "base-manifest-deleted": (
        cases.base_damaged("manifest deleted"),
        IntegrityError,
        ["base/manifest.json is missing"],
    ),
    "base-manifest-corrupted": (
        cases.base_damaged("manifest corrupted"),
        IntegrityError,
        ["base/manifest.json cannot be read as JSON"],
    ),
    "base-config-changed": (
        cases.base_damaged("config changed"),
        IntegrityError,
        ["config.json is corrupted", "manifest.json expects"],
    ),
    "base-config-changed-manifest-updated": (
        cases.base_damaged("config changed, manifest updated"),
        AdapterLoadError,
        ["another model config", "hidden_act: trained with 'gelu'", "'relu'"],
    ),
    "frozen-base-config-changed": (
        cases.frozen_base_with_changed_config,
        AdapterLoadError,
        ["pretrained", "hidden_act: trained with 'gelu', this base has 'relu'"],
    ),
    # issue 9.8: data that means what it says
    "jsonl-nan-text": (
        load_user("train.jsonl", '{"text": NaN, "label": "a"}\n', text_columns="text"),
        DataError,
        ["train.jsonl, line 1", "column 'text' is NaN"],
    ),
    "jsonl-nan-label": (
        load_user("train.jsonl", '{"text": "x", "label": "a"}\n{"text": "y", "label": NaN}\n', text_columns="text"),
        DataError,
        ["train.jsonl, line 2", "label nan names no class"],
    ),
    "jsonl-list-as-text": (
        load_user("train.jsonl", '{"text": ["x", "y"], "label": "a"}\n', text_columns="text"),
        DataError,
        ["train.jsonl, line 1", "column 'text' must be a string, found list"],
    ),
    "csv-nan-label": (
        load_user("train.csv", "text,label\nx,a\ny,NaN\n", text_columns="text"),
        DataError,
        ["train.csv, line 3", "label 'NaN' names no class"],
    ),
    "label-column-is-a-text-column": (
        load_user("train.csv", "text,label\nx,a\n", text_columns=["text", "label"]),
        ConfigError,
        ["label_column 'label' is also a text column"],
    ),
    "csv-field-over-131072-characters": (
        load_user("train.csv", "text,label\nx,a\n" + "y" * 140_000 + ",b\n", text_columns="text"),
        DataError,
        ["train.csv, line 3", "longer than 131,072 characters", "unbalanced quote"],
    ),
    "task-labels-1-and-1.0": (
        lambda tmp: custom_task("mine", train="t.csv", labels=[1, 1.0]),
        ConfigError,
        ["task 'mine'", "labels [1, 1.0] names the label '1' twice", "list each class once"],
    ),
}


@pytest.fixture
def training_steps(monkeypatch):
    """The training steps taken (none may run before a refusal)."""
    taken = []
    step = MultiTaskTrainer.training_step

    def counted(self, *args, **kwargs):
        taken.append(self.state.global_step)
        return step(self, *args, **kwargs)

    monkeypatch.setattr(MultiTaskTrainer, "training_step", counted)
    return taken


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_is_a_specific_error_that_says_what_to_fix(case, tmp_path, capsys, tiny_model_dir, training_steps):
    action, error, fragments = BAD_INPUT[case]
    cases.TINY["model"] = tiny_model_dir
    with pytest.raises(error) as info:
        action(tmp_path)
    assert training_steps == [], "a training step ran before the refusal"
    if error is SystemExit:
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err
        message = err
    else:
        message = str(info.value)
        tb = info.tb
        while tb.tb_next is not None:
            tb = tb.tb_next
        raised_at = Path(tb.tb_frame.f_code.co_filename).resolve()
        assert raised_at.is_relative_to(PACKAGE_DIR), f"raised deep inside {raised_at}, not by pals_adapters"
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in: {message}"


@pytest.mark.parametrize("name", [*POSITIVE, *POSITIVE_OR_UNSET, "warmup_ratio", "weight_decay", "seed"])
def test_every_bounded_setting_refuses_a_value_out_of_range_before_anything_is_loaded(name, tmp_path):
    # one case per bounded setting of RunConfig: a check that is dropped, or a setting added to the bounded
    # lists without its check, fails here (the model is a hub name: nothing may have been read to refuse it)
    config = RunConfig(model="no-such/model", tasks=["rte"], output_dir=str(tmp_path / "run"), **{name: -1})
    with pytest.raises(ConfigError, match=rf"^{name}=-1: must be"):
        config.validate()
    assert not (tmp_path / "run").exists()


def user_labels(name, content):
    """The inferred labels and the loaded label indices of a user file (labels not declared)."""

    def load(tmp):
        (tmp / name).write_text(content)
        spec = custom_task("mine", train=str(tmp / name), text_columns="text")
        return spec.labels, load_split(spec, "train", source="local")["label"]

    return load


def allowed_resume_change(tmp):
    """A resume that changes only how often it logs goes ahead, and says what changed."""
    config = cases.run_folder_with_checkpoint(tmp)
    changed = dataclasses.replace(config, resume="last", logging_steps=1, export=True)
    return prepare_run_folder(changed, changed.validate())


RIGHT_RESULT = {
    # what users write is what they mean: (action, expected result)
    "glue-names-as-users-write-them": (
        lambda tmp: list(harness.resolve_task_names(["SST-2", "sts-b", "MNLI", "qnli"])),
        ["sst2", "stsb", "mnli", "qnli"],
    ),
    "csv-labels-1-and-1.0-are-one-class": (
        user_labels("t.csv", "text,label\nx,1\ny,1.0\nz,0\nw, 01\n"),
        (("0", "1"), [1, 1, 0, 1]),
    ),
    "jsonl-labels-1-and-1.0-are-one-class": (
        user_labels(
            "t.jsonl", '{"text": "x", "label": 1}\n{"text": "y", "label": "1.0"}\n{"text": "z", "label": 0.0}\n'
        ),
        (("0", "1"), [1, 1, 0]),
    ),
    "numeric-labels-in-numeric-order": (
        user_labels("t.csv", "text,label\nx,10\ny,2\nz,2.5\n"),
        (("2", "2.5", "10"), [2, 0, 1]),
    ),
    "metrics-of-a-are-not-those-of-a_b": (
        lambda tmp: task_metrics(
            {"a_accuracy": 0.5, "a_b_accuracy": 0.9, "a_score": 0.5, "a_b_score": 0.9}, "a", ["a", "a_b"]
        ),
        {"accuracy": 0.5, "score": 0.5},
    ),
    "resume-may-change-logging": (allowed_resume_change, "checkpoint-4"),
}


@pytest.mark.parametrize("case", list(RIGHT_RESULT))
def test_what_users_write_gives_the_right_result(case, tmp_path, tiny_model_dir, caplog):
    action, expected = RIGHT_RESULT[case]
    cases.TINY["model"] = tiny_model_dir
    result = action(tmp_path)
    if isinstance(expected, str):
        assert result.endswith(expected)
        assert "logging_steps: run 4, now 1" in caplog.text and "export: run False, now True" in caplog.text
    else:
        assert result == expected


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
