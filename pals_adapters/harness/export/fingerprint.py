"""What the shared base of a multi-task model is: its weights under plain transformers names and their
fingerprint, its model config, and its tokenizer's files. A task export records all three of the
base it needs; loading checks each."""

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

from ...errors import ConfigError
from ..model import MultiTaskModel

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
    methods and for anything but a `MultiTaskModel`. Exported once with the base."""
    return model.backend.shared_state(model) if isinstance(model, MultiTaskModel) else {}


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


def config_differences(recorded: Mapping, live: Mapping) -> list[str]:
    """Readable lines for the settings of two `base_config` dicts that differ (those both have)."""
    return [
        f"{key}: trained with {recorded[key]!r}, this base has {live[key]!r}"
        for key in sorted(set(recorded) & set(live))
        if key not in _NOT_IDENTITY and recorded[key] != live[key]
    ]


def tokenizer_files(tokenizer) -> dict[str, str]:
    """sha256 of each file ``tokenizer.save_pretrained`` writes (vocabulary, normalisation, special tokens,
    padding side ...). JSON files are hashed in a canonical form, without the truncation and padding of the
    last call that tokenizer.json carries."""
    with tempfile.TemporaryDirectory() as folder:
        tokenizer.save_pretrained(folder)
        digests = {}
        for path in sorted(Path(folder).iterdir()):
            data = path.read_bytes()
            if path.suffix == ".json":
                value = json.loads(data)
                if path.name == "tokenizer.json":
                    value.pop("truncation", None)
                    value.pop("padding", None)
                data = json.dumps(value, sort_keys=True).encode()
            digests[path.name] = hashlib.sha256(data).hexdigest()
    return digests
