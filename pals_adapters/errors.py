"""Exceptions raised by pals_adapters; each message says what to fix, and `config_differences`: the
readable lines such a message gives for two configs that should be the same. Also the warning for a
renamed name still accepted in its old spelling (`warn_renamed`)."""

import sys
import warnings
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


class RenamedWarning(DeprecationWarning, FutureWarning):
    """A name typed in an old spelling (a PAL preset, a harness method) that still works for one release.

    A `DeprecationWarning` (what ``pytest.warns(DeprecationWarning)`` and test runners look for) and a
    `FutureWarning` (the category of 0.1's renames): shown by default (see the filter below), since the
    people who must act on it are the ones who type the name, not only developers."""


warnings.filterwarnings("default", category=RenamedWarning)  # Python hides DeprecationWarnings outside __main__


def warn_renamed(what: str, old: str, new: str) -> None:
    """Says that ``old`` is the deprecated spelling of ``new`` (removed in 0.3), at the line that named it:
    the first caller outside this package and `adapters` (so one ``add_adapter`` call warns once)."""
    warnings.warn(
        f"{what} name {old!r} is deprecated and will be removed in 0.3; write {new!r}",
        RenamedWarning,
        stacklevel=_outside_caller_level(),
    )


_INNER_PACKAGES = ("pals_adapters", "adapters")  # a warning points past their frames


def _outside_caller_level() -> int:
    frame, level = sys._getframe(2), 2  # the caller of warn_renamed is stacklevel 2
    while frame.f_back is not None and frame.f_globals.get("__name__", "").split(".")[0] in _INNER_PACKAGES:
        frame, level = frame.f_back, level + 1
    return level


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
