"""Request files (what to predict) and answer files (the predictions): reading, checking, writing."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from ...errors import ConfigError, DataError
from ..export.manifest import read_task_manifest
from ..export.read import task_folders, task_spec_of
from ..tasks.readers import iter_records
from ..tasks.spec import TaskSpec
from .predictor import ANSWER_FORMATS, REQUEST_FORMATS, Prediction, every_problem, type_name

# --------------------------------------------------------------------------- request files


def request_id(value, where: str):
    """A request's id as given (a string or a whole number), or None when it has none."""
    if value is None or value == "":
        return None
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise DataError(f"{where}: 'id' must be a string or a whole number, found {type_name(value)}; quote it")


def read_requests(path: str | os.PathLike) -> list[dict]:
    """Requests from a CSV / TSV / JSON Lines file with ``task``, ``text`` and (for pair tasks) ``text_b``,
    and an optional ``id``. Each JSON Lines record stands alone (single and pair tasks mix; any may lack
    ``text_b`` or ``id``); in CSV / TSV an empty cell is a missing value. Every given id is kept; a request
    without one gets its position in the file (0 for the first request). Ids must be unique."""
    path = Path(path)
    fmt = REQUEST_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise DataError(f"{path}: name the file .csv, .tsv or .jsonl so that its format is known")
    columns, rows, unit = iter_records(path, fmt, True, None)
    if fmt != "jsonl":
        missing = [name for name in ("task", "text") if name not in columns]
        if missing:
            raise DataError(
                f"{path}: missing column {missing[0]!r}; columns found: {', '.join(columns)}; requests need "
                "task, text, text_b (pair tasks) and optionally id"
            )
    requests, problems = [], []
    for position, row in rows:
        where = f"{path}, {unit} {position}"
        if fmt == "jsonl":
            values = {name: row.get(name) for name in ("id", "task", "text", "text_b")}
        else:
            values = {name: row[columns.index(name)] if name in columns else None for name in ("id", "task", "text")}
            text_b = row[columns.index("text_b")] if "text_b" in columns else ""
            values["text_b"] = text_b or None
        try:
            given = request_id(values.pop("id"), where)
        except DataError as err:  # every bad line is said at once, not only the first
            problems.append(str(err))
            continue
        requests.append({"id": len(requests) if given is None else given, **values, "where": where})
        requests[-1]["id_given"] = given is not None
    if problems:
        raise DataError(every_problem(problems, "requests"))
    if not requests:
        raise DataError(f"{path}: no requests (only a header)")
    check_unique_ids(requests)
    for request in requests:
        del request["id_given"]
    return requests


def check_unique_ids(items: list[dict], what: str = "requests") -> None:
    """Refuses two ``items`` (dicts with ``id``, ``id_given`` and ``where``) with one id (compared as text, as
    a TSV answer shows it): a given id twice, or a missing id numbered as another item's given id."""
    seen: dict[str, dict] = {}
    for item in items:
        first = seen.setdefault(str(item["id"]), item)
        if first is item:
            continue
        if first["id_given"] and item["id_given"]:
            problem = f"id {item['id']!r} is also the id of {first['where']}"
        elif item["id_given"]:
            problem = f"its id {item['id']!r} is the number of {first['where']}, which has no id (its position)"
        else:
            problem = (
                f"it has no id and is numbered {item['id']} (its position), which {first['where']} gives as its id"
            )
        raise DataError(
            f"{item['where']}: {problem}; ids join the answers back to the {what}: give each its own id "
            "(or none at all)"
        )


def served_tasks(exports) -> dict[str, TaskSpec]:
    """The tasks of export folders (or a run's export folder) as trained, from their manifests only."""
    folders = [
        f for item in ([exports] if isinstance(exports, (str, os.PathLike)) else exports) for f in task_folders(item)
    ]
    specs = {}
    for folder in folders:
        spec = task_spec_of(read_task_manifest(folder), folder)
        specs[spec.name] = spec
    return specs


# --------------------------------------------------------------------------- answer files


def answer_format(path: Path, default: str | None = None) -> str:
    """The format of an answers file from its name (.tsv, .csv, .jsonl); ConfigError for any other."""
    fmt = ANSWER_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ConfigError(f"{path}: name the answers file .tsv, .csv or .jsonl (the format it is written in)")
    if default is not None and default != fmt:
        raise ConfigError(f"{path}: the name says {fmt}, --format says {default}; give one of them")
    return fmt


def _text_value(value) -> str:
    if value is None:
        return ""
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def write_table(path: Path, fmt: str, columns: Sequence[str], rows: Sequence[Sequence]) -> None:
    """Writes ``rows`` under ``columns`` at ``path`` in one step (a file beside it, then renamed): TSV and CSV
    with Python's csv writer (a field holding the delimiter, a quote or a line break is quoted, as pandas and
    the csv module read it back), JSON Lines with every value exact. Scores in TSV / CSV have 3 decimals,
    probabilities 4."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", newline="", dir=path.parent, prefix=f".{path.name}.", delete=False
    )
    try:
        with handle:
            if fmt == "jsonl":
                for row in rows:
                    handle.write(json.dumps(dict(zip(columns, row)), ensure_ascii=False) + "\n")
            else:
                writer = csv.writer(handle, delimiter="\t" if fmt == "tsv" else ",", lineterminator="\n")
                writer.writerow(columns)
                for row in rows:
                    writer.writerow(
                        [
                            f"{v:.4f}" if c == "probability" and v is not None else _text_value(v)
                            for c, v in zip(columns, row)
                        ]
                    )
        os.replace(handle.name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(handle.name)
        raise


def write_answers(
    path: Path, fmt: str, requests: Sequence[Mapping], answers: Sequence[Prediction], tasks: Mapping[str, TaskSpec]
) -> None:
    """The answers to requests: ``id`` (the request's), ``task``, ``prediction`` and ``probability`` (of the
    predicted label; empty for regression); JSON Lines also has ``probabilities`` by label."""
    columns = ["id", "task", "prediction", "probability"] + (["probabilities"] if fmt == "jsonl" else [])
    rows = []
    for request, answer in zip(requests, answers):
        row = [request["id"], answer.task, answer.label, answer.probability]
        if fmt == "jsonl":
            row.append(answer.by_label)
        rows.append(row)
    write_table(path, fmt, columns, rows)


def check_output_place(path: Path, option: str = "--out") -> None:
    """Before any scoring: the folders above ``path`` are folders (or can be made), so the result can be
    written once it is computed."""
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(
                    f"{option} {path}: {parent} is a file, not a folder, so nothing can be written under it; "
                    "give a path in a folder"
                )
            return
