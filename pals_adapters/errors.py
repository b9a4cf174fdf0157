"""Exceptions raised by pals_adapters; each message says what to fix."""


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
