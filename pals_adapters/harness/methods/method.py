"""`Method`: one row of the comparison (a name, its backend, its settings), and the base modes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...errors import ConfigError, UnknownNameError
from ...presets import RENAMED_PRESETS

BASE_MODES = ("frozen", "finetune")
# The papers' baseline of one fine-tuned model per task: a run trains one task (as `shared`, fine-tuned);
# `pals-bench compare` trains one such run per task.
SEPARATE = "separate"

# Old spelling -> method name; accepted where users type a method (with a warning, until 0.3) and read
# silently from what older runs wrote (export manifests, run folders, benchmark caches).
OLD_NAMES = {
    # release 0.1 (and its benchmarks)
    "peft-lora": "peft_lora",
    "top-pals": "attention_on_top",
    "top-layer": "layer_on_top",
    "top_proj_attn": "attention_on_top",
    "top_bert_layer": "layer_on_top",
    "ca-mtl": "ca_mtl",  # the spelling of the CA-MTL paper
    # release 0.2: `top_pals` read like the preset `pals_top`
    "top_pals": "attention_on_top",
    "top_layer": "layer_on_top",
    # `full` trained one shared encoder with per-task heads, which is `shared` fine-tuned; the papers'
    # one-model-per-task baseline is `separate`
    "full": "shared",
    **RENAMED_PRESETS,  # the PAL presets are methods too
}


def current_name(spec: str) -> str:
    """A method name or spec (``"top_pals[...]"``) as written before a rename -> in its current spelling,
    silently: for names read back from files that older runs wrote. Anything else comes back unchanged."""
    if not isinstance(spec, str):
        return spec
    name, bracket, rest = spec.partition("[")
    new = OLD_NAMES.get(name.strip())
    return spec if new is None else new + bracket + rest


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


def check_base_mode(method: Method, base: str) -> None:
    """The base is either frozen or fine-tuned jointly; some methods only make sense one way."""
    if base not in BASE_MODES:
        raise UnknownNameError("base mode", base, BASE_MODES)
    if base == "frozen" and not method.allows_frozen_base:
        raise ConfigError(
            f"method '{method.name}' fine-tunes every weight and contradicts --base frozen; "
            "use --base finetune, or method 'shared' to train only the heads"
        )
