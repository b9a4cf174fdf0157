"""The methods the harness compares, by name, and how a name with settings is read.

A method name may carry settings in the `adapters` string syntax, e.g. ``"pals[hidden_size_aug=64]"``
or ``"houlsby[reduction_factor=32]"``; for ``peft_lora`` they go to ``peft.LoraConfig``
(``"peft_lora[r=16]"``). Each method belongs to one backend (see `pals_adapters.harness.backends`),
which checks the settings before anything is built.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import warnings
from dataclasses import dataclass, field
from typing import Any

from ..pals import PALS_PRESETS
from ..errors import ConfigError, UnknownNameError
from .backends import get_backend

BASE_MODES = ("frozen", "finetune")


@dataclass(frozen=True)
class Method:
    """One row of the comparison.

    kind: the backend that adds the task parameters: ``"adapters"`` (an `adapters` config per task),
    ``"peft"`` (a PEFT LoRA per task), ``"heads"`` (only the task heads are per task), ``"top"``
    (per-task layers above the encoder) or ``"ca_mtl"`` (a task embedding per task, shared conditional modules).
    default_sampler: the task sampler a run uses when none is given (None: the runner's default).
    """

    name: str
    kind: str
    adapter_config: str | None = None  # adapters config name, for kind "adapters"
    top: str | None = None  # "pals" or "bert_layer", for kind "top"
    allows_frozen_base: bool = True
    overrides: dict[str, Any] = field(default_factory=dict, hash=False)
    default_sampler: str | None = None

    def adapters_config(self) -> str:
        """The config string handed to ``model.add_adapter`` (settings included)."""
        if not self.overrides:
            return self.adapter_config
        kvs = ",".join(f"{k}={v!r}" for k, v in self.overrides.items())
        return f"{self.adapter_config}[{kvs}]"

    @property
    def spec(self) -> str:
        """The method as written on the command line, settings included."""
        if not self.overrides:
            return self.name
        return f"{self.name}[{','.join(f'{k}={v!r}' for k, v in self.overrides.items())}]"


METHODS: dict[str, Method] = {
    **{name: Method(name, "adapters", adapter_config=name) for name in PALS_PRESETS},
    "houlsby": Method("houlsby", "adapters", adapter_config="double_seq_bn"),
    "lora": Method("lora", "adapters", adapter_config="lora"),
    "peft_lora": Method("peft_lora", "peft"),
    "full": Method("full", "heads", allows_frozen_base=False),
    "shared": Method("shared", "heads"),
    "top_pals": Method("top_pals", "top", top="pals"),
    "top_layer": Method("top_layer", "top", top="bert_layer"),
    # CA-MTL (Pilault et al., 2021) trains with MT-Uncertainty sampling, as in the paper
    "ca_mtl": Method("ca_mtl", "ca_mtl", adapter_config="ca_mtl", default_sampler="mt_uncertainty"),
}


def register_method(method: Method) -> Method:
    """Makes ``method`` available by its name (in the CLI, configs and benchmarks). With
    `pals_adapters.harness.register_backend`, a new method family is one new file."""
    existing = METHODS.get(method.name)
    if existing is not None and existing != method:
        raise ConfigError(f"a method named {method.name!r} is already registered: {existing}")
    get_backend(method.kind)  # the backend must exist first
    METHODS[method.name] = method
    return method


# Spellings of release 0.1 (and of its benchmarks); accepted with a warning for one release.
OLD_NAMES = {
    "peft-lora": "peft_lora",
    "top-pals": "top_pals",
    "top-layer": "top_layer",
    "top_proj_attn": "top_pals",
    "top_bert_layer": "top_layer",
    "ca-mtl": "ca_mtl",  # the spelling of the CA-MTL paper
}

_NAME_WITH_SETTINGS = re.compile(r"^\s*(?P<name>[\w\-]+)\s*(\[(?P<kvs>.*)\])?\s*$")


def canonical_name(name: str) -> str:
    """The current spelling of a method name; old spellings warn once per call site."""
    if name in OLD_NAMES:
        new = OLD_NAMES[name]
        warnings.warn(
            f"method name {name!r} is deprecated and will be removed in 0.3; write {new!r}", FutureWarning, stacklevel=3
        )
        return new
    return name


def get_method(spec: str) -> Method:
    """``"pals"`` or ``"pals[hidden_size_aug=64]"`` -> `Method`, with its settings checked by its backend."""
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


def check_base_mode(method: Method, base: str) -> None:
    """The base is either frozen or fine-tuned jointly; some methods only make sense one way."""
    if base not in BASE_MODES:
        raise UnknownNameError("base mode", base, BASE_MODES)
    if base == "frozen" and not method.allows_frozen_base:
        raise ConfigError(
            f"method '{method.name}' fine-tunes every weight and contradicts --base frozen; "
            "use --base finetune, or method 'shared' to train only the heads"
        )
