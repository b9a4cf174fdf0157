"""Raw row readers for CSV, TSV and JSON Lines files: rows as they are in the file, with errors
that name the file and line. No task semantics here (see `data` for those).

A row that cannot be read (wrong number of fields, a blank line, a line that is not a JSON object)
is an error, unless the caller asks for ``skip_bad=True``: then a `BadRow` that says what is wrong
stands in its place, so the caller counts and reports it. Problems of the whole file (no header,
not UTF-8, a field over the size limit) are errors either way."""

from __future__ import annotations

import csv
import decimal
import json
import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import DataError


@dataclass(frozen=True)
class BadRow:
    """Stands in for a row that cannot be read (``skip_bad=True``): what is wrong with it."""

    problem: str


def _check_file(path: Path) -> None:
    if not path.is_file():
        raise DataError(
            f"{path}: file not found; check the data folder (--glue-dir or env GLUE_DIR) or the task's file paths"
        )
    if path.stat().st_size == 0:
        raise DataError(f"{path}: file is empty; it needs a header line and data rows")


def _iter_delimited(
    path: Path, fmt: str, header: bool, positions: dict[str, int] | None, skip_bad: bool = False
) -> tuple[list[str], Iterator[tuple[int, list[str] | BadRow]]]:
    """Column names and an iterator of (1-based line, fields) for a TSV/CSV file."""
    _check_file(path)
    delimiter = "\t" if fmt == "tsv" else ","
    quoting = csv.QUOTE_NONE if fmt == "tsv" else csv.QUOTE_MINIMAL
    handle = open(path, encoding="utf-8-sig", newline="")
    reader = csv.reader(handle, delimiter=delimiter, quoting=quoting)

    def fail(exc: Exception, start: int) -> DataError:
        handle.close()
        if isinstance(exc, csv.Error) and "field larger than field limit" in str(exc):
            hint = "an unbalanced quote? check the quotes of that row" if fmt == "csv" else "shorten it"
            return DataError(
                f"{path}, line {start}: a field of the row starting here is longer than "
                f"{csv.field_size_limit():,} characters ({hint}; texts are truncated to "
                f"max_length tokens anyway)"
            )
        if isinstance(exc, UnicodeDecodeError):
            return DataError(f"{path}, line {start}: not UTF-8 ({exc}); re-save the file as UTF-8")
        return DataError(f"{path}, line {start}: cannot parse ({exc}); fix the row")

    if header:
        try:
            first = next(reader, None)
        except (csv.Error, UnicodeDecodeError) as exc:
            raise fail(exc, 1) from None
        if first is None or not any(c.strip() for c in first):
            handle.close()
            raise DataError(f"{path}, line 1: expected a header line with column names, found an empty line")
        columns = [c.strip() for c in first]
        other = {"csv": "\t", "tsv": ","}.get(fmt)
        if len(columns) == 1 and other and other in first[0]:
            handle.close()
            hint = "tsv" if fmt == "csv" else "csv"
            raise DataError(
                f"{path}, line 1: one column {first[0]!r}, but the header holds {other!r}: "
                f"the file looks like {hint.upper()}; set `format: {hint}` for the task"
            )
        dupes = sorted({c for c in columns if columns.count(c) > 1})
        if dupes:
            handle.close()
            raise DataError(f"{path}, line 1: duplicate column name {dupes[0]!r} in header {columns}")
    else:
        width = max(positions.values()) + 1
        by_index = {i: n for n, i in positions.items()}
        columns = [by_index.get(i, f"column_{i}") for i in range(width)]

    def rows() -> Iterator[tuple[int, list[str] | BadRow]]:
        with handle:
            while True:
                start = reader.line_num + 1  # a quoted field may span lines: report where the row began
                try:
                    row = next(reader)
                except StopIteration:
                    return
                except (csv.Error, UnicodeDecodeError) as exc:
                    raise fail(exc, start) from None
                line = reader.line_num
                problem = None
                if not row:
                    problem = "blank line; remove it (blank lines are not skipped)"
                elif len(row) != len(columns):
                    kind = "too few" if len(row) < len(columns) else "too many"
                    span = f" (a row from line {start} to {line}: a quote left open?)" if line > start else ""
                    problem = (
                        f"{kind} fields: expected {len(columns)} ({', '.join(columns)}), found {len(row)}{span}; "
                        f"fix the row (a missing or extra {'tab' if fmt == 'tsv' else 'comma'}?)"
                    )
                if problem is None:
                    yield line, row
                elif skip_bad:
                    yield start, BadRow(problem)
                else:
                    raise DataError(f"{path}, line {start if line > start else line}: {problem}")

    return columns, rows()


def _iter_jsonl(path: Path, skip_bad: bool = False) -> tuple[list[str], Iterator[tuple[int, Any]], str]:
    """Keys of the first record, an iterator of (1-based line or item, record), and "line"/"item"."""
    _check_file(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 ({exc}); re-save the file as UTF-8") from None
    if not text.strip():
        raise DataError(f"{path}: file is empty (only whitespace); it needs one JSON object per line")
    records: list[tuple[int, Any]] = []
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}, line {exc.lineno}: invalid JSON array ({exc.msg})") from None
        records = [(i, item) for i, item in enumerate(items, 1)]
        unit = "item"
    else:
        unit = "line"
        for line, raw in enumerate(text.splitlines(), 1):
            if not raw.strip():
                problem = "blank line; remove it (blank lines are not skipped)"
            else:
                try:
                    records.append((line, json.loads(raw)))
                    continue
                except json.JSONDecodeError as exc:
                    problem = f"invalid JSON ({exc.msg}); each line must be one JSON object"
            if not skip_bad:
                raise DataError(f"{path}, line {line}: {problem}")
            records.append((line, BadRow(problem)))
    for i, (pos, rec) in enumerate(records):
        if not isinstance(rec, (dict, BadRow)):
            problem = f"expected a JSON object with column keys, found {type(rec).__name__}"
            if not skip_bad:
                raise DataError(f"{path}, {unit} {pos}: {problem}")
            records[i] = (pos, BadRow(problem))
    first = next((rec for _, rec in records if isinstance(rec, dict)), None)
    if first is None:
        raise DataError(f"{path}: no records; the file needs at least one JSON object")
    return list(first), iter(records), unit


def iter_records(
    path: Path,
    fmt: str,
    header: bool,
    positions: dict[str, int] | None,
    skip_bad: bool = False,
) -> tuple[list[str], Iterator[tuple[int, Any]], str]:
    """(columns, iterator of (position, row), unit) where a row is a list (delimited) or dict (jsonl),
    or with ``skip_bad`` a `BadRow` in place of a row that cannot be read."""
    if fmt == "jsonl":
        return _iter_jsonl(path, skip_bad)
    columns, it = _iter_delimited(path, fmt, header, positions, skip_bad)
    return columns, it, "line"


def getter(path: Path, columns: list[str], fmt: str, name: str):
    """A function row -> value of column ``name`` (DataError if the file lacks it)."""
    if fmt == "jsonl":
        if name not in columns:
            raise DataError(
                f"{path}: missing column {name!r}; columns found (keys of the first record): "
                f"{', '.join(columns)}; rename the column or fix the task's column names"
            )
        return lambda row: row[name] if name in row else _missing_key(name, row)
    if name not in columns:
        raise DataError(
            f"{path}: missing column {name!r}; columns found: {', '.join(columns)}; "
            f"rename the column or fix the task's column names"
        )
    index = columns.index(name)
    return lambda row: row[index]


class MissingKey(Exception):
    pass


def _missing_key(name: str, row: dict) -> Any:
    raise MissingKey(f"missing key {name!r} (keys found: {', '.join(row)})")


def read_column(
    path: str | os.PathLike, column: str, file_format: str, also_required: tuple[str, ...] = ()
) -> list[str]:
    """Stripped string values of one column of a user file (used to infer label sets).

    ``also_required`` columns must exist too (checked before reading rows).
    """
    path = Path(path)
    columns, rows, unit = iter_records(path, file_format, True, None)
    for name in also_required:
        getter(path, columns, file_format, name)
    get = getter(path, columns, file_format, column)
    values = []
    for pos, row in rows:
        try:
            value = get(row)
        except MissingKey as exc:
            raise DataError(f"{path}, {unit} {pos}: {exc}") from None
        try:
            text = label_text(value)
        except ValueError as exc:
            raise DataError(f"{path}, {unit} {pos}: column {column!r}: {exc}") from None
        if not text:
            raise DataError(f"{path}, {unit} {pos}: empty label in column {column!r}; every row needs a label")
        values.append(text)
    if not values:
        raise DataError(f"{path}: no data rows")
    return values


def label_text(value: Any) -> str:
    """A classification label as the text that names its class. Numbers are written one way, exactly (never
    through a float: 18-digit ids stay distinct), so ``1``, ``1.0``, ``"01"`` and ``"1.0"`` are all the label
    ``"1"``; ``""`` for a missing value (None). ValueError for a value that names no class (NaN, inf, a list,
    an object)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, str):
        if not _NUMBER.fullmatch(value.strip()):
            return value.strip()  # a class name
        number = decimal.Decimal(value.strip())
    elif isinstance(value, (int, float)):
        number = decimal.Decimal(value) if isinstance(value, int) else decimal.Decimal(repr(value))
    else:
        raise ValueError(f"a label must be a string or a number, found {type(value).__name__} {value!r}")
    if not number.is_finite():
        raise ValueError(f"label {value!r} names no class (a missing value?); give every row its label")
    if number == number.to_integral_value():
        return str(int(number))
    return format(number.normalize(), "f")


# Plain decimal numbers and the spellings of NaN / infinity (not Python's "1_000").
_NUMBER = re.compile(r"[+-]?((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|nan|inf|infinity)", re.IGNORECASE)


def text_value(value: Any, column: str) -> str:
    """A text field as it is; anything but a string (null, NaN, a number, a list) is refused."""
    if isinstance(value, str):
        return value
    if value is None:
        raise ValueError(f"text in column {column!r} is null; every row needs its text")
    if isinstance(value, float) and math.isnan(value):
        raise ValueError(f"text in column {column!r} is NaN (a missing value?); every row needs its text")
    raise ValueError(
        f"text in column {column!r} must be a string, found {type(value).__name__} {value!r}; quote it in the file"
    )


def check_texts_given(texts: list[str], columns) -> None:
    """ValueError for an empty or blank text (a row that lost its text, e.g. ``,1``)."""
    for text, column in zip(texts, columns):
        if not text.strip():
            kind = "empty" if not text else "blank (only white space)"
            raise ValueError(
                f"text in column {column!r} is {kind}; every row needs its text (or set skip_bad_rows: true "
                "to leave such rows out, counted)"
            )
