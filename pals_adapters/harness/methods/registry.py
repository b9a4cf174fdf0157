"""The methods the harness compares, by name, and how a name with settings is read.

A method name may carry settings in the `adapters` string syntax, e.g. ``"pals[hidden_size_aug=64]"``
or ``"houlsby[reduction_factor=32]"``; for ``peft_lora`` they go to ``peft.LoraConfig``
(``"peft_lora[r=16]"``). Each method belongs to one backend (see `pals_adapters.harness.methods`),
which checks the settings before anything is built.
"""

from __future__ import annotations

import ast
import dataclasses
import re

from ...errors import ConfigError, UnknownNameError, warn_renamed
from ...presets import PALS_PRESET_SETTINGS
from .method import (  # noqa: F401  (public here too)
    BASE_MODES,
    OLD_NAMES,
    SEPARATE,
    Method,
    check_base_mode,
    current_name,
)

METHODS: dict[str, Method] = {
    **{name: Method(name, "adapters", adapter_config=name) for name in PALS_PRESET_SETTINGS},
    "houlsby": Method("houlsby", "adapters", adapter_config="double_seq_bn"),
    "lora": Method("lora", "adapters", adapter_config="lora"),
    "peft_lora": Method("peft_lora", "peft"),
    # one shared encoder with a head per task: fine-tuned with the tasks (--base finetune), or a linear probe
    "shared": Method("shared", "heads"),
    # the papers' baseline, one fine-tuned model per task: a single-task `shared` fine-tuned run per task
    SEPARATE: Method(SEPARATE, "heads", allows_frozen_base=False),
    # the paper's "projected attention on top" and "BERT layer on top" of the encoder (Table 3)
    "attention_on_top": Method("attention_on_top", "top", top="pals"),
    "layer_on_top": Method("layer_on_top", "top", top="bert_layer"),
    # CA-MTL (Pilault et al., 2021) trains with MT-Uncertainty sampling, as in the paper
    "ca_mtl": Method("ca_mtl", "ca_mtl", adapter_config="ca_mtl", default_sampler="mt_uncertainty"),
}


def register_method(method: Method) -> Method:
    """Makes ``method`` available by its name (in the CLI, configs and benchmarks). With
    `pals_adapters.harness.register_backend`, a new method family is one new file."""
    from .backend import get_backend  # backends import torch, which reading a method's name must not

    existing = METHODS.get(method.name)
    if existing is not None and existing != method:
        raise ConfigError(f"a method named {method.name!r} is already registered: {existing}")
    get_backend(method.kind)  # the backend must exist first
    METHODS[method.name] = method
    return method


_NAME_WITH_SETTINGS = re.compile(r"^\s*(?P<name>[\w\-]+)\s*(\[(?P<kvs>.*)\])?\s*$")


def canonical_name(name: str) -> str:
    """The current spelling of a method name a user typed; an old spelling (`OLD_NAMES`) warns with a
    `pals_adapters.errors.RenamedWarning` (use `current_name` for names read back from files)."""
    if name in OLD_NAMES:
        new = OLD_NAMES[name]
        warn_renamed("method", name, new)
        return new
    return name


def get_method(spec: str) -> Method:
    """``"pals"`` or ``"pals[hidden_size_aug=64]"`` -> `Method`, with its settings checked by its backend."""
    from .backend import get_backend

    match = _NAME_WITH_SETTINGS.match(spec) if isinstance(spec, str) else None
    if not match:
        raise ConfigError(f"method {spec!r}: write it as NAME or NAME[key=value,...]")
    name = canonical_name(match.group("name"))
    if name not in METHODS:
        raise UnknownNameError("method", name, METHODS)
    overrides = {}
    if match.group("kvs"):
        try:
            overrides = ast.literal_eval("{" + re.sub(r"(\w+)\s*=", r"'\1':", match.group("kvs")) + "}")
        except (ValueError, SyntaxError) as err:
            raise ConfigError(f"method {spec!r}: settings must be key=value pairs of Python literals") from err
    method = dataclasses.replace(METHODS[name], overrides=overrides)
    get_backend(method.kind).check_settings(method)
    return method
