"""Situations for the bad-input table of test_reliability (issue 9): a user's tasks, a run folder with
its record and checkpoints, exports of a tiny model, damaged in the ways users damage them. Each
builder returns an action that takes the test's tmp folder and must end in a refusal."""

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

import torch
from filelock import FileLock
from helpers import fake_checkpoint, tiny_bert_config
from transformers import AutoModel, AutoTokenizer, BertModel

from pals_adapters.harness import runner
from pals_adapters.harness.cli import main
from pals_adapters.harness.export import export_run, export_task, load_task
from pals_adapters.harness.export.manifest import MANIFEST
from pals_adapters.harness.methods import get_method
from pals_adapters.harness.model import MultiTaskModel
from pals_adapters.harness.run_folder import LOCK_FILE, write_record
from pals_adapters.harness.tasks import GLUE_TASKS, load_task_specs

# "model": a tiny BERT folder with a real tokenizer (128 positions); the table's test sets it.
TINY = {}

ROWS = "\n".join(f"review {i},{'pos' if i % 2 else 'neg'}" for i in range(16))


def user_tasks(tmp: Path, names=("a", "a_b"), labels="[neg, pos]") -> Path:
    """A task file with one CSV task per name (same files), in ``tmp``."""
    for split in ("train", "dev"):
        (tmp / f"{split}.csv").write_text("text,label\n" + ROWS + "\n")
    entries = "".join(
        f"  - name: {name}\n    train: train.csv\n    validation: dev.csv\n    text_columns: [text]\n"
        f"    labels: {labels}\n"
        for name in names
    )
    (tmp / "tasks.yaml").write_text("tasks:\n" + entries)
    return tmp / "tasks.yaml"


def user_run(tmp: Path, **changes) -> runner.RunConfig:
    settings = dict(
        model=str(TINY["model"]),
        task_file=str(user_tasks(tmp)),
        method="pals",
        base="frozen",
        sampler="round_robin",
        max_steps=8,
        save_steps=4,
        batch_size=4,
        max_length=32,
        logging_steps=4,
        eval_batch_size=8,
        output_dir=str(tmp / "run"),
        export=False,
    )
    return runner.RunConfig(**{**settings, **changes})


def run_folder_with_checkpoint(tmp: Path) -> runner.RunConfig:
    """The folder of a run interrupted after step 4: its record and a checkpoint that loads."""
    config = user_run(tmp)
    write_record(Path(config.output_dir), config, config.validate())
    fake_checkpoint(Path(config.output_dir) / "checkpoint-4")
    return config


def resumed_with(edit=None, **change):
    """Resumes the interrupted run with other settings (or after ``edit(tmp)``); the record must stay as it was."""

    def action(tmp):
        config = run_folder_with_checkpoint(tmp)
        if edit is not None:
            edit(tmp)
        record = Path(config.output_dir) / "run_config.json"
        before = record.read_bytes()
        try:
            runner.run(dataclasses.replace(config, resume="last", **change))
        finally:
            assert record.read_bytes() == before, "the record of what the checkpoints are was overwritten"

    return action


def fresh_run_over_checkpoints(tmp):
    config = run_folder_with_checkpoint(tmp)
    runner.run(dataclasses.replace(config, seed=7))


def second_run_into_a_busy_folder(tmp):
    config = user_run(tmp)
    Path(config.output_dir).mkdir(parents=True)
    with FileLock(str(Path(config.output_dir) / LOCK_FILE)):  # the first run holds it
        runner.run(config)


def cli_train(*argv, model=False):
    def action(tmp):
        extra = ["--model", str(TINY["model"])] if model else []
        return main(["train", "--output-dir", str(tmp / "run"), *extra, *argv])

    return action


def task_named(name):
    """``train --task-file`` with a task of that name (refused before anything trains)."""

    def action(tmp):
        path = user_tasks(tmp, names=[json.dumps(name)])
        return main(["train", "--output-dir", str(tmp / "run"), "--task-file", str(path)])

    return action


def config_file(text):
    def action(tmp):
        (tmp / "run.yaml").write_text(text)
        return main(["train", "--config", str(tmp / "run.yaml"), "--output-dir", str(tmp / "run")])

    return action


# --- exports ------------------------------------------------------------------------------------


def user_task_export(tmp: Path) -> Path:
    """Task "mine" (labels neg, pos) trained on a frozen tiny base, exported with its tokenizer."""
    spec = load_task_specs(user_tasks(tmp, names=["mine"]))[0]
    model = MultiTaskModel(AutoModel.from_pretrained(TINY["model"]), {"mine": spec}, get_method("pals"), "frozen")
    tokenizer = AutoTokenizer.from_pretrained(TINY["model"])
    return export_task(
        model, "mine", tmp / "export", base_model_name=str(TINY["model"]), tokenizer=tokenizer, max_length=32
    )


def evaluate_with_reordered_labels(tmp):
    folder = user_task_export(tmp)
    user_tasks(tmp, names=["mine"], labels="[pos, neg]")
    return main(["evaluate", str(folder), "--task-file", str(tmp / "tasks.yaml")])


def evaluate_on_a_base_with_another_tokenizer(tmp):
    folder = user_task_export(tmp)
    other = Path(shutil.copytree(TINY["model"], tmp / "other-base"))
    config = json.loads((other / "tokenizer_config.json").read_text())
    (other / "tokenizer_config.json").write_text(json.dumps({**config, "padding_side": "left"}))
    return main(["evaluate", str(folder), "--base-model", str(other)])


def finetuned_export(tmp: Path) -> Path:
    torch.manual_seed(0)
    model = MultiTaskModel(BertModel(tiny_bert_config()), {"rte": GLUE_TASKS["rte"]}, get_method("pals"), "finetune")
    export_run(model, tmp / "export", base_model_name="tiny-bert")
    return tmp / "export"


def rehash(folder: Path, name: str) -> None:
    """Updates a manifest for an edited file, as a careless (or clever) user would."""
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["files"][name] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    (folder / MANIFEST).write_text(json.dumps(manifest))


def base_damaged(how):
    def action(tmp):
        out = finetuned_export(tmp)
        base = out / "base"
        if how == "manifest deleted":
            (base / MANIFEST).unlink()
        elif how == "manifest corrupted":
            (base / MANIFEST).write_text('{"contents": "base", "fingerp')
        else:
            config = json.loads((base / "config.json").read_text())
            (base / "config.json").write_text(json.dumps({**config, "hidden_act": "relu"}))
            if how == "config changed, manifest updated":
                rehash(base, "config.json")
        return load_task(out / "rte")

    return action


def frozen_base_with_changed_config(tmp):
    pretrained = tmp / "pretrained"
    BertModel(tiny_bert_config()).save_pretrained(pretrained)
    tasks = {"rte": GLUE_TASKS["rte"]}
    model = MultiTaskModel(AutoModel.from_pretrained(pretrained), tasks, get_method("pals"), "frozen")
    export_task(model, "rte", tmp / "export", base_model_name=str(pretrained))
    config = json.loads((pretrained / "config.json").read_text())
    (pretrained / "config.json").write_text(json.dumps({**config, "hidden_act": "relu"}))
    return load_task(tmp / "export" / "rte")
