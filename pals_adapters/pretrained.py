"""Pretrained configs, models and tokenizers, read without ever running Python code they ship.

A model folder may ask transformers to import its own files (``auto_map`` in config.json or
tokenizer_config.json, or a ``model_type`` transformers does not know). transformers then runs them
when told to trust them and, when not told, asks in a terminal. Exports are meant to be downloaded and
shared, so every load here passes ``trust_remote_code=False`` and a source that asks for its own code is
refused before anything is read into a model, with what it asked for in the message.
"""

from __future__ import annotations

from pathlib import Path

import transformers  # AutoModel and AutoTokenizer are read where one is loaded: they import the modeling stack
from transformers import AutoConfig, PretrainedConfig
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from .errors import UnsupportedModelError

NO_REMOTE_CODE = {"trust_remote_code": False}


def _entries(auto_map: dict) -> list[str]:
    """``AutoModel -> modeling_x.XModel`` lines of an auto_map (tokenizers map to a [slow, fast] pair)."""
    lines = []
    for auto_class, target in sorted(auto_map.items()):
        targets = target if isinstance(target, (list, tuple)) else [target]
        lines += [f"{auto_class} -> {t}" for t in targets if t]
    return lines


def _code_files(source: str) -> list[str]:
    folder = Path(source)
    return sorted(p.name for p in folder.glob("*.py")) if folder.is_dir() else []


def check_no_remote_code(source: str, config_dict: dict | None = None) -> None:
    """Refuses a model (hub name or folder) whose config or tokenizer config asks for its own code.

    Reads only JSON files; a missing source raises transformers' own OSError (the callers word it)."""
    from transformers.models.auto.tokenization_auto import get_tokenizer_config

    if config_dict is None:
        config_dict, _ = PretrainedConfig.get_config_dict(source)
    asked = {"config.json": _entries(config_dict.get("auto_map") or {})}
    asked["tokenizer_config.json"] = _entries(get_tokenizer_config(source).get("auto_map") or {})
    model_type = config_dict.get("model_type")
    unknown = model_type is not None and model_type not in CONFIG_MAPPING
    if not any(asked.values()) and not unknown:
        return
    parts = [f"{name}'s auto_map asks to run {', '.join(lines)}" for name, lines in asked.items() if lines]
    if unknown:
        parts.append(f"its model_type {model_type!r} is not one transformers knows (only its own code could build it)")
    files = _code_files(source)
    shipped = f"; it ships the code files {', '.join(files)}" if files else ""
    raise UnsupportedModelError(
        f"the model {source!r} ships its own code: {'; '.join(parts)}{shipped}. pals_adapters never runs a "
        "model's own code (trust_remote_code=False): use a base whose architecture transformers has built in "
        "(bert, roberta, distilbert ...), or an export from a source you trust whose base is such a model"
    )


def pretrained_config(source: str, **kwargs) -> PretrainedConfig:
    """`AutoConfig.from_pretrained` with remote code off, after `check_no_remote_code`."""
    config_dict, _ = PretrainedConfig.get_config_dict(source)
    check_no_remote_code(source, config_dict)
    return AutoConfig.from_pretrained(source, **kwargs, **NO_REMOTE_CODE)


def pretrained_model(source: str, **kwargs):
    """`transformers.AutoModel.from_pretrained` with remote code off, after `check_no_remote_code`."""
    check_no_remote_code(source)
    return transformers.AutoModel.from_pretrained(source, **kwargs, **NO_REMOTE_CODE)


def pretrained_tokenizer(source: str, **kwargs):
    """`AutoTokenizer.from_pretrained` with remote code off, after `check_no_remote_code` (a folder may hold
    a tokenizer without a model config)."""
    try:
        config_dict, _ = PretrainedConfig.get_config_dict(source)
    except OSError:
        config_dict = {}
    check_no_remote_code(source, config_dict)
    return transformers.AutoTokenizer.from_pretrained(source, **kwargs, **NO_REMOTE_CODE)
