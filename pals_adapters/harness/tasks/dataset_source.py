"""Tasks whose data is a `datasets` dataset: a name on the Hub with its configuration, a local folder laid out
as a Hub dataset repository, or a folder written by ``DatasetDict.save_to_disk``.

A task file names one with ``dataset: {path, name, revision, data_dir, data_files}`` (what
``datasets.load_dataset`` takes) or ``dataset: {from_disk: FOLDER}``, and its splits with ``splits:
{train: ..., validation: ..., test: ...}`` (a split of the dataset, or a slice such as ``train[:90%]``).
Everything that can be checked without reading every row is checked here, when the task is built: the
dataset and configuration, the splits, the columns and their types, and the label set.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets

from ...errors import ConfigError
from .readers import label_text

LOAD_KEYS = ("path", "name", "revision", "data_dir", "data_files")  # passed to datasets.load_dataset
DISK_KEY = "from_disk"
DEFAULT_SPLITS = ("train", "validation", "test")
_TEXT_TYPES = ("string", "large_string")


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
    if not source.get("local") and DISK_KEY not in source:
        return ()
    folder = _absolute(base, source.get(DISK_KEY) or source["path"])
    files = sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []
    return tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files)


def _open(source: dict, base: Path) -> datasets.DatasetDict:
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
        raise ConfigError(f"{where}: cannot load it ({type(exc).__name__}: {_first_line(exc)})") from None
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
    try:
        names = datasets.get_dataset_config_names(kwargs["path"], revision=kwargs.get("revision"))
    except Exception:  # an unknown dataset has no configurations to list
        return "; check the dataset's name (a Hub id, or a folder relative to the task file)"
    return f"; its configurations: {', '.join(names)} (set dataset name to one of them)" if names else ""


# --------------------------------------------------------------------------- one split


def select_split(loaded: datasets.DatasetDict, expression: str, where: str) -> datasets.Dataset:
    """The split a task names: a split of the dataset, or a slice of one (``train[:90%]``, ``test[10:20]``)."""
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
        whole = loaded[part.splitname]
        parts.append(whole if (part.from_, part.to) == (0, len(whole)) else whole.select(range(part.from_, part.to)))
    return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)


# --------------------------------------------------------------------------- building a task


@dataclass(frozen=True)
class DatasetTaskParts:
    """What a task takes from its dataset: the source as recorded, the split of each role, the labels."""

    source: dict
    splits: dict[str, str]
    labels: tuple[str, ...]


def dataset_task_parts(
    name: str,
    dataset: dict,
    splits: dict[str, str] | None,
    base: Path,
    text_columns: tuple[str, ...],
    label_column: str | None,
    regression: bool,
    labels: tuple[str, ...] | None,
    label_subset: bool,
    id_column: str | None,
) -> DatasetTaskParts:
    """Opens the dataset and checks what the task names of it (ConfigError / DataError before any training)."""
    where = f"task {name!r}"
    source = normalise_source(dataset, base, where)
    where = f"task {name!r}: {describe(source)}"
    loaded = open_dataset(source, base)
    splits = _task_splits(splits, loaded, where)
    chosen = {role: select_split(loaded, expression, where) for role, expression in splits.items()}
    for role, data in chosen.items():
        _check_columns(data, role, splits[role], text_columns, label_column, id_column, where)
    labelled = {role: data for role, data in chosen.items() if label_column in data.column_names}
    if regression:
        for role, data in labelled.items():
            kind = data.features[label_column]
            if not (isinstance(kind, datasets.Value) and (kind.dtype.startswith(("int", "uint", "float")))):
                raise ConfigError(
                    f"{where}: split {splits[role]!r}: regression label column {label_column!r} is {kind}, not a number"
                )
        return DatasetTaskParts(source, splits, ())
    return DatasetTaskParts(source, splits, _task_labels(labelled, label_column, labels, label_subset, where))


def _task_splits(splits: Any, loaded: datasets.DatasetDict, where: str) -> dict[str, str]:
    if splits is None:
        splits = {role: role for role in DEFAULT_SPLITS if role in loaded}
    if not isinstance(splits, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in splits.items()
    ):
        raise ConfigError(f"{where}: splits must map train / validation / test to the dataset's splits, got {splits!r}")
    roles = [r for r in splits if r != "train" and not r.startswith(("validation", "test"))]
    if roles:
        raise ConfigError(f"{where}: splits: {roles[0]!r} is not train, validation(...) or test(...)")
    if "train" not in splits and not any(r.startswith("validation") for r in splits):
        raise ConfigError(
            f"{where} has neither a train nor a validation split (its splits: {', '.join(loaded)}); name them "
            "in the task's splits, e.g. splits: {train: train, validation: dev}"
        )
    return dict(splits)


def _check_columns(data, role, expression, text_columns, label_column, id_column, where) -> None:
    here = f"{where}: split {expression!r}"
    needed = [*text_columns, *([id_column] if id_column else [])]
    if label_column and not role.startswith("test"):
        needed.append(label_column)  # a test split may be unlabelled
    missing = [c for c in needed if c not in data.column_names]
    if missing:
        raise ConfigError(f"{here}: no column {missing[0]!r}; its columns: {', '.join(data.column_names)}")
    for column in text_columns:
        kind = data.features[column]
        if not (isinstance(kind, datasets.Value) and kind.dtype in _TEXT_TYPES):
            raise ConfigError(f"{here}: text column {column!r} holds {kind}, not text; name a column of strings")


def _task_labels(labelled: dict, column: str, labels, label_subset: bool, where: str) -> tuple[str, ...]:
    kinds = {role: data.features[column] for role, data in labelled.items()}
    class_labels = {role: kind for role, kind in kinds.items() if isinstance(kind, datasets.ClassLabel)}
    if not class_labels:  # plain ints or strings: as a file's labels
        if label_subset:
            raise ConfigError(f"{where}: label_subset applies to a ClassLabel column; {column!r} holds plain values")
        if labels is not None:
            return tuple(labels)
        if "train" not in labelled:
            raise ConfigError(f"{where}: labels are required when there is no labelled train split to infer them from")
        return _inferred_labels(labelled["train"], column, where)
    names = {tuple(kind.names) for kind in class_labels.values()}
    if len(names) > 1 or len(class_labels) != len(kinds):
        raise ConfigError(f"{where}: the splits' label columns {column!r} differ ({sorted(map(str, kinds.values()))})")
    names = names.pop()
    for role, data in labelled.items():
        values = [v for v in data.unique(column) if v != -1]  # -1: no label (the Hub's unlabelled test rows)
        outside = sorted(v for v in values if not 0 <= v < len(names))
        if outside:
            raise ConfigError(
                f"{where}: {role} label column {column!r} holds {outside[0]}, outside its ClassLabel {list(names)} "
                f"(0..{len(names) - 1}, -1 for no label)"
            )
    if labels is None:
        return names
    labels = tuple(labels)
    if label_subset:
        stray = [label for label in labels if label not in names]
        if stray:
            raise ConfigError(
                f"{where}: labels {list(labels)} name {stray[0]!r}, not a class of the dataset {list(names)}"
            )
        return labels
    if labels != names:
        raise ConfigError(
            f"{where}: labels {list(labels)} differ from the dataset's ClassLabel names {list(names)}; leave labels "
            "out to take the dataset's, or add `label_subset: true` to keep only these classes in this order"
        )
    return labels


def _inferred_labels(data: datasets.Dataset, column: str, where: str) -> tuple[str, ...]:
    try:
        values = sorted({label_text(v) for v in data.unique(column)} - {""})
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: label column {column!r}: {exc}") from None
    if len(values) < 2:
        raise ConfigError(f"{where}: the train split has fewer than 2 distinct labels {values}; set labels explicitly")
    numbers = {}
    for value in values:
        try:
            numbers[value] = float(value)
        except ValueError:
            return tuple(values)
    return tuple(sorted(values, key=numbers.__getitem__))  # numeric labels in numeric order (2 before 10)
