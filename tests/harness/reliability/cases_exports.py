"""Untrusted-export rows: exports damaged or tampered with, loaded on the wrong base, or written where they
must not be; refused before anything is read into a model or written.
Each row: (action taking the tmp folder, the error, fragments its message must hold)."""

import json
import shutil
from pathlib import Path

import torch
from helpers import tiny_bert_config
from reliability_cases import TINY, evaluate_with, finetuned_export, rehash, user_task_export, user_tasks
from transformers import AutoModel, BertModel

from pals_adapters.errors import AdapterLoadError, IntegrityError
from pals_adapters.harness.cli import main
from pals_adapters.harness.export import export_task, load_task
from pals_adapters.harness.export.manifest import MANIFEST
from pals_adapters.harness.methods.model import MultiTaskModel
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.harness.tasks.glue import GLUE_TASKS


def export_then_load_on_another_base(tmp):
    torch.manual_seed(1)
    model = MultiTaskModel(BertModel(tiny_bert_config()), {"rte": GLUE_TASKS["rte"]}, get_method("pals"), "frozen")

    export_task(model, "rte", tmp / "export", base_model_name="tiny-bert")
    torch.manual_seed(2)
    return load_task(tmp / "export" / "rte", base=BertModel(tiny_bert_config()))


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


EXPORTS = {
    "wrong-base-fingerprint": (
        export_then_load_on_another_base,
        AdapterLoadError,
        ["export/rte", "fingerprint", "tiny-bert"],
    ),
    # issue 9.1: evaluate / predict use what was trained
    "evaluate-task-file-with-reordered-labels": (
        evaluate_with_reordered_labels,
        SystemExit,
        ["task 'mine' differs", "labels: trained ('neg', 'pos'), task file ('pos', 'neg')", "leave out --task-file"],
    ),
    "evaluate-base-with-another-tokenizer": (
        evaluate_on_a_base_with_another_tokenizer,
        SystemExit,
        ["tokenizer of", "other-base", "(padding_side differ)", "use the base the task was trained on"],
    ),
    # issue 9.5: the base is part of the fingerprint
    "base-manifest-deleted": (
        base_damaged("manifest deleted"),
        IntegrityError,
        ["base/manifest.json is missing"],
    ),
    "base-manifest-corrupted": (
        base_damaged("manifest corrupted"),
        IntegrityError,
        ["base/manifest.json cannot be read as JSON"],
    ),
    "base-config-changed": (
        base_damaged("config changed"),
        IntegrityError,
        ["config.json is corrupted", "manifest.json expects"],
    ),
    "base-config-changed-manifest-updated": (
        base_damaged("config changed, manifest updated"),
        AdapterLoadError,
        ["another model config", "hidden_act: trained with 'gelu'", "'relu'"],
    ),
    "frozen-base-config-changed": (
        frozen_base_with_changed_config,
        AdapterLoadError,
        ["pretrained", "hidden_act: trained with 'gelu', this base has 'relu'"],
    ),
    "evaluate-out-is-a-folder": (
        evaluate_with("--out", "TMP/report"),
        SystemExit,
        ["--out", "is a folder", "eval.json"],
    ),
}
