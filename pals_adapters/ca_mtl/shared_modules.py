"""CA-MTL's shared conditional modules on their own: their weights, and the one folder format that the
API (`save_shared_modules` / `load_shared_modules`) and the harness export (``<export>/base``) share.

A shared-modules folder holds ``shared_modules.safetensors`` (the modules' state dict, names relative
to them) and, when the API wrote it, ``ca_mtl_config.json`` (the CA-MTL config they were built with).
The harness writes the weights file into ``<export>/base`` next to the fine-tuned encoder, so
``load_shared_modules(model, "<export>/base")`` reads an export. Folders of earlier versions still
load: the API's ``ca_mtl_shared.safetensors``, and harness exports without a config file (the strict
name and shape check below then stands in for the config check).
"""

import json
from pathlib import Path

import torch
from adapters import AdapterConfig
from safetensors.torch import load_file, save_file

from ..errors import AdapterLoadError
from .attach import ca_mtl_config_differences, ca_mtl_modules
from .config import CAMTLConfig

SHARED_MODULES_FILE = "shared_modules.safetensors"
SHARED_CONFIG_FILE = "ca_mtl_config.json"
LEGACY_SHARED_MODULES_FILE = "ca_mtl_shared.safetensors"  # save_shared_modules before the formats were one


def shared_state_dict(model) -> dict[str, torch.Tensor]:
    """The shared conditional modules' weights (names relative to them)."""
    return ca_mtl_modules(model).state_dict()


def load_shared_state_dict(model, state: dict[str, torch.Tensor], source: str = "the given state") -> None:
    """Loads the shared conditional modules strictly: every name and shape must match; nothing is loaded otherwise."""
    modules = ca_mtl_modules(model)
    expected = modules.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    shapes = sorted(k for k in set(state) & set(expected) if tuple(state[k].shape) != tuple(expected[k].shape))
    problems = [
        f"{label}: {keys[:4]}"
        for label, keys in (("missing", missing), ("unexpected", unexpected), ("wrong shape", shapes))
        if keys
    ]
    if problems:
        raise AdapterLoadError(
            f"CA-MTL shared modules in {source} do not match this model's; nothing was loaded. " + "; ".join(problems)
        )
    modules.load_state_dict(state, strict=True)
    modules.waiting.clear()


def save_shared_modules(model, save_directory) -> Path:
    """Writes the shared conditional modules (``shared_modules.safetensors``) and their config
    (``ca_mtl_config.json``) to ``save_directory``."""
    folder = Path(save_directory)
    folder.mkdir(parents=True, exist_ok=True)
    modules = ca_mtl_modules(model)
    tensors = {k: v.detach().cpu().contiguous().clone() for k, v in modules.state_dict().items()}
    save_file(tensors, str(folder / SHARED_MODULES_FILE), metadata={"format": "pt", "part": "shared_modules"})
    (folder / SHARED_CONFIG_FILE).write_text(json.dumps(modules.config.to_dict(), indent=2, sort_keys=True))
    return folder


def load_shared_modules(model, save_directory) -> None:
    """Loads the shared conditional modules from a folder that `save_shared_modules` wrote, or from a
    pals-bench export's ``base`` folder, into ``model`` (whose CA-MTL adapters must have the same config).
    Strict: a different config, a missing or extra weight, or a wrong shape is an error, and nothing is loaded."""
    folder = Path(save_directory)
    modules = ca_mtl_modules(model)
    found = [folder / name for name in (SHARED_MODULES_FILE, LEGACY_SHARED_MODULES_FILE) if (folder / name).is_file()]
    weights = found[0] if found else None
    if weights is None:
        hint = ""
        if (folder / "base" / SHARED_MODULES_FILE).is_file():
            hint = f" (this looks like a pals-bench export: its shared modules are in {folder / 'base'})"
        raise AdapterLoadError(
            f"{folder} holds no CA-MTL shared modules ({SHARED_MODULES_FILE}){hint}: give the folder that "
            "save_shared_modules wrote, or the base folder of a pals-bench export"
        )
    path = folder / SHARED_CONFIG_FILE
    if path.is_file():  # the harness's exports have none: the weights' names and shapes are checked below
        try:
            saved = AdapterConfig.load(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise AdapterLoadError(f"{path} is not a CA-MTL config: {err}") from err
        differences = (
            ca_mtl_config_differences(saved, modules.config)
            if isinstance(saved, CAMTLConfig)
            else ["not a CA-MTL config"]
        )
        if differences:
            raise AdapterLoadError(f"{path} does not match this model's CA-MTL config: {'; '.join(differences)}")
    try:
        state = load_file(str(weights))
    except Exception as err:  # a truncated or foreign file: safetensors raises its own error types
        raise AdapterLoadError(f"{weights} cannot be read as weights: {err}") from err
    load_shared_state_dict(model, state, str(weights))
