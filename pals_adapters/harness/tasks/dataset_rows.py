"""The rows of a dataset-backed task's split in the loaded schema (see `splits`), checked as a file's rows
are; and what an export records of the dataset (its source, revision and each split's fingerprint and
digest), to load the same data later and to say which split changed since."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import datasets

from ...errors import ConfigError, DataError
from .dataset_source import describe, local_folder, open_dataset, select_split
from .file_record import relative_file
from .readers import check_texts_given, text_value
from .row_checks import SHOWN_BAD_ROWS, LabelParser, SkippedRows, features_for, is_test_split
from .row_checks import row_id as read_id
from .spec import TaskSpec

logger = logging.getLogger(__name__)
NO_LABEL = -1  # a ClassLabel's "no label": the Hub's unlabelled test rows


def raw_split(spec: TaskSpec, split: str) -> datasets.Dataset:
    """The task's split of its dataset, as ``datasets`` gives it."""
    return select_split(open_dataset(spec.dataset, spec.data_dir), spec.splits[split], _where(spec))


def _where(spec: TaskSpec) -> str:
    return f"task {spec.name!r}: {describe(spec.dataset)}"


def load_dataset_split(spec: TaskSpec, split: str, skipped: list[SkippedRows] | None = None) -> datasets.Dataset:
    """One split of a dataset-backed task in the loaded schema: each row checked as a file's row is (DataError
    naming the row, or with ``skip_bad_rows`` counted, logged and reported in ``skipped``)."""
    raw = raw_split(spec, split)
    where = f"{_where(spec)} split {spec.splits[split]!r}"
    column = spec.label_column
    kind = raw.features.get(column) if column else None
    names = kind.names if isinstance(kind, datasets.ClassLabel) else None
    values = list(raw[column]) if kind is not None else None
    unlabelled = values is None or all(v is None or (names is not None and v == NO_LABEL) for v in values)
    if unlabelled and not is_test_split(split) and column:
        raise DataError(f"{where}: no labels in column {column!r} (every row -1); a {split} split needs them")
    labelled = not unlabelled
    texts = [list(raw[c]) for c in spec.text_columns]
    ids = list(raw[spec.id_column]) if spec.id_column else None
    label_of = _label_reader(spec, names)
    out: dict[str, list] = {"text_a": [], "text_b": [], "label": [], "idx": [], "id": []}
    bad, other_classes, seen = [], 0, {}
    for row in range(len(raw)):
        try:
            pair = [text_value(t[row], c) for t, c in zip(texts, spec.text_columns)]
            check_texts_given(pair, spec.text_columns)  # as for files: a row without its text is a mistake
            label = label_of(values[row]) if labelled else None
            row_id = read_id(ids[row], spec.id_column) if ids is not None else None
        except ValueError as exc:
            if spec.skip_bad_rows:
                bad.append((row, str(exc)))
                continue
            raise DataError(f"{where}, row {row} (counted from 0, as ids): {exc}") from None
        if label is _OTHER_CLASS:
            other_classes += 1
            continue
        if row_id is not None:
            if row_id in seen:
                raise DataError(
                    f"{where}, row {row} (counted from 0): id {row_id!r} in column {spec.id_column!r} is also the id "
                    f"of row {seen[row_id]}; ids must be unique (they join predictions back to rows)"
                )
            seen[row_id] = row
            out["id"].append(row_id)
        out["text_a"].append(pair[0])
        out["text_b"].append(pair[1] if len(pair) > 1 else "")
        out["label"].append(label)
        out["idx"].append(row)
    if other_classes:
        logger.warning(f"{where}: left out {other_classes} rows of classes not in the task's labels (label_subset)")
    if bad:
        source = f"{describe(spec.dataset)} split {spec.splits[split]!r}"
        report = SkippedRows(spec.name, split, source, len(bad), "row", tuple(bad[:SHOWN_BAD_ROWS]))
        logger.warning(report.describe())
        if skipped is not None:
            skipped.append(report)
    if not out["idx"]:
        raise DataError(f"{where}: no usable rows (of {len(raw)}); check the split and the task's columns")
    if not labelled:
        del out["label"]
    if ids is None:
        del out["id"]
    return datasets.Dataset.from_dict(out, features=features_for(spec, labelled, with_ids=ids is not None))


_OTHER_CLASS = object()  # a class the task left out (label_subset)


def _label_reader(spec: TaskSpec, names: list[str] | None):
    parse = LabelParser(spec)
    if names is None:
        return parse  # plain ints, strings or numbers: as a file's labels
    index = {label: i for i, label in enumerate(spec.labels)}

    def read(value: int):
        if value == NO_LABEL:
            raise ValueError(f"no label (-1) in column {spec.label_column!r}; every row of this split needs one")
        if not 0 <= value < len(names):
            raise ValueError(f"label {value} is outside the column's ClassLabel {names}")
        if names[value] not in index:
            if spec.label_subset:
                return _OTHER_CLASS
            raise ValueError(f"label {names[value]!r} is not one of the task's labels {list(spec.labels)}")
        return index[names[value]]

    return read


# --------------------------------------------------------------------------- provenance


def resolved_revision(split: datasets.Dataset) -> str | None:
    """The commit of a Hub dataset that ``datasets`` loaded: the folder of its cache files is named by the
    commit it prepared them from (None for a local dataset, or where the name is no commit)."""
    for entry in split.cache_files:
        name = Path(entry.get("filename", "")).parent.name
        if len(name) == 40 and all(c in "0123456789abcdef" for c in name):
            return name
    return None


def _digest(data: datasets.Dataset, columns: list[str]) -> str:
    """sha256 of the split's rows in the columns the task reads: what says whether a split changed."""
    digest = hashlib.sha256()
    for batch in data.select_columns(columns).iter(batch_size=4096):
        digest.update(json.dumps(batch, sort_keys=True, default=str).encode())
    return digest.hexdigest()


def _folder_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def _columns(spec: TaskSpec, data: datasets.Dataset) -> list[str]:
    wanted = [*spec.text_columns, spec.label_column, spec.id_column]
    return [c for c in wanted if c and c in data.column_names]


def dataset_record(spec: TaskSpec, seen_from: str | os.PathLike) -> dict[str, Any] | None:
    """Where a dataset-backed task's data came from, for its export: the dataset (a local folder relative to
    ``seen_from`` and its digest; never an absolute path), its configuration and revision (the resolved commit
    where ``datasets`` gives one), and each split's expression, fingerprint and digest. None for other tasks."""
    if spec.dataset is None:
        return None
    source = dict(spec.dataset)  # a local folder as the task file names it, relative to the task file
    if source.get("data_files") is not None and spec.data_dir is not None:  # files given by absolute paths: too
        source["data_files"] = relative_file(source["data_files"], spec.data_dir)
    folder = local_folder(spec)
    if folder is not None:
        try:
            source["folder_from_export"] = Path(os.path.relpath(folder, os.path.abspath(seen_from))).as_posix()
        except ValueError:  # another drive (Windows)
            source["folder_from_export"] = None
        source["folder_sha256"] = _folder_digest(folder) if folder.is_dir() else None
    splits, revision = {}, None
    try:
        loaded = open_dataset(spec.dataset, spec.data_dir)
    except ConfigError as exc:  # the data is gone (an export of an old run): the model still exports
        logger.warning(f"{exc}; the export records where the data came from, not its splits' fingerprints")
        return {"source": source, "resolved_revision": None, "splits": {}}
    for split, expression in spec.splits.items():
        data = select_split(loaded, expression, _where(spec))
        revision = revision or resolved_revision(data)
        splits[split] = {
            "split": expression,
            "rows": len(data),
            "fingerprint": data._fingerprint,
            "sha256": _digest(data, _columns(spec, data)),
        }
    return {"source": source, "resolved_revision": revision, "splits": splits}


def pinned(spec: TaskSpec, record: dict[str, Any] | None) -> TaskSpec:
    """The task loading the dataset at the commit it was trained on (where the export recorded one)."""
    revision = (record or {}).get("resolved_revision")
    if spec.dataset is None or not revision or spec.dataset.get("local"):
        return spec
    return replace(spec, dataset={**spec.dataset, "revision": revision})


def changed_splits(spec: TaskSpec, record: dict[str, Any] | None, splits: list[str]) -> list[str]:
    """Notes on the ``splits`` of a dataset-backed task whose rows differ from the ones recorded at export."""
    recorded = (record or {}).get("splits") or {}
    notes = []
    for split in splits:
        if split not in recorded or split not in spec.splits:
            continue
        data = raw_split(spec, split)
        if _digest(data, _columns(spec, data)) != recorded[split].get("sha256"):
            notes.append(
                f"task {spec.name!r}: split {spec.splits[split]!r} ({split}) of {describe(spec.dataset)} differs from "
                "the one recorded at export: results are of the data as it is now"
            )
    return notes
