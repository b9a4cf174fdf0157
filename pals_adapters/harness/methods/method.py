"""`Method`: one row of the comparison (a name, its backend, its settings), and the base modes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...errors import ConfigError, UnknownNameError

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


def check_base_mode(method: Method, base: str) -> None:
    """The base is either frozen or fine-tuned jointly; some methods only make sense one way."""
    if base not in BASE_MODES:
        raise UnknownNameError("base mode", base, BASE_MODES)
    if base == "frozen" and not method.allows_frozen_base:
        raise ConfigError(
            f"method '{method.name}' fine-tunes every weight and contradicts --base frozen; "
            "use --base finetune, or method 'shared' to train only the heads"
        )
