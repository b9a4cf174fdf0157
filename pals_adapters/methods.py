"""The ways of adding task-specific parameters that the harness compares, by name.

A method name may carry overrides in the `adapters` string syntax, e.g.
``"pals[hidden_size_aug=64]"`` or ``"houlsby[reduction_factor=32]"``; for ``peft-lora``
the overrides go to ``peft.LoraConfig`` (``"peft-lora[r=16]"``).
"""

import ast
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from .config import PALS_PRESETS
from .errors import ConfigError, UnknownNameError

BASE_MODES = ("frozen", "finetune")


@dataclass(frozen=True)
class Method:
    """One row of the comparison.

    kind: ``"adapters"`` (an `adapters` config per task), ``"peft"`` (a PEFT LoRA per task),
    ``"heads"`` (only the task heads are per task) or ``"top"`` (per-task layers above the encoder).
    """

    name: str
    kind: str
    adapter_config: Optional[str] = None  # adapters config string for kind "adapters"
    top: Optional[str] = None  # "pals" or "bert_layer" for kind "top"
    allows_frozen_base: bool = True
    overrides: Dict[str, Any] = field(default_factory=dict, hash=False)

    def adapters_config(self) -> str:
        """The config string handed to ``model.add_adapter`` (overrides included)."""
        if not self.overrides:
            return self.adapter_config
        kvs = ",".join(f"{k}={v!r}" for k, v in self.overrides.items())
        return f"{self.adapter_config}[{kvs}]"


METHODS = {
    **{name: Method(name, "adapters", adapter_config=name) for name in PALS_PRESETS},
    "houlsby": Method("houlsby", "adapters", adapter_config="double_seq_bn"),
    "lora": Method("lora", "adapters", adapter_config="lora"),
    "peft-lora": Method("peft-lora", "peft"),
    "full": Method("full", "heads", allows_frozen_base=False),
    "shared": Method("shared", "heads"),
    "top-pals": Method("top-pals", "top", top="pals"),
    "top-layer": Method("top-layer", "top", top="bert_layer"),
}

_NAME_WITH_OVERRIDES = re.compile(r"^\s*(?P<name>[\w\-]+)\s*(\[(?P<kvs>.*)\])?\s*$")


def get_method(spec: str) -> Method:
    """``"pals"`` or ``"pals[hidden_size_aug=64]"`` -> `Method`; unknown names list the valid ones."""
    match = _NAME_WITH_OVERRIDES.match(spec)
    if not match:
        raise ConfigError(f"method {spec!r}: write it as NAME or NAME[key=value,...]")
    name = match.group("name")
    if name not in METHODS:
        raise UnknownNameError("method", name, METHODS)
    overrides = {}
    if match.group("kvs"):
        try:
            overrides = ast.literal_eval("{" + re.sub(r"(\w+)\s*=", r"'\1':", match.group("kvs")) + "}")
        except (ValueError, SyntaxError) as err:
            raise ConfigError(f"method {spec!r}: overrides must be key=value pairs of Python literals") from err
        if METHODS[name].kind in ("heads",):
            raise ConfigError(f"method {spec!r}: '{name}' takes no settings")
    return Method(**{**METHODS[name].__dict__, "overrides": overrides})


def check_base_mode(method: Method, base: str) -> None:
    """The base is either frozen or fine-tuned jointly; some methods only make sense one way."""
    if base not in BASE_MODES:
        raise UnknownNameError("base mode", base, BASE_MODES)
    if base == "frozen" and not method.allows_frozen_base:
        raise ConfigError(
            f"method '{method.name}' fine-tunes every weight and contradicts --base frozen; "
            "use --base finetune, or method 'shared' to train only the heads"
        )
