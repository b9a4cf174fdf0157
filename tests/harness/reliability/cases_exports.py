"""Untrusted-export rows: exports damaged or tampered with, loaded on the wrong base, or written where they
must not be; refused before anything is read into a model or written.
Each row: (action taking the tmp folder, the error, fragments its message must hold)."""

import contextlib
import json
import shutil
from pathlib import Path

import torch
from helpers import tiny_bert_config
from reliability_cases import (
    COLA,
    TINY,
    evaluate_with,
    finetuned_export,
    rehash,
    served_export,
    unchanged,
    user_task_export,
    user_tasks,
)
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


def manifest_changed(edit):
    """``load_task`` of a task export whose manifest.json was edited by hand (the manifest is not hashed)."""

    def action(tmp):
        folder = user_task_export(tmp)
        manifest = json.loads((folder / MANIFEST).read_text())
        edit(manifest)
        (folder / MANIFEST).write_text(json.dumps(manifest))
        return load_task(folder)

    return action


def head_linked_outside(tmp):
    export = served_export(tmp, tasks=("rte",))
    head = export / "rte" / "head.safetensors"
    shutil.copy(head, tmp / "outside.safetensors")  # the same bytes: its sha256 still matches
    head.unlink()
    head.symlink_to(tmp / "outside.safetensors")
    return load_task(export / "rte")


def evaluate_into_a_path_under_a_file(tmp):
    folder = user_task_export(tmp)
    (tmp / "afile").write_text("a file, not a folder")
    return unchanged(tmp / "afile", lambda: main(["evaluate", str(folder), "--out", str(tmp / "afile" / "x.json")]))


def predict_into_a_path_under_a_file(tmp):
    export = served_export(tmp, tasks=("cola",))
    (tmp / "requests.jsonl").write_text(json.dumps(COLA) + "\n")
    (tmp / "afile").write_text("a file, not a folder")
    argv = ["predict", str(export), "--input", str(tmp / "requests.jsonl"), "--out", str(tmp / "afile" / "a.tsv")]
    return unchanged(tmp / "afile", lambda: main(argv))


def predict_elsewhere_on_a_base_named_as_a_relative_folder(tmp, base_moved_away=False):
    """A frozen export whose base was given as ``--model tiny`` (recorded by its path from the task folder),
    used from another directory: it finds its base; with the base moved away, the error says where it was
    looked for and how to give it."""
    shutil.copytree(TINY["model"], tmp / "tiny")
    with contextlib.chdir(tmp):
        export = tmp / served_export(Path("."), base="frozen", model_dir="tiny", tasks=("cola",))
    (tmp / "requests.jsonl").write_text(json.dumps(COLA) + "\n")
    if base_moved_away:
        (tmp / "tiny").rename(tmp / "tiny-moved")
    (tmp / "elsewhere").mkdir()
    with contextlib.chdir(tmp / "elsewhere"):
        return main(["predict", str(export), "--input", str(tmp / "requests.jsonl"), "--out", str(tmp / "a.tsv")])


def evaluation(**values):
    return lambda manifest: manifest.update(evaluation=values)


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
    # a manifest is input: every value checked on read, naming the field and the file
    **{
        f"manifest-{label}": (manifest_changed(edit), IntegrityError, ["mine/manifest.json: field", *fragments])
        for label, edit, fragments in [
            (
                "max-eval-examples-as-a-string",
                evaluation(max_eval_examples="5"),
                ["'evaluation.max_eval_examples'", "whole number >= 1 or null, found str '5'"],
            ),
            ("max-eval-examples-negative", evaluation(max_eval_examples=-3), ["max_eval_examples", "found int -3"]),
            ("eval-batch-size-zero", evaluation(eval_batch_size=0), ["'evaluation.eval_batch_size'", "found int 0"]),
            (
                "base-dtype-float8",
                lambda m: m.update(base_dtype="float8_e4m3fn"),
                ["'base_dtype' must be one of float32, bfloat16", "found str 'float8_e4m3fn'"],
            ),
            ("max-length-zero", lambda m: m.update(max_length=0), ["'max_length' must be a whole number >= 1"]),
            ("max-length-negative", lambda m: m.update(max_length=-5), ["'max_length'", "found int -5"]),
            (
                "format-version-as-a-string",
                lambda m: m.update(format_version="3"),
                ["'format_version' must be a whole number >= 1, found str '3'"],
            ),
            (
                "hidden-size-aug-of-ten-million",  # refused from the weights file's header, before anything is built
                lambda m: m["method"].update(overrides={"hidden_size_aug": 10_000_002}),
                ["field 'method'", "'pals[hidden_size_aug=10000002]'", "adapter.safetensors holds"],
            ),
        ]
    },
    "export-with-a-linked-head": (
        head_linked_outside,
        IntegrityError,
        ["rte/head.safetensors is a symbolic link", "outside.safetensors", "never links"],
    ),
    # output places checked before anything is scored
    "evaluate-out-under-a-file": (
        evaluate_into_a_path_under_a_file,
        SystemExit,
        ["--out", "afile/x.json", "afile is a file, not a folder"],
    ),
    "predict-out-under-a-file": (
        predict_into_a_path_under_a_file,
        SystemExit,
        ["--out", "afile/a.tsv", "afile is a file, not a folder"],
    ),
    "predict-with-its-relative-base-moved-away": (
        lambda tmp: predict_elsewhere_on_a_base_named_as_a_relative_folder(tmp, base_moved_away=True),
        SystemExit,
        ["the local folder '../../tiny' seen from the task folder", "not there", "--base-model PATH"],
    ),
}
