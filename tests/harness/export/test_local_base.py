"""A base given as a local folder (``--model /some/folder``): every exported file names it without this machine's
absolute path (the manifest by its path from the task folder, shared files by the folder's name), the export
finds it on the same machine and after the project moved whole, and exports written before (an absolute path)
still load. A checkpoint's export states what its scores were measured on."""

import dataclasses
import json
import logging
import shutil
import sys
from pathlib import Path

import pytest
import torch
from helpers import REPO, tiny_run_config
from huggingface_hub import ModelCard
from transformers import AutoTokenizer

from pals_adapters.errors import AdapterLoadError
from pals_adapters.harness.cli import main
from pals_adapters.harness.export import export_run, load_task, load_tokenizer, read_task_manifest
from pals_adapters.harness.methods.model import build_model
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.harness.tasks.spec import spec_from_json
from pals_adapters.harness.training.runner import run

BASE = "base-model"
RECORDED = f"../../../{BASE}"  # the project's base folder, seen from <project>/<run>/export/<task>
DEV_ROWS = 12  # fewer than the runs' max_eval_examples (16): a card must not claim 16


def _write_project(project: Path, model_dir: Path) -> None:
    shutil.copytree(model_dir, project / BASE)  # a tiny random model saved with save_pretrained, and its tokenizer
    (project / "data").mkdir()
    rows = [f"{word} film {i},{'pos' if i % 2 else 'neg'}\n" for i, word in enumerate(["good", "bad"] * 8)]
    (project / "data" / "train.csv").write_text("text,label\n" + "".join(rows))
    (project / "data" / "dev.csv").write_text("text,label\n" + "".join(rows[:DEV_ROWS]))
    task = "{name: %s, train: data/train.csv, validation: data/dev.csv, text_columns: [text]}"
    (project / "tasks.yaml").write_text(f"tasks:\n  - {task % 'mood'}\n")
    (project / "more.yaml").write_text(f"tasks:\n  - {task % 'tone'}\n")


@pytest.fixture(scope="module")
def project(tmp_path_factory, tiny_model_dir):
    """A project folder holding its base model, its data and two runs on that base given by its absolute path:
    a frozen base (a checkpoint without scores) and a fine-tuned one (a checkpoint scored at its step), each
    exported at its end and again from its checkpoint (``pals-bench export --checkpoint``)."""
    project = tmp_path_factory.mktemp("local-base") / "project"
    _write_project(project, tiny_model_dir)
    for base, cadence in (("frozen", {"save_steps": 2}), ("finetune", {"eval_steps": 2})):
        folder = project / f"run-{base}"
        tasks = {"tasks": None, "task_file": str(project / "tasks.yaml"), "glue_dir": None}
        run(tiny_run_config(project / BASE, folder, **tasks, base=base, max_steps=2, **cadence))
        checkpoint = ["--checkpoint", str(folder / "checkpoint-2"), "--out", str(folder / "ck")]
        assert main(["export", str(folder), *checkpoint]) == 0
    # PEFT's LoRA (its adapter_config.json names the base too), exported without training
    specs = {name: spec_from_json(spec) for name, spec in json.loads((folder / "run_tasks.json").read_text()).items()}
    lora = build_model(str(project / BASE), specs, get_method("peft_lora"), "frozen")
    tokenizer = AutoTokenizer.from_pretrained(project / BASE)
    export_run(lora, project / "run-peft" / "export", base_model_name=str(project / BASE), tokenizer=tokenizer)
    return project


def _local_names(project: Path) -> dict[str, str]:
    names = {"tmp": str(project.parent), "resolved": str(project.resolve()), "environment": sys.prefix}
    return {**names, "home": str(Path.home()), "checkout": str(REPO)}


@pytest.mark.parametrize("base", ["frozen", "finetune", "peft"])
def test_no_exported_file_names_the_local_base_by_its_absolute_path(project, base):
    run_dir = project / f"run-{base}"
    if base == "peft":
        config = json.loads((run_dir / "export" / "mood" / "adapter_config.json").read_text())
        assert config["base_model_name_or_path"] == BASE
    for export in [run_dir / "export"] + ([run_dir / "ck"] if base != "peft" else []):
        task = export / "mood"
        assert read_task_manifest(task).base_model_name == RECORDED
        if base == "finetune":
            assert json.loads((export / "base" / "manifest.json").read_text())["base_model_name"] == RECORDED
        # files meant for other people name the folder only
        if base != "peft":
            assert json.loads((task / "adapter_config.json").read_text())["model_name"] == BASE
            assert json.loads((task / "head_config.json").read_text())["model_name"] == BASE
            card = ModelCard.load(task / "README.md")
            assert f"\nmodel: {BASE}\n" in card.text and f"--model {BASE} " in card.text  # the run's settings
        assert ModelCard.load(task / "README.md").data.base_model is None  # the hub takes ids only
        files = [path for path in export.rglob("*") if path.is_file()]
        assert len(files) >= 5  # the weights, configs, head, card and manifest (and the base's files)
        for path in files:
            text = path.read_bytes().decode("utf-8", errors="replace")
            found = [what for what, name in _local_names(project).items() if name in text]
            assert not found, f"{path} names the {found} folder"


def test_a_project_moved_whole_evaluates_on_its_local_base(project, tmp_path):
    """The project (its base, data and runs) copied elsewhere and gone from where it was: the exports find
    the base (frozen: the pretrained folder; fine-tuned: the exported base) and score as the run did."""
    moved, aside = tmp_path / "elsewhere", project.parent / "aside"
    shutil.copytree(project, moved)
    project.rename(aside)
    try:
        for base in ("frozen", "finetune"):
            task = moved / f"run-{base}" / "export" / "mood"
            scores = tmp_path / f"{base}.json"
            assert main(["evaluate", str(task), "--out", str(scores)]) == 0
            result = json.loads(scores.read_text())["tasks"]["mood"]
            assert result["dev_examples"] == [DEV_ROWS]
            measured = read_task_manifest(task).metrics  # the base was found: its fingerprint is checked on load
            assert result["metrics"]["mood_accuracy"] == pytest.approx(measured["accuracy"], abs=1e-6)
    finally:
        aside.rename(project)


def test_an_export_written_before_with_an_absolute_base_path_still_loads(project, tmp_path):
    task = project / "run-frozen" / "export" / "mood"
    old = tmp_path / "old" / "mood"
    shutil.copytree(task, old)  # another place: only an absolute path finds the base from there
    manifest = json.loads((old / "manifest.json").read_text())
    manifest["base_model_name"] = str(project / BASE)  # the old form: the folder as it was given
    (old / "manifest.json").write_text(json.dumps(manifest))
    ids = torch.randint(1000, 2000, (3, 7))
    with torch.no_grad():
        assert torch.equal(load_task(old)("mood", ids)["logits"], load_task(task)("mood", ids)["logits"])


def test_an_export_moved_without_its_local_base_says_so_and_takes_it_again(project, tmp_path):
    lone = tmp_path / "export"
    shutil.copytree(project / "run-frozen" / "export", lone)
    with pytest.raises(AdapterLoadError, match=f"the local folder '{RECORDED}' seen from the task folder .*not there"):
        load_task(lone / "mood")
    with pytest.raises(AdapterLoadError, match="--base-model PATH"):
        load_tokenizer(lone / "mood")
    assert list(load_task(lone / "mood", base=str(project / BASE)).tasks) == ["mood"]


def test_a_task_added_to_an_export_of_a_local_base_finds_it_and_names_it_from_the_export(project):
    """``--add-to`` trains against the frozen base the export names (from the export), given again by any path."""
    export = project / "run-added" / "export"  # a copy at the same depth: the export's path to the base holds
    shutil.copytree(project / "run-frozen" / "export", export)
    added = project / "run-added" / "add"
    tasks = {"tasks": None, "task_file": str(project / "more.yaml"), "glue_dir": None}
    run(tiny_run_config(project / BASE, added, **tasks, base="frozen", max_steps=2, add_to=str(export)))
    assert read_task_manifest(export / "tone").base_model_name == RECORDED
    assert set(load_task(export / "tone").tasks) == {"tone"}


def test_a_checkpoint_export_card_states_the_examples_its_scores_are_of(project):
    """The scores measured at the checkpoint's step, on the dev examples the run scored (12, not the limit 16)."""
    task = project / "run-finetune" / "ck" / "mood"
    manifest = read_task_manifest(task)
    state = json.loads((project / "run-finetune" / "checkpoint-2" / "trainer_state.json").read_text())
    scored = next(entry for entry in state["log_history"] if "eval_mood_accuracy" in entry)
    assert manifest.metrics["accuracy"] == scored["eval_mood_accuracy"]
    assert manifest.evaluation.examples_scored == {"mood": {"validation": DEV_ROWS}}
    card = ModelCard.load(task / "README.md")
    assert f"at step 2 (the checkpoint exported here), on {DEV_ROWS} `validation` examples" in card.text
    splits = {result.dataset_split for result in card.data.eval_results}
    assert splits == {"validation"}  # the whole split: it has fewer rows than the limit
    assert "at most the first" not in card.text


def test_a_checkpoint_export_without_scores_says_so(project):
    manifest = read_task_manifest(project / "run-frozen" / "ck" / "mood")
    assert manifest.metrics is None and manifest.evaluation.examples_scored is None
    card = ModelCard.load(project / "run-frozen" / "ck" / "mood" / "README.md")
    assert "None recorded with this export" in card.text and not card.data.eval_results
    assert "examples" not in card.text.split("## Dev results")[1].split("##")[0]


def test_a_checkpoint_whose_dev_data_is_gone_is_exported_without_its_scores(project, tmp_path, caplog):
    dev, aside = project / "data" / "dev.csv", project / "data" / "dev.csv.aside"
    dev.rename(aside)
    try:
        run_dir = project / "run-finetune"
        with caplog.at_level(logging.WARNING):
            main(["export", str(run_dir), "--checkpoint", str(run_dir / "checkpoint-2"), "--out", str(tmp_path / "ck")])
    finally:
        aside.rename(dev)
    assert "the dev scores of checkpoint-2 are left out of the export" in caplog.text
    assert read_task_manifest(tmp_path / "ck" / "mood").metrics is None
    assert "None recorded with this export" in (tmp_path / "ck" / "mood" / "README.md").read_text()


def test_export_with_base_carries_a_frozen_base_so_that_the_task_loads_without_the_model(tmp_path, tiny_model_dir):
    """``pals-bench export RUN --with-base``: the frozen pretrained base goes into ``<out>/base`` (config, weights,
    tokenizer); the task loads, predicts the same and takes a new task (--add-to) with the base folder gone."""
    _write_project(tmp_path, tiny_model_dir)
    config = tiny_run_config(tmp_path / BASE, tmp_path / "run", tasks=None, task_file=str(tmp_path / "tasks.yaml"))
    run(dataclasses.replace(config, glue_dir=None, base="frozen", max_steps=2, save_steps=2))
    expected = load_task(tmp_path / "run" / "export" / "mood")  # on the pretrained base, found by its folder
    assert main(["export", str(tmp_path / "run"), "--out", str(tmp_path / "handoff"), "--with-base"]) == 0
    shutil.rmtree(tmp_path / BASE)  # the colleague has no copy of the model
    handoff = tmp_path / "handoff"
    manifest = read_task_manifest(handoff / "mood")
    assert (manifest.base_mode, manifest.base_path) == ("frozen", "../base")
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in (handoff / "base").iterdir()}
    loaded, tokenizer = load_task(handoff / "mood"), load_tokenizer(handoff / "mood")
    inputs = tokenizer(["a good film"], return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(loaded("mood", **inputs)["logits"], expected("mood", **inputs)["logits"])
    card = (handoff / "mood" / "README.md").read_text(encoding="utf-8")
    assert 'base = "../base"  # the pretrained base, unchanged, exported with this task' in card
    more = {"tasks": None, "task_file": str(tmp_path / "more.yaml"), "glue_dir": None, "max_steps": 2}
    run(tiny_run_config(None, tmp_path / "add", model=None, method=None, add_to=str(handoff), **more))
    assert read_task_manifest(handoff / "tone").base_path == "../base"  # it names the carried base as the others
    assert sorted(load_task(handoff / "tone").tasks) == ["tone"]
