"""Tasks whose data is a `datasets` dataset: a name on the Hub with its configuration, a local folder laid out
as a Hub dataset repository, or a folder written by ``DatasetDict.save_to_disk``.

A task file names one with ``dataset: {path, name, revision, data_dir, data_files}`` (what
``datasets.load_dataset`` takes) or ``dataset: {from_disk: FOLDER}``, and its splits with ``splits:
{train: ..., validation: ..., test: ...}`` (a split of the dataset, or a slice such as ``train[:90%]``).
This module opens the dataset and selects a split; `dataset_tasks` builds and checks the task,
`dataset_rows` reads its rows and records where they came from.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError

if TYPE_CHECKING:  # imported where a dataset is opened: a task's spec is read without it
    import datasets

LOAD_KEYS = ("path", "name", "revision", "data_dir", "data_files")  # passed to datasets.load_dataset
DISK_KEY = "from_disk"
DEFAULT_SPLITS = ("train", "validation", "test")


def check_source(dataset: Any, where: str) -> None:
    """Refuses a ``dataset:`` entry that names no dataset, or names it with unknown keys (ConfigError)."""
    if not isinstance(dataset, dict) or not dataset:
        raise ConfigError(
            f"{where}: dataset must be a mapping such as {{path: NAME, name: CONFIG}} or {{from_disk: DIR}}"
        )
    keys = set(dataset) - {"local"}  # "local" is added when the task is built
    if DISK_KEY in keys:
        if keys != {DISK_KEY}:
            raise ConfigError(
                f"{where}: dataset {{from_disk: ...}} takes no other key, got {sorted(keys - {DISK_KEY})}"
            )
    elif "path" not in keys:
        raise ConfigError(
            f"{where}: dataset needs `path` (a Hub id or a folder) or `from_disk` (a save_to_disk folder)"
        )
    unknown = sorted(keys - {*LOAD_KEYS, DISK_KEY})
    if unknown:
        raise ConfigError(f"{where}: dataset key {unknown[0]!r} is not known; use {', '.join(LOAD_KEYS)} or {DISK_KEY}")
    for key in ("path", "name", "revision", "data_dir", DISK_KEY):
        value = dataset.get(key)
        if value is not None and (not isinstance(value, str) or not value):
            raise ConfigError(f"{where}: dataset {key} must be a non-empty string, got {value!r}")
    files = dataset.get("data_files")
    if files is not None and not isinstance(files, (str, list, dict)):
        raise ConfigError(f"{where}: dataset data_files must be a file, a list or a mapping split -> files")


def normalise_source(dataset: dict, base: Path, where: str) -> dict:
    """The ``dataset:`` entry as a task records it: a local folder relative to ``base`` (the task file's folder),
    so that it moves with it, and marked ``local``; a Hub id as given."""
    check_source(dataset, where)
    source = {k: v for k, v in dataset.items() if v is not None and k != "local"}
    key = DISK_KEY if DISK_KEY in source else "path"
    folder = _absolute(base, source[key])
    if key == DISK_KEY and not folder.is_dir():
        raise ConfigError(
            f"{where}: dataset from_disk {source[key]!r}: no folder {folder}; give the save_to_disk folder"
        )
    if folder.exists():
        if source.get("revision") is not None:  # a folder on this disk has no commits to choose between
            raise ConfigError(
                f"{where}: dataset revision {source['revision']!r} applies to a Hub dataset, but {source[key]!r} is "
                f"the local folder {folder}: remove revision (or name the Hub id, with no folder of that name here)"
            )
        source[key] = Path(os.path.relpath(folder, base)).as_posix()
        source["local"] = True
    elif _looks_like_a_path(source[key]):
        raise ConfigError(f"{where}: dataset path {source[key]!r}: no such folder {folder}")
    return source


def _absolute(base: Path, path: str) -> Path:
    return Path(os.path.normpath(base / os.path.expanduser(path)))


def _looks_like_a_path(path: str) -> bool:
    # a Hub id is NAME or OWNER/NAME; anything else that names no folder was meant as one
    return path.startswith((".", "/", "~", "\\")) or path.count("/") > 1


def local_folder(spec) -> Path | None:
    """The folder of a task's local dataset (None for a Hub dataset or a task of files)."""
    source = getattr(spec, "dataset", None)
    if not source or not source.get("local"):
        return None
    return _absolute(Path(spec.data_dir or "."), source.get(DISK_KEY) or source["path"])


def hub_id(source: dict | None) -> str | None:
    """The Hub id of a task's dataset (None for a local folder, a save_to_disk folder, a builder of files)."""
    if not source or source.get("local") or DISK_KEY in source or source["path"] in _packaged_builders():
        return None
    return source["path"]


def describe(source: dict) -> str:
    """The dataset in words for messages: ``tweet_eval (configuration sentiment)``, ``folder data/reviews``."""
    if DISK_KEY in source:
        return f"save_to_disk folder {source[DISK_KEY]}"
    what = f"dataset folder {source['path']}" if source.get("local") else f"dataset {source['path']}"
    return what + (f" (configuration {source['name']})" if source.get("name") else "")


# --------------------------------------------------------------------------- opening


_OPENED: dict[tuple, datasets.DatasetDict] = {}  # the datasets this process opened, by source and folder state
_KEEP_OPENED = 8


def open_dataset(source: dict, data_dir: str | os.PathLike | None) -> datasets.DatasetDict:
    """All splits of the dataset (``datasets`` caches what it downloads and prepares; a local folder is opened
    again when a file in it changed); ConfigError naming the configurations when the dataset or configuration
    is unknown."""
    base = Path(data_dir or ".")
    key = (json.dumps(source, sort_keys=True), str(base), _folder_state(base, source))
    if key not in _OPENED:
        while len(_OPENED) >= _KEEP_OPENED:
            _OPENED.pop(next(iter(_OPENED)))
        _OPENED[key] = _open(source, base)
    return _OPENED[key]


def _folder_state(base: Path, source: dict) -> tuple:
    """What says whether a local dataset's files changed: each file's name, size and modification time."""
    if source.get("local") or DISK_KEY in source:
        folder = _absolute(base, source.get(DISK_KEY) or source["path"])
        files = sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []
    elif source["path"] in _packaged_builders() and source.get("data_files"):
        named = _files_from(base, source["data_files"])
        named = named.values() if isinstance(named, dict) else [named]
        files = [Path(f) for group in named for f in ([group] if isinstance(group, str) else group)]
        files = [p for p in files if p.is_file()]
    else:
        return ()  # a Hub dataset: datasets keeps it as it downloaded it
    return tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files)


def _open(source: dict, base: Path) -> datasets.DatasetDict:
    import datasets

    where = describe(source)
    if DISK_KEY in source:
        folder = _absolute(base, source[DISK_KEY])
        try:
            loaded = datasets.load_from_disk(str(folder))
        except FileNotFoundError as exc:
            raise ConfigError(f"{where}: not a folder written by save_to_disk ({exc})") from None
        if not isinstance(loaded, datasets.DatasetDict):
            raise ConfigError(
                f"{where} holds one Dataset, not a DatasetDict: save a DatasetDict({{'train': ..., 'validation': "
                "...}}) so that the task can name its splits"
            )
        return loaded
    kwargs = {key: source[key] for key in LOAD_KEYS if source.get(key) is not None}
    if source.get("local"):
        kwargs["path"] = str(_absolute(base, source["path"]))
        # datasets keys its cache of a folder with a README's configs by the README alone: an edited file
        # would load as it was. A local folder is read again each time (it is on this disk anyway).
        kwargs["download_mode"] = datasets.DownloadMode.FORCE_REDOWNLOAD
        kwargs["verification_mode"] = datasets.VerificationMode.NO_CHECKS  # sizes as cached before: not a check
    elif isinstance(kwargs.get("data_files"), (str, list, dict)) and kwargs["path"] in _packaged_builders():
        kwargs["data_files"] = _files_from(base, kwargs["data_files"])  # files of a task file: beside it
    try:
        loaded = datasets.load_dataset(**kwargs)
    except (FileNotFoundError, ValueError) as exc:
        raise ConfigError(f"{where}: {_first_line(exc)}{_configurations(kwargs)}") from None
    except Exception as exc:  # an unreachable Hub, a file datasets cannot read
        hint = (
            "" if source.get("local") else f"; as a Hub id (there is no folder {source['path']} beside the task file)"
        )
        raise ConfigError(f"{where}: cannot load it{hint} ({type(exc).__name__}: {_first_line(exc)})") from None
    if not isinstance(loaded, datasets.DatasetDict):  # a builder without splits gives one Dataset
        raise ConfigError(f"{where}: datasets gave one Dataset without splits; name the split files in data_files")
    return loaded


def _packaged_builders() -> set[str]:
    from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES  # the builders: csv, json, parquet ...

    return set(_PACKAGED_DATASETS_MODULES)


def _files_from(base: Path, files: Any) -> Any:
    if isinstance(files, str):
        return str(_absolute(base, files))
    if isinstance(files, list):
        return [_files_from(base, f) for f in files]
    return {split: _files_from(base, f) for split, f in files.items()}


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _configurations(kwargs: dict) -> str:
    """The dataset's configurations, as ``datasets`` can list them ("" when it cannot)."""
    import datasets

    try:
        names = datasets.get_dataset_config_names(kwargs["path"], revision=kwargs.get("revision"))
    except Exception:  # an unknown dataset has no configurations to list
        return "; check the dataset's name (a Hub id, or a folder relative to the task file)"
    return f"; its configurations: {', '.join(names)} (set dataset name to one of them)" if names else ""


# --------------------------------------------------------------------------- one split


def select_split(loaded: datasets.DatasetDict, expression: str, where: str) -> datasets.Dataset:
    """The split a task names: a split of the dataset, or a slice of one (``train[:90%]``, ``test[10:20]``)."""
    import datasets

    try:
        instruction = datasets.ReadInstruction.from_spec(expression)
    except (AssertionError, ValueError) as exc:
        raise ConfigError(f"{where}: split {expression!r} is not a split or slice ({_first_line(exc)})") from None
    sizes = {name: len(data) for name, data in loaded.items()}
    unknown = [rel.splitname for rel in instruction._relative_instructions if rel.splitname not in sizes]
    if unknown:
        raise ConfigError(f"{where}: no split {unknown[0]!r}; its splits: {', '.join(sizes)}")
    parts = []
    for part in instruction.to_absolute(sizes):
        if part.from_ >= part.to:  # train[5:3], or a slice past the split's end: no rows
            raise ConfigError(
                f"{where}: split {expression!r} selects no rows ({part.splitname} has {sizes[part.splitname]}; the "
                f"slice gives rows {part.from_} to {part.to}); give a slice that holds rows, e.g. "
                f"{part.splitname}[:{sizes[part.splitname]}]"
            )
        whole = loaded[part.splitname]
        parts.append(whole if (part.from_, part.to) == (0, len(whole)) else whole.select(range(part.from_, part.to)))
    return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
