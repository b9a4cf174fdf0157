"""Load task splits into ``datasets.Dataset`` objects with one uniform schema.

Schema of every loaded split:

* ``text_a`` (string): the first text column, verbatim (no stripping).
* ``text_b`` (string): the second text column; always present, ``""`` for
  single-sentence tasks (use ``spec.is_pair`` to decide whether to tokenise it).
* ``label``: int64 index into ``spec.labels`` (classification) or float64
  (regression). The column is omitted for unlabelled test splits.
* ``idx`` (int64): 0-based data row within the file (header excluded); for the
  hub, the hub's ``idx``. GLUE prediction files use it as their ``index``.
* ``id`` (string): the row's id from the task's ``id_column``; only for tasks that
  name one (unique and non-empty in every file).

Local GLUE TSVs are read with ``csv.QUOTE_NONE`` (quotes are text); user CSVs use
normal CSV quoting. Files are decoded as UTF-8 with an optional byte-order mark.
Bad input raises `DataError` naming the file, the 1-based line and the fix. No row
is skipped unless the task says ``skip_bad_rows``; then each malformed row is
counted, logged (the count and the first lines) and reported (`SkippedRows`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import datasets

from ...errors import ConfigError, DataError, UnknownNameError
from .dataset_rows import load_dataset_split
from .glue import get_task
from .readers import BadRow, MissingKey, check_texts_given, getter, iter_records, text_value
from .row_checks import SHOWN_BAD_ROWS, SkippedRows, features_for, is_test_split
from .row_checks import LabelParser as _LabelParser
from .row_checks import row_id as _row_id
from .spec import TaskSpec

SOURCES = ("auto", "local", "hub")
logger = logging.getLogger(__name__)


def _load_local(spec: TaskSpec, split: str, path: Path, skipped: list[SkippedRows] | None = None) -> datasets.Dataset:
    header = spec.header_for(split)
    skip = spec.skip_bad_rows
    columns, rows, unit = iter_records(path, spec.file_format, header, spec.column_positions, skip_bad=skip)
    getters = [getter(path, columns, spec.file_format, c) for c in spec.text_columns]
    labelled = spec.label_column is not None
    if labelled and is_test_split(split) and spec.label_column not in columns:
        labelled = False  # unlabelled test file (GLUE test sets)
    get_label = getter(path, columns, spec.file_format, spec.label_column) if labelled else None
    get_id = getter(path, columns, spec.file_format, spec.id_column) if spec.id_column else None
    parse = _LabelParser(spec)
    out: dict[str, list] = {"text_a": [], "text_b": [], "label": [], "idx": [], "id": []}
    bad: list[tuple[int, str]] = []
    id_lines: dict[str, int] = {}
    for row_index, (pos, row) in enumerate(rows):
        try:
            if isinstance(row, BadRow):
                raise ValueError(row.problem)
            texts = [text_value(get(row), column) for get, column in zip(getters, spec.text_columns)]
            if spec.glue_folder is None:  # a user's file: an empty text is a mistake in it (GLUE's are as published)
                check_texts_given(texts, spec.text_columns)
            label = parse(get_label(row)) if get_label is not None else None
            row_id = _row_id(get_id(row), spec.id_column) if get_id is not None else None
        except (ValueError, MissingKey) as exc:
            if skip:
                bad.append((pos, str(exc)))
                continue
            raise DataError(f"{path}, {unit} {pos} (data row {row_index + 1}): {exc}") from None
        if row_id is not None:
            if row_id in id_lines:
                raise DataError(
                    f"{path}, {unit} {pos}: id {row_id!r} in column {spec.id_column!r} is also the id of {unit} "
                    f"{id_lines[row_id]}; ids must be unique (they join predictions back to rows)"
                )
            id_lines[row_id] = pos
            out["id"].append(row_id)
        out["text_a"].append(texts[0])
        out["text_b"].append(texts[1] if len(texts) > 1 else "")
        out["label"].append(label)
        out["idx"].append(row_index)
    if bad:
        report = SkippedRows(spec.name, split, str(path), len(bad), unit, tuple(bad[:SHOWN_BAD_ROWS]))
        logger.warning(report.describe())
        if skipped is not None:
            skipped.append(report)
    if not out["idx"]:
        raise DataError(
            f"{path}: no data rows ({f'all {len(bad)} rows malformed' if bad else 'only a header'}); "
            "add rows or remove the split from the task"
        )
    if not labelled:
        del out["label"]
    if get_id is None:
        del out["id"]
    return datasets.Dataset.from_dict(out, features=features_for(spec, labelled, with_ids=get_id is not None))


# --------------------------------------------------------------------------- hub


def _load_hub(spec: TaskSpec, split: str) -> datasets.Dataset:
    if spec.hub is None:
        raise DataError(f"task {spec.name!r} has no hub dataset; load it from local files")
    where = f"hub dataset {spec.hub[0]}/{spec.hub[1]} split {split!r}"
    raw = datasets.load_dataset(*spec.hub, split=split)
    columns = list(spec.hub_columns or spec.text_columns)
    needed = columns + ["label"]
    missing = [c for c in needed if c not in raw.column_names and not (c == "label" and is_test_split(split))]
    if missing:
        raise DataError(f"{where}: missing column {missing[0]!r}; columns found: {', '.join(raw.column_names)}")
    n = len(raw)
    out: dict[str, list] = {
        "text_a": list(raw[columns[0]]),
        "text_b": list(raw[columns[1]]) if len(columns) > 1 else [""] * n,
        "idx": list(raw["idx"]) if "idx" in raw.column_names else list(range(n)),
    }
    labelled = "label" in raw.column_names and not is_test_split(split)
    if labelled:
        names = spec.hub_labels or spec.labels
        parse = _LabelParser(spec)
        labels = []
        for row, value in enumerate(raw["label"], 1):
            try:
                if spec.is_regression:
                    labels.append(parse(value))
                elif not 0 <= value < len(names):
                    raise ValueError(f"label {value} is not a class index in 0..{len(names) - 1}")
                else:
                    labels.append(spec.labels.index(names[value]))
            except ValueError as exc:
                raise DataError(f"{where}, row {row}: {exc}") from None
        out["label"] = labels
    out = {k: out[k] for k in features_for(spec, labelled)}
    return datasets.Dataset.from_dict(out, features=features_for(spec, labelled))


# --------------------------------------------------------------------------- public


def resolve_glue_dir(glue_dir: str | os.PathLike | None = None) -> Path | None:
    """``glue_dir`` if given, else env ``GLUE_DIR``, else None."""
    value = glue_dir if glue_dir is not None else os.environ.get("GLUE_DIR")
    return Path(value) if value else None


def _missing_file(spec: TaskSpec, split: str, path: Path, hint: str) -> DataError:
    if spec.data_dir is not None:
        hint = (
            "if the data folder moved (or this is another machine), give the task file at its new place "
            "(pals-bench evaluate / predict --task-file NEW.yaml; labels and columns as trained)"
        )
    return DataError(f"{path}: missing file for split {split!r} of task {spec.name!r}; {hint}")


def load_split(
    spec: TaskSpec | str,
    split: str,
    glue_dir: str | os.PathLike | None = None,
    source: str = "auto",
    skipped: list[SkippedRows] | None = None,
) -> datasets.Dataset:
    """Load one split with the uniform schema (see module docstring).

    ``source``: "local" reads the task's file; "hub" uses ``datasets.load_dataset(*spec.hub)``;
    "auto" reads the local file when it exists (GLUE: under ``glue_dir`` or env GLUE_DIR),
    else the hub. ``skipped``: a list that receives the `SkippedRows` of a task with ``skip_bad_rows``
    (they are logged either way).
    """
    spec = get_task(spec)
    if source not in SOURCES:
        raise UnknownNameError("source", source, SOURCES)
    if split not in spec.splits:
        raise UnknownNameError(f"split of task {spec.name!r}", split, spec.splits)
    if spec.dataset is not None:  # a task of a `datasets` dataset: the same whatever the source
        return load_dataset_split(spec, split, skipped)
    if source == "hub":
        return _load_hub(spec, split)
    base = resolve_glue_dir(glue_dir)
    if source == "local":
        if spec.data_dir is None and base is None:
            raise ConfigError(f"task {spec.name!r}: source='local' needs a GLUE folder: --glue-dir (or env GLUE_DIR)")
        path = spec.split_path(split, base)
        if not path.is_file():
            raise _missing_file(spec, split, path, "check --glue-dir (or env GLUE_DIR) or the task's file paths")
        return _load_local(spec, split, path, skipped)
    path = spec.split_path(split, base) if (spec.data_dir is not None or base is not None) else None
    if path is not None and path.is_file():
        return _load_local(spec, split, path, skipped)
    if spec.hub is None:
        raise _missing_file(spec, split, path, "check the task's file paths")
    try:
        return _load_hub(spec, split)
    except DataError:
        raise
    except Exception as exc:
        local = f"no local file {path}" if path is not None else "no GLUE folder given (--glue-dir or env GLUE_DIR)"
        raise DataError(
            f"task {spec.name!r} split {split!r}: {local}, and loading {spec.hub[0]}/{spec.hub[1]} "
            f"from the hub failed ({type(exc).__name__}: {exc}); give a GLUE folder with --glue-dir (or env GLUE_DIR)"
        ) from exc


def load_task(
    spec: TaskSpec | str,
    glue_dir: str | os.PathLike | None = None,
    splits: list[str] | tuple[str, ...] | None = None,
    source: str = "auto",
) -> datasets.DatasetDict:
    """Load several splits (default: all of ``spec.splits``) into a DatasetDict."""
    spec = get_task(spec)
    names = list(spec.splits) if splits is None else list(splits)
    return datasets.DatasetDict({s: load_split(spec, s, glue_dir=glue_dir, source=source) for s in names})
