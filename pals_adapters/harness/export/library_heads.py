"""What a task folder holds to be shared: the task's prediction head in the layout its method's library
loads with the adapter, and names without local paths.

For an `adapters` method, the library's own classification head (``head_config.json`` +
``model_head.safetensors``, written by ``save_head``), so that
``AutoAdapterModel.from_pretrained(base).load_adapter(folder)`` gives the trained task with its labels;
for PEFT's LoRA, the head as PEFT saves a sequence-classification model's ``classifier`` (a
``modules_to_save`` entry of ``adapter_config.json``).

The head computes what the harness's head computes: with the base's pretrained pooler, ``use_pooler=True``
and one linear layer; with the task's own first-token pooler, two layers with tanh between them (the
first is that pooler's dense layer). A regression head's output is already in the label's units (the
target's mean sits in its bias and its scale only divides the loss), so it is copied as it is.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from adapters import AutoAdapterModel
from safetensors.torch import load_file, save_file
from torch import nn

from ..methods.model import BUNDLED_MODEL, MultiTaskModel
from ..tasks.spec import TaskSpec
from .fingerprint import backbone_of, clean_config

logger = logging.getLogger(__name__)

HEAD_CONFIG = "head_config.json"  # adapters' names (adapters.utils), fixed by its loader
HEAD_WEIGHTS = "model_head.safetensors"
PEFT_WEIGHTS = "adapter_model.safetensors"
PEFT_HEAD = "classifier"  # the head of transformers' BERT-like *ForSequenceClassification
# model types whose *ForSequenceClassification reads the pretrained pooler, then dropout and `classifier`:
# the harness's head with pooling "pooler" (the others put layers of their own between encoder and head)
POOLER_THEN_CLASSIFIER = ("bert", "albert", "xmod", "ernie", "megatron-bert", "roc_bert", "nezha")


def id2label(spec: TaskSpec) -> dict[int, str]:
    """The head's label names by output index: the task's labels, or the task's name for a regression score."""
    return dict(enumerate(spec.labels)) if not spec.is_regression else {0: spec.name}


def _harness_head_layers(model: MultiTaskModel, task: str) -> list[nn.Linear]:
    """The linear layers of the task's head, in order (its own pooler's dense layer first, where it has one)."""
    if model.pooling == "pooler":
        return [model.heads[task]]
    return [model.task_poolers[task].dense, model.heads[task]]


@contextlib.contextmanager
def named_base(config, name: str | None):
    """The model config's ``name_or_path`` set to ``name`` for a save: adapters writes it as ``model_name``."""
    before = config._name_or_path
    config._name_or_path = name or ""
    try:
        yield
    finally:
        config._name_or_path = before


def save_adapters_head(model: MultiTaskModel, task: str, folder: Path, model_name: str | None) -> None:
    """Writes ``task``'s head with adapters' ``save_head``: a head of adapters' flexible-head model for the
    base (built on the meta device, nothing allocated), holding the trained head's weights. A model family
    without such a model in adapters gets none (logged); the harness's own head file is always written."""
    spec = model.tasks[task]
    layers = _harness_head_layers(model, task)
    config = clean_config(backbone_of(model))
    with torch.device("meta"):
        try:
            library_model = AutoAdapterModel.from_config(config)
        except ValueError as err:  # adapters has no flexible-head model of this family: the harness's head only
            logger.warning("%s: no adapters head for a %s base (%s)", folder.name, config.model_type, err)
            return
        library_model.add_classification_head(
            task,
            num_labels=spec.num_labels,
            layers=len(layers),
            activation_function="tanh" if len(layers) > 1 else None,
            use_pooler=model.pooling == "pooler",
            id2label=id2label(spec),
        )
    head = library_model.heads[task]
    linear = [name for name, module in head.named_children() if isinstance(module, nn.Linear)]
    state = {
        f"{name}.{part}": getattr(layer, part).detach().clone()
        for name, layer in zip(linear, layers)
        for part in ("weight", "bias")
    }
    head.load_state_dict(state, strict=True, assign=True)
    with named_base(library_model.config, model_name):
        library_model.save_head(str(folder), task, use_safetensors=True)


def peft_head_fits(model: MultiTaskModel) -> bool:
    """Whether transformers' sequence-classification model of the base computes the harness's head."""
    return model.pooling == "pooler" and model.backbone.config.model_type in POOLER_THEN_CLASSIFIER


def add_peft_head(model: MultiTaskModel, task: str, folder: Path) -> None:
    """Makes the PEFT adapter in ``folder`` the one PEFT saves for a sequence-classification model of the
    base: the LoRA weights under that model's names (the encoder under its ``base_model_prefix``), the head
    as ``classifier`` among the config's ``modules_to_save`` (task type ``SEQ_CLS``), so that
    ``PeftModel.from_pretrained(AutoModelForSequenceClassification...)`` loads the whole task. (PEFT cannot
    save a classifier it did not wrap while training, and the harness trains the bare encoder.)"""
    prefix = f"base_model.model.{model.backbone.base_model_prefix}."
    head = model.heads[task]
    path = folder / PEFT_WEIGHTS
    with open(path, "rb") as handle:  # keep the file's metadata (its task tag)
        metadata = json.loads(handle.read(int.from_bytes(handle.read(8), "little"))).get("__metadata__")
    tensors = {prefix + k[len("base_model.model.") :]: v for k, v in load_file(str(path)).items()}
    for part in ("weight", "bias"):
        tensors[f"base_model.model.{PEFT_HEAD}.{part}"] = getattr(head, part).detach().clone().contiguous()
    save_file(tensors, str(path), metadata=metadata)
    config_path = folder / "adapter_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["modules_to_save"] = [PEFT_HEAD]
    config["task_type"] = "SEQ_CLS"
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True), encoding="utf-8")


# --- what shared files say about this machine: names, never local absolute paths (a task folder is made
# to be handed on: the base by its hub id where known, else the name it was given; local folders by name)

# The hub id of the model a bundled package holds (what a colleague downloads to get the same weights).
BUNDLED_HUB_IDS = {BUNDLED_MODEL: "sentence-transformers/all-MiniLM-L6-v2"}


def is_local_path(name: str) -> bool:
    """Whether ``name`` reads as a filesystem path rather than a hub id (``org/model``) or a plain name."""
    return os.path.isabs(name) or name.startswith(("./", "../", "~")) or os.path.isdir(name)


def shared_base_name(name: str | None) -> str | None:
    """The base's name in shared files: its hub id where known (a bundled model's), else the name as given,
    a local folder by its last component (never a path of this machine)."""
    if not name:
        return None
    if name in BUNDLED_HUB_IDS:
        return BUNDLED_HUB_IDS[name]
    if is_local_path(name):
        return Path(os.path.normpath(os.path.expanduser(name))).name or None
    return name


def recorded_base_name(name: str | None, seen_from: str | os.PathLike) -> str | None:
    """The base as an export's manifest records it: a hub id or the bundled model's name as given; a local
    folder by its path from ``seen_from`` (the export's task or base folder: ``../../models/my-bert``), never a
    local absolute path, so that an export moved whole with its base still finds it (`base_location`)."""
    if not name or name in BUNDLED_HUB_IDS or not is_local_path(name):
        return name
    here = os.path.normpath(os.path.abspath(seen_from))
    try:
        relative = Path(os.path.relpath(os.path.abspath(os.path.expanduser(name)), here)).as_posix()
    except ValueError:  # another drive (Windows): by its name (found with --base-model / base=)
        return shared_base_name(name)
    return relative if relative.startswith("../") else f"./{relative}"


def base_location(name: str | None, seen_from: str | os.PathLike) -> str | None:
    """Where the base a manifest records (`recorded_base_name`) is on this machine: a folder recorded from the
    export (``./``, ``../``) as seen from ``seen_from`` (the manifest's folder); a hub id, the bundled model's
    name or the absolute folder of an export written before, as recorded. (Exports written before also named
    a relative folder from the directory they ran in: that is used where the export's view finds none.)"""
    if not name or not name.startswith(("./", "../")):
        return name
    found = os.path.normpath(os.path.join(os.path.abspath(seen_from), name))
    return name if not os.path.isdir(found) and os.path.isdir(name) else found


def hub_model_id(name: str | None) -> str | None:
    """The base's hub model id, or None where it came from a local folder (the hub takes only ids)."""
    if not name or (name not in BUNDLED_HUB_IDS and is_local_path(name)):
        return None
    return BUNDLED_HUB_IDS.get(name, name)


def _shared_value(value: Any) -> Any:
    if isinstance(value, str) and os.path.isabs(value):
        return Path(value).name
    if isinstance(value, os.PathLike):
        return _shared_value(os.fspath(value))
    if isinstance(value, (list, tuple)):
        return type(value)(_shared_value(v) for v in value)
    if isinstance(value, Mapping):
        return {k: _shared_value(v) for k, v in value.items()}
    return value


def shared_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """A run's settings as a shared card shows them: local folders by their name (``/home/me/glue`` ->
    ``glue``), the model by `shared_base_name`; the bundled model by the name ``pals-bench`` takes, so that the
    command runs as written wherever that package is installed."""
    shared = {key: _shared_value(value) for key, value in settings.items()}
    if isinstance(settings.get("model"), str) and settings["model"] not in BUNDLED_HUB_IDS:
        shared["model"] = shared_base_name(settings["model"])
    return shared


def data_source_name(glue_dir: str | os.PathLike | None) -> str | None:
    """The GLUE folder a run scored on, as the manifest records it: by its name (``pals-bench evaluate``
    takes the folder with ``--glue-dir`` or ``GLUE_DIR``)."""
    return Path(glue_dir).name if glue_dir else None
