"""What the shared base of a multi-task model is: its weights under plain transformers names and their
fingerprint, its model config, and what of its tokenizer decides the token ids. A task export records
all three of the base it needs; loading checks each."""

from __future__ import annotations

import copy
import hashlib
import json
import struct
import tempfile
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn
from transformers import PreTrainedModel

from ...ca_mtl import CAMTLModules
from ...ca_mtl import shared_state_dict as ca_mtl_shared_state
from ...errors import ConfigError
from ...errors import config_differences as differences
from ..methods.model import MultiTaskModel

_PEFT_PREFIX = "base_model.model."


def backbone_of(model: nn.Module) -> PreTrainedModel:
    """The transformers encoder inside a MultiTaskModel, PeftModel, AutoAdapterModel or plain model."""
    if isinstance(model, MultiTaskModel):
        return model.backbone
    if hasattr(model, "get_base_model"):  # PeftModel
        model = model.get_base_model()
    if not isinstance(model, PreTrainedModel):
        raise ConfigError(f"expected a transformers model or MultiTaskModel, got {type(model).__name__}")
    return model.base_model  # AutoAdapterModel / *ForSequenceClassification -> the encoder itself


def plain_class(backbone: PreTrainedModel) -> type:
    # adapters.init swaps the instance's class for a subclass; the transformers class is in its MRO.
    for cls in type(backbone).__mro__:
        if cls.__module__.startswith("transformers.") and issubclass(cls, PreTrainedModel):
            return cls
    raise ConfigError(f"{type(backbone).__name__} is not a transformers model class")


def clean_config(backbone: PreTrainedModel):
    config = copy.deepcopy(backbone.config)
    if hasattr(config, "adapters"):  # `adapters` may record its setup on the config
        delattr(config, "adapters")
    return config


_REFERENCE_KEYS: dict[tuple[type, str], frozenset] = {}


def _reference_keys(backbone: PreTrainedModel) -> frozenset:
    """State-dict names of a plain model of this class and config (built on the meta device: no memory)."""
    cls, config = plain_class(backbone), clean_config(backbone)
    key = (cls, config.to_json_string())
    if key not in _REFERENCE_KEYS:
        with torch.device("meta"):
            _REFERENCE_KEYS[key] = frozenset(cls(config).state_dict())
    return _REFERENCE_KEYS[key]


def _plain_name(name: str) -> str:
    if name.startswith(_PEFT_PREFIX):
        name = name[len(_PEFT_PREFIX) :]
    return name.replace(".base_layer.", ".")


def base_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The shared base weights under plain transformers names (as ``AutoModel.from_pretrained`` names them).

    Adapter, LoRA and PAL weights, PEFT prefixes and per-task tops and heads are left out. The tensors
    share storage with the model: clone before changing them.
    """
    backbone = backbone_of(model)
    expected = _reference_keys(backbone)
    out: dict[str, torch.Tensor] = {}
    for name, tensor in backbone.state_dict().items():
        plain = _plain_name(name)
        if plain not in expected:
            continue  # an adapter / LoRA / PAL weight, or an alias such as adapters' prompt_tuning embeddings
        if plain in out:
            raise ConfigError(f"two weights of {type(backbone).__name__} map to the base name {plain!r}")
        out[plain] = tensor
    if not out:
        raise ConfigError(f"no base weights found in {type(backbone).__name__}")
    return out


def _tensor_bytes(tensor: torch.Tensor) -> memoryview:
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy())  # a byte view works for every dtype (bf16 too)


def fingerprint(state_dict: Mapping[str, torch.Tensor]) -> str:
    """sha256 over the sorted names, dtypes, shapes and raw bytes of the tensors (hex digest)."""
    digest = hashlib.sha256()
    for name in sorted(state_dict):
        tensor = state_dict[name]
        # length-prefixed fields: no two different state dicts can produce the same byte stream
        for field in (name, str(tensor.dtype), repr(tuple(tensor.shape))):
            encoded = field.encode()
            digest.update(struct.pack("<Q", len(encoded)) + encoded)
        data = _tensor_bytes(tensor)
        digest.update(struct.pack("<Q", data.nbytes))
        digest.update(data)
    return digest.hexdigest()


# Names of a method's shared modules in the fingerprinted state (no transformers weight name starts so).
SHARED_PREFIX = "shared_modules."


def shared_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Weights every task shares besides the base model's own (CA-MTL's conditional modules); {} for most
    methods. Exported once with the base. A plain model with CA-MTL adapters has them too (read back with
    ``load_shared_modules``): its fingerprint is then the one its tasks' manifests record."""
    if isinstance(model, MultiTaskModel):
        return model.backend.shared_state(model)
    if isinstance(getattr(backbone_of(model), "ca_mtl", None), CAMTLModules):
        return ca_mtl_shared_state(backbone_of(model))
    return {}


def fingerprinted_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """What identifies a base: its weights, and the method's shared modules (prefixed by ``shared_modules.``)."""
    shared = {SHARED_PREFIX + name: tensor for name, tensor in shared_state_dict(model).items()}
    return {**base_state_dict(model), **shared}


def fingerprint_model(model: nn.Module) -> str:
    """`fingerprint` of the base weights of an encoder (plain, adapters-wrapped, PEFT) or a MultiTaskModel,
    the method's shared modules included (see `fingerprinted_state`)."""
    return fingerprint(fingerprinted_state(model))


def dtype_name(state_dict: Mapping[str, torch.Tensor]) -> str:
    floats = [t.dtype for t in state_dict.values() if t.is_floating_point()]
    return str(floats[0] if floats else torch.float32).replace("torch.", "")


def dtype_of(state: Mapping[str, torch.Tensor]) -> torch.dtype:
    return getattr(torch, dtype_name(state))


# Config fields that say where or how a model was loaded, not what it computes (dtype and attention
# kernels are recorded on their own).
_NOT_IDENTITY = frozenset(
    {
        "_name_or_path",
        "transformers_version",
        "architectures",
        "dtype",
        "torch_dtype",
        "_commit_hash",
        "_attn_implementation",
        "_attn_implementation_autoset",
        "attn_implementation",
        "adapters",
    }
)


def base_config(model: nn.Module) -> dict:
    """The base's model config as JSON values: with its weights and tokenizer, what the base is (a changed
    ``hidden_act`` changes every output while the weights stay the same)."""
    config = clean_config(backbone_of(model)).to_dict()
    kept = {k: v for k, v in config.items() if k not in _NOT_IDENTITY}
    return json.loads(json.dumps(kept, sort_keys=True, default=str))


def base_config_differences(recorded: Mapping, live: Mapping) -> list[str]:
    """Readable lines for the settings of two `base_config` dicts that differ (those both have)."""
    return differences(
        recorded, live, lambda key, a, b: f"{key}: trained with {a!r}, this base has {b!r}", ignored=_NOT_IDENTITY
    )


# A tokenizer fingerprint: the sha256 of each part that decides the token ids, under these names, and
# this format tag. A record without the tag is one of the first format: the digests of the files
# `save_pretrained` wrote (see `_legacy_file_digests`), still accepted where they can be checked.
TOKENIZER_FORMAT = "token-ids/1"
_FORMAT_KEY = "format"
# What a fast tokenizer's backend holds besides these (truncation, padding, decoder) is call state or
# decoding, and is left out.
_BACKEND_PARTS = ("model", "normalizer", "pre_tokenizer", "post_processor", "added_tokens")
_SETTINGS = ("model_max_length", "padding_side", "truncation_side", "model_input_names")
# A slow tokenizer's own settings (its fast twin holds them in the backend parts above).
_SLOW_SETTINGS = (
    "do_lower_case",
    "strip_accents",
    "tokenize_chinese_chars",
    "do_basic_tokenize",
    "never_split",
    "add_prefix_space",
    "keep_accents",
    "remove_space",
    "split_by_punct",
    "vocab_type",
)


def _float32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def _token_parts(tokenizer) -> dict:
    """What decides the ids a tokenizer gives a text, as JSON values: its model (vocabulary, merges,
    pieces), normaliser (lower-casing, accents), pre-tokeniser, post-processor (the special tokens it
    adds), added and special tokens, and its length, padding and truncation sides."""
    if getattr(tokenizer, "is_fast", False):
        backend = json.loads(tokenizer.backend_tokenizer.to_str())
        parts = {name: backend.get(name) for name in _BACKEND_PARTS}
        # `special` marks what decoding skips; matching uses the other flags
        added = [{k: v for k, v in token.items() if k != "special"} for token in parts["added_tokens"] or []]
        parts["added_tokens"] = sorted(added, key=lambda token: token["id"])
        model = parts["model"] or {}
        if model.get("type") == "Unigram":  # float32 scores: a converted file and its reload differ past that
            model["vocab"] = [[piece, _float32(score)] for piece, score in model["vocab"]]
    else:  # a slow tokenizer (the harness loads fast ones; a caller may pass a slow one)
        parts = {
            "model": sorted(tokenizer.get_vocab().items(), key=lambda item: item[1]),
            "added_tokens": sorted((i, str(t)) for i, t in tokenizer.added_tokens_decoder.items()),
            "slow_settings": {k: getattr(tokenizer, k, tokenizer.init_kwargs.get(k)) for k in _SLOW_SETTINGS},
        }
        if hasattr(tokenizer, "sp_model"):  # a SentencePiece model: its pieces' scores decide the splits
            parts["sentencepiece"] = hashlib.sha256(tokenizer.sp_model.serialized_model_proto()).hexdigest()
    parts["special_tokens"] = {}
    for name, value in tokenizer.special_tokens_map.items():
        tokens = [str(token) for token in value] if isinstance(value, (list, tuple)) else [str(value)]
        parts["special_tokens"][name] = [[token, tokenizer.convert_tokens_to_ids(token)] for token in tokens]
    for name in _SETTINGS:
        parts[name] = getattr(tokenizer, name, None)
    return parts


def tokenizer_fingerprint(tokenizer) -> dict[str, str]:
    """sha256 of each part of a tokenizer that decides the token ids (see `_token_parts`), by part name.

    Call state (the max length, stride and truncation of the last call, that tokenizer.json and a
    reloaded tokenizer_config.json carry) and how the files spell things (a special token as a string
    or as an AddedToken dict, a slow vocab.txt or its converted tokenizer.json) are not part of it: a
    tokenizer saved and loaded again, or converted from its slow files, has the same fingerprint.
    """
    return {_FORMAT_KEY: TOKENIZER_FORMAT, **{name: _digest(value) for name, value in _token_parts(tokenizer).items()}}


def _legacy_digest(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix == ".json":
        value = json.loads(data)
        if path.name == "tokenizer.json":
            value.pop("truncation", None)
            value.pop("padding", None)
        data = json.dumps(value, sort_keys=True).encode()
    return hashlib.sha256(data).hexdigest()


def _legacy_file_digests(tokenizer) -> dict[str, str]:
    """The first format: sha256 of each file ``tokenizer.save_pretrained`` writes."""
    with tempfile.TemporaryDirectory() as folder:
        tokenizer.save_pretrained(folder)
        return {path.name: _legacy_digest(path) for path in sorted(Path(folder).iterdir())}


def _legacy_file_is(folder: Path, name: str, digest: str) -> bool:
    path = folder / name
    if Path(name).name != name or not path.is_file():  # a plain file of that folder, nothing else
        return False
    try:
        return _legacy_digest(path) == digest
    except (OSError, ValueError):  # unreadable, or a .json file that is not JSON
        return False


def tokenizer_differences(recorded: Mapping[str, str], tokenizer, folder: Path | None = None) -> list[str]:
    """The parts in which ``tokenizer`` differs from the ``recorded`` `tokenizer_fingerprint`; [] if none.

    A record of the first format (file digests, written before this one) matches when the tokenizer
    saves to the same files, or when ``folder`` (by default the folder the tokenizer was loaded from)
    holds the recorded files: an exported base carries the files its record was taken from.
    """
    if recorded.get(_FORMAT_KEY) == TOKENIZER_FORMAT:
        live = tokenizer_fingerprint(tokenizer)
        return sorted(name for name in set(live) | set(recorded) if live.get(name) != recorded.get(name))
    if _FORMAT_KEY in recorded:
        return [f"{_FORMAT_KEY} ({recorded[_FORMAT_KEY]!r}: recorded by a newer pals_adapters; upgrade it)"]
    live = _legacy_file_digests(tokenizer)
    if live == recorded:
        return []
    if folder is None and Path(tokenizer.name_or_path).is_dir():
        folder = Path(tokenizer.name_or_path)
    if folder is not None and all(_legacy_file_is(folder, name, digest) for name, digest in recorded.items()):
        return []
    return sorted(name for name in set(live) | set(recorded) if live.get(name) != recorded.get(name))
