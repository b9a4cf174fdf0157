"""What an export may say about the machine it was written on: names, never local absolute paths.

A task folder is made to be handed on (uploaded, copied to a colleague): the base it needs is named by
its hub id where one is known, else by the name it was given (a local folder by its own name), and a
run's settings name local folders by their name only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..methods.model import BUNDLED_MODEL

# The hub id of the model a bundled package holds (what a colleague downloads to get the same weights).
BUNDLED_HUB_IDS = {BUNDLED_MODEL: "sentence-transformers/all-MiniLM-L6-v2"}


def is_local_path(name: str) -> bool:
    """Whether ``name`` reads as a filesystem path rather than a hub id (``org/model``) or a plain name."""
    return os.path.isabs(name) or name.startswith(("./", "../", "~")) or os.path.isdir(name)


def shared_base_name(name: str | None) -> str | None:
    """The base's name in shared files: its hub id where known (a bundled model's), else the name as given,
    a local folder by its last component (never a path of this machine)."""
    if not name:
        return None
    if name in BUNDLED_HUB_IDS:
        return BUNDLED_HUB_IDS[name]
    if is_local_path(name):
        return Path(os.path.normpath(os.path.expanduser(name))).name or None
    return name


def hub_model_id(name: str | None) -> str | None:
    """The base's hub model id, or None where it came from a local folder (the hub takes only ids)."""
    if not name or (name not in BUNDLED_HUB_IDS and is_local_path(name)):
        return None
    return BUNDLED_HUB_IDS.get(name, name)


def _shared_value(value: Any) -> Any:
    if isinstance(value, str) and os.path.isabs(value):
        return Path(value).name
    if isinstance(value, os.PathLike):
        return _shared_value(os.fspath(value))
    if isinstance(value, (list, tuple)):
        return type(value)(_shared_value(v) for v in value)
    if isinstance(value, Mapping):
        return {k: _shared_value(v) for k, v in value.items()}
    return value


def shared_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """A run's settings as a shared card shows them: local folders by their name (``/home/me/glue`` ->
    ``glue``), the model by `shared_base_name`."""
    shared = {key: _shared_value(value) for key, value in settings.items()}
    if isinstance(settings.get("model"), str):
        shared["model"] = shared_base_name(settings["model"])
    return shared


def data_source_name(glue_dir: str | os.PathLike | None) -> str | None:
    """The GLUE folder a run scored on, as the manifest records it: by its name (``pals-bench evaluate``
    takes the folder with ``--glue-dir`` or ``GLUE_DIR``)."""
    return Path(glue_dir).name if glue_dir else None
