"""Adding a task later: only its parameters train, against the export's shared base; the old tasks stay."""

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from helpers import file_hashes, glue_dir, tiny_run_config
from safetensors.torch import load_file
from transformers import AutoTokenizer, TrainerCallback

from pals_adapters.errors import ConfigError
from pals_adapters.harness.cli import main
from pals_adapters.harness.export import load_task, load_tasks
from pals_adapters.harness.scoring.evaluation import evaluate_tasks
from pals_adapters.harness.serving.predictor import MultiTaskPredictor
from pals_adapters.harness.training import runner
from pals_adapters.harness.training.runner import load_dev_sets, run
from pals_adapters.harness.training.trainer import MultiTaskTrainer

pytestmark = pytest.mark.skipif(glue_dir() is None, reason="needs the shared GLUE folder")


def settings(model_dir, out, **changes):
    if "add_to" in changes:  # what add_to needs (and takes from the export when left out)
        changes = {"base": "frozen", **changes}
    return tiny_run_config(model_dir, out, **{"method": "pals", "sampler": "proportional", **changes})


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, tiny_model_dir):
    out = tmp_path_factory.mktemp("first")
    run(settings(tiny_model_dir, out / "run", tasks=["rte", "stsb"]))
    return out / "run" / "export"


def test_an_added_task_trains_alone_and_leaves_the_old_tasks_as_they_were(first_run, tiny_model_dir, tmp_path):
    before = file_hashes(first_run)
    old = load_tasks(first_run)
    config = settings(tiny_model_dir, tmp_path / "add", tasks=["cola"], base="frozen", add_to=str(first_run))
    results = run(config)
    # only the new task's PAL and head were trained
    assert results["parameters"]["trainable"] == results["parameters"]["per_task"]["cola"]
    after = file_hashes(first_run)
    assert {k: v for k, v in after.items() if k.parts[0] != "cola"} == before
    model = load_tasks(first_run)
    assert set(model.tasks) == {"rte", "stsb", "cola"}
    tokenizer = AutoTokenizer.from_pretrained(str(first_run / "base"))
    dev = load_dev_sets(config, model.tasks, tokenizer)
    old_scores = evaluate_tasks(old, {t: dev[t] for t in ("rte", "stsb")}, tokenizer)
    new_scores = evaluate_tasks(model, {t: dev[t] for t in ("rte", "stsb")}, tokenizer)
    assert new_scores == old_scores
    cola_alone = evaluate_tasks(load_task(first_run / "cola"), {"cola": dev["cola"]}, tokenizer)
    assert cola_alone["cola_score"] == pytest.approx(results["metrics"]["cola_score"], abs=1e-9)


@pytest.mark.parametrize(
    "changes, says",
    [
        (dict(tasks=["cola"], base="finetune"), "set base=frozen"),
        (dict(tasks=["rte"], base="frozen"), "already has tasks"),
        (dict(tasks=["mrpc"], base="frozen", method="houlsby"), "same"),
        (dict(tasks=["mrpc"], method="shared"), "use the same (got 'shared')"),
        (dict(tasks=["mrpc"], max_length=200, model=None), "max_length=200: the model"),
        (dict(tasks=["mrpc"], replace=True), "has no tasks ['mrpc'] to replace"),
        (dict(tasks=["mrpc"], model="bert-base-uncased"), "model='bert-base-uncased' is not the export's base"),
    ],
)
def test_adding_is_refused_before_training(first_run, tiny_model_dir, tmp_path, changes, says):
    config = settings(tiny_model_dir, tmp_path / "add", add_to=str(first_run), **changes)
    before = file_hashes(first_run)
    with pytest.raises(ConfigError, match=re.escape(says)):
        run(config)
    assert not (tmp_path / "add").exists()  # nothing trained or written
    assert file_hashes(first_run) == before


def cli_args(tmp_path, *argv):
    return [
        "train",
        "--glue-dir",
        str(glue_dir()),
        "--max-steps",
        "4",
        "--batch-size",
        "8",
        "--max-length",
        "32",
        "--max-train-examples",
        "32",
        "--max-eval-examples",
        "16",
        "--lr",
        "1e-3",
        *argv,
    ]


@pytest.fixture
def original(tmp_path, tiny_model_dir):
    """A fresh run of rte and stsb (checkpoints at steps 2 and 4) and its export."""
    out = tmp_path / "original"
    run(settings(tiny_model_dir, out, tasks=["rte", "stsb"], save_steps=2))
    return out


def test_the_documented_add_to_command_takes_model_method_and_base_from_the_export(original, tmp_path, capsys):
    export = original / "export"
    before = file_hashes(export)
    # no --model (the default bert-base-uncased is never looked up: offline, it would fail), no method or base
    argv = cli_args(tmp_path, "--tasks", "cola", "--add-to", str(export), "--output-dir", str(tmp_path / "add"))
    assert main(argv) == 0
    said = capsys.readouterr().out.splitlines()[0]  # before training: what it took from the export
    assert said.startswith(f"add_to {export}: method pals, its fine-tuned base (base/) from ") and "frozen" in said
    recorded = json.loads((tmp_path / "add" / "run_config.json").read_text())
    assert (recorded["model"], recorded["method"], recorded["base"]) == (str(export / "base"), "pals", "frozen")
    assert {k: v for k, v in file_hashes(export).items() if k.parts[0] != "cola"} == before
    assert sorted(MultiTaskPredictor.from_exports(export).model.tasks) == ["cola", "rte", "stsb"]


def test_an_add_to_killed_before_its_export_is_exported_into_its_export(original, tiny_model_dir, tmp_path, capsys):
    export = original / "export"
    before = file_hashes(export)
    # the state of an add-to run killed after its last checkpoint, before its export
    run(settings(tiny_model_dir, tmp_path / "add", tasks=["cola"], add_to=str(export), save_steps=4, export=False))
    assert not (export / "cola").exists()
    assert main(["export", str(tmp_path / "add"), "--out", str(export)]) == 0
    assert f"cola: {export / 'cola'}" in capsys.readouterr().out
    after = file_hashes(export)
    assert {k: v for k, v in after.items() if k.parts[0] != "cola"} == before  # base and other tasks untouched
    assert sorted(load_tasks(export).tasks) == ["cola", "rte", "stsb"]
    # `pals-bench export RUN` with no --out: the run knows it added to that export (not <run>/export)
    tensors = {name: load_file(export / "cola" / name) for name in ("adapter.safetensors", "head.safetensors")}
    assert main(["export", str(tmp_path / "add")]) == 0
    assert not (tmp_path / "add" / "export").exists()
    assert {k: v for k, v in file_hashes(export).items() if k.parts[0] != "cola"} == before
    for name, expected in tensors.items():  # the same checkpoint exported again: the same weights
        got = load_file(export / "cola" / name)
        assert got.keys() == expected.keys() and all(torch.equal(got[k], expected[k]) for k in got)


def test_re_exporting_the_original_run_keeps_the_tasks_added_to_its_export(original, tiny_model_dir, tmp_path, capsys):
    export = original / "export"
    run(settings(tiny_model_dir, tmp_path / "add", tasks=["cola"], add_to=str(export)))
    added = {k: v for k, v in file_hashes(export).items() if k.parts[0] == "cola"}
    # the newest checkpoint is the one exported at the end: the same base, so cola stays beside it
    assert main(["export", str(original)]) == 0
    assert {k: v for k, v in file_hashes(export).items() if k.parts[0] == "cola"} == added
    assert sorted(load_tasks(export).tasks) == ["cola", "rte", "stsb"]
    # an earlier checkpoint has another base: cola would be lost, so nothing is written
    before = file_hashes(export)
    with pytest.raises(SystemExit):
        main(["export", str(original), "--checkpoint", str(original / "checkpoint-2")])
    err = capsys.readouterr().err
    assert "holds tasks ['cola']" in err and "would delete them" in err and "nothing was written" in err
    assert file_hashes(export) == before
    assert (
        main(["export", str(original), "--checkpoint", str(original / "checkpoint-2"), "--out", str(tmp_path / "x")])
        == 0
    )


class Crash(Exception):
    pass


class CrashAtStep(TrainerCallback):
    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == 3:
            raise Crash


def test_a_resumed_add_to_whose_export_changed_is_refused_before_training(
    original, tiny_model_dir, tmp_path, monkeypatch
):
    export = original / "export"
    build = runner.build_trainer

    def crashing(*args, **kwargs):
        trainer = build(*args, **kwargs)
        trainer.add_callback(CrashAtStep())
        return trainer

    add = settings(tiny_model_dir, tmp_path / "add", tasks=["cola"], add_to=str(export), save_steps=2)
    monkeypatch.setattr(runner, "build_trainer", crashing)
    with pytest.raises(Crash):
        run(add)
    monkeypatch.setattr(runner, "build_trainer", build)
    assert (tmp_path / "add" / "checkpoint-2").is_dir() and not (export / "cola").exists()
    # meanwhile the original run is re-exported from another checkpoint: the export's base changes
    assert main(["export", str(original), "--checkpoint", str(original / "checkpoint-2")]) == 0
    steps = []
    monkeypatch.setattr(MultiTaskTrainer, "training_step", lambda *a, **k: steps.append(1))
    with pytest.raises(ConfigError, match="trained against another base than the one the export"):
        run(dataclasses.replace(add, resume="last"))
    assert steps == [] and not (export / "cola").exists()


def test_replace_trains_an_added_task_again_and_leaves_the_others(original, tiny_model_dir, tmp_path):
    export = original / "export"
    run(settings(tiny_model_dir, tmp_path / "add", tasks=["cola"], add_to=str(export)))
    before = file_hashes(export)
    head = load_file(export / "cola" / "head.safetensors")
    again = settings(tiny_model_dir, tmp_path / "again", tasks=["cola"], add_to=str(export), seed=7)
    with pytest.raises(ConfigError, match=r"already has tasks \['cola'\].*--replace"):
        run(again)
    assert file_hashes(export) == before
    argv = cli_args(tmp_path, "--tasks", "cola", "--add-to", str(export), "--replace", "--seed", "7")
    assert main([*argv, "--output-dir", str(tmp_path / "again")]) == 0
    after = file_hashes(export)
    assert {k: v for k, v in after.items() if k.parts[0] != "cola"} == {
        k: v for k, v in before.items() if k.parts[0] != "cola"
    }
    assert not torch.equal(load_file(export / "cola" / "head.safetensors")["weight"], head["weight"])  # trained again
    assert sorted(load_tasks(export).tasks) == ["cola", "rte", "stsb"]


def test_add_to_refuses_a_base_whose_tokenizer_changed_since_the_export(tiny_model_dir, tmp_path):
    pretrained = Path(shutil.copytree(tiny_model_dir, tmp_path / "pretrained"))
    run(settings(pretrained, tmp_path / "frozen", tasks=["rte"], base="frozen"))
    config = json.loads((pretrained / "tokenizer_config.json").read_text())
    (pretrained / "tokenizer_config.json").write_text(json.dumps({**config, "padding_side": "left"}))
    export = tmp_path / "frozen" / "export"
    before = file_hashes(export)
    with pytest.raises(ConfigError, match="tokenizer of .*pretrained differs from the one .*rte was trained with"):
        run(settings(pretrained, tmp_path / "add", tasks=["cola"], add_to=str(export)))
    assert file_hashes(export) == before and not (tmp_path / "add").exists()


def test_a_run_whose_export_folder_holds_added_tasks_is_refused_before_training(
    original, tiny_model_dir, tmp_path, monkeypatch
):
    export = original / "export"
    run(settings(tiny_model_dir, tmp_path / "add", tasks=["cola"], add_to=str(export)))
    # a new run into a folder whose export holds cola: training replaces the base cola needs
    shutil.copytree(export, tmp_path / "new" / "export")
    before = file_hashes(tmp_path / "new" / "export")
    steps = []
    monkeypatch.setattr(MultiTaskTrainer, "training_step", lambda *a, **k: steps.append(1))
    with pytest.raises(ConfigError, match=re.escape("holds tasks ['cola'] that this run does not train")):
        run(settings(tiny_model_dir, tmp_path / "new", tasks=["rte", "stsb"]))
    assert steps == [] and file_hashes(tmp_path / "new" / "export") == before
