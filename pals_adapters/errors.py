"""Exceptions raised by pals_adapters; each message says what to fix, and `config_differences`: the
readable lines such a message gives for two configs that should be the same."""

from collections.abc import Callable, Mapping
from typing import Any


class PalsError(Exception):
    """Base class of every error raised on purpose by this package."""


class ConfigError(PalsError, ValueError):
    """A configuration value is invalid or contradicts another one."""


class DataError(PalsError, ValueError):
    """A data file or row cannot be used (the message names file and row)."""


class UnknownNameError(PalsError, ValueError):
    """A task, method, preset or strategy name is not known (the message lists the valid ones)."""

    def __init__(self, kind: str, name, valid):
        self.kind, self.name, self.valid = kind, name, [str(v) for v in valid]
        super().__init__(f"unknown {kind} {name!r}; choose one of: {', '.join(self.valid)}")

    def __reduce__(self):  # keep it picklable (e.g. across DataLoader worker processes)
        return type(self), (self.kind, self.name, self.valid)


class UnsupportedModelError(PalsError, ValueError):
    """The model architecture cannot carry PAL adapters."""


class UnsupportedOperationError(PalsError, NotImplementedError):
    """An `adapters` operation that PAL adapters cannot support (e.g. merging into the model weights)."""


class AdapterLoadError(PalsError, ValueError):
    """Adapter weights do not match the model they are loaded into; nothing was loaded."""


class IntegrityError(AdapterLoadError):
    """An exported file is missing, corrupted, truncated, unsafe or belongs to another task (the message names it)."""


def config_differences(
    left: Mapping,
    right: Mapping,
    line: Callable[[str, Any, Any], str] = lambda key, a, b: f"{key}: {a!r} vs {b!r}",
    *,
    every_key: bool = False,
    ignored=(),
    prepare: Callable[[Any, Any], tuple[Any, Any]] | None = None,
) -> list[str]:
    """One ``line(key, a, b)`` per setting whose values differ, by key: the keys both configs have (all
    keys, missing values as None, with ``every_key``), but ``ignored``; ``prepare`` puts each pair of
    values in the form they are compared and shown in."""
    keys = set(left) | set(right) if every_key else set(left) & set(right)
    lines = []
    for key in sorted(keys):
        if key in ignored:
            continue
        a, b = left.get(key), right.get(key)
        if prepare is not None:
            a, b = prepare(a, b)
        if a != b:
            lines.append(line(key, a, b))
    return lines
