"""Interrupted runs: a resumed run equals an uninterrupted one; damaged or half-written checkpoints are
skipped and named; weight files are written atomically."""

import logging
import shutil
import types
from pathlib import Path

import pytest
import safetensors
import safetensors.torch
import torch
from helpers import fake_checkpoint, glue_dir
from task_files import needs_glue
from transformers import TrainerCallback

from pals_adapters.errors import ConfigError
from pals_adapters.harness.training import checkpoints
from pals_adapters.harness.training import runner as harness
from pals_adapters.harness.training.trainer import MultiTaskTrainer

GLUE = glue_dir()
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
