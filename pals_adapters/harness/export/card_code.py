"""The Python a task's card shows to load the task: runnable as written, from the task's folder, with
only the light install (torch, transformers, adapters or PEFT, pals_adapters without its harness), ending
with predictions and label names.

Each method's files load with their own library where they can: an `adapters` adapter (PALs, Houlsby,
LoRA; CA-MTL with its shared modules) with its head through ``AutoAdapterModel`` and ``load_adapter``, a
PEFT LoRA with its head through ``PeftModel.from_pretrained`` over ``AutoModelForSequenceClassification``.
Every card also shows the harness's `MultiTaskPredictor`, which checks every file first, and the only way
for the methods whose task weights no library reads (``shared``, the layers on top).
"""

from __future__ import annotations

import json

from ..tasks.spec import TaskSpec
from .library_heads import HEAD_CONFIG, POOLER_THEN_CLASSIFIER, hub_model_id, id2label, shared_base_name
from .manifest import TaskManifest

HERE = json.dumps(".")  # the snippets run in the task's folder (where its README.md is)


def base_source(manifest: TaskManifest) -> tuple[list[str], str]:
    """(lines that set ``base``, what the base is, in words): the folder or hub id the task's base loads
    from, as seen from the task's folder."""
    if manifest.base_path is not None:  # a fine-tuned base: exported next to the task
        return [f"base = {json.dumps(manifest.base_path)}  # the fine-tuned base, exported with this task"], (
            f"the fine-tuned base in `{manifest.base_path}` (exported with this task)"
        )
    hub_id = hub_model_id(manifest.base_model_name)
    if hub_id is not None:
        return [f"base = {json.dumps(hub_id)}  # the pretrained base, unchanged (a hub model id)"], (
            f"the pretrained model `{hub_id}`, unchanged"
        )
    name = shared_base_name(manifest.base_model_name) or "BASE"
    return [f"base = {json.dumps(name)}  # the pretrained base, unchanged: give the path of your copy"], (
        f"the pretrained model of the folder `{name}`, unchanged"
    )


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
        "from adapters import AutoAdapterModel",
        "from transformers import AutoTokenizer",
        "",
        "import pals_adapters  # registers the PALs and CA-MTL adapter configs with adapters",
        *(["from pals_adapters.ca_mtl import load_shared_modules"] if ca_mtl else []),
        "",
        *base_lines,
        "tokenizer = AutoTokenizer.from_pretrained(base)",
        f"model = AutoAdapterModel.from_pretrained(base, dtype=torch.{manifest.base_dtype}).eval()",
        f"name = model.load_adapter({HERE}, set_active=True, use_safetensors=True)  # adapter, head and labels",
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
