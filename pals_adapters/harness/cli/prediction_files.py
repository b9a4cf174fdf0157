"""Prediction files of `pals-bench predict`: the ids of a split's rows, the files written, the hint for a task
without the split asked for, and the predictions of one new file (``--file``)."""

from __future__ import annotations

from pathlib import Path

from ...errors import ConfigError
from ..data.batches import tokenize
from ..export.read import task_folders
from ..scoring.evaluation import predict
from ..serving.predictor import decode
from ..serving.request_files import answer_format, check_output_place, check_unique_ids, request_id, write_table
from ..tasks.readers import BadRow, getter, iter_records
from ..tasks.splits import load_split


def row_ids(spec, split: str, data) -> list:
    """The ids of a split's rows for its prediction file: the task's ``id_column`` (loaded with the rows), else
    a user file's own ``id`` column, where a row without an id gets its row number (0 for the first data row;
    the number GLUE's ``index`` is), else the row numbers. Ids must be unique."""
    if "id" in data.column_names:
        return list(data["id"])
    numbers = list(data["idx"])
    if spec.data_dir is None or spec.dataset is not None:  # GLUE, or a dataset: the rows' numbers
        return numbers
    path = spec.split_path(split)
    columns, rows, unit = iter_records(
        path, spec.file_format, spec.header_for(split), spec.column_positions, skip_bad=spec.skip_bad_rows
    )
    if "id" not in columns:
        return numbers
    get = getter(path, columns, spec.file_format, "id")
    given, where = [], []
    for position, row in rows:
        value = None if isinstance(row, BadRow) else (row.get("id") if isinstance(row, dict) else get(row))
        where.append(f"{path}, {unit} {position}")
        given.append(request_id(value, where[-1]))
    requests = [
        {
            "id": number if given[number] is None else given[number],
            "id_given": given[number] is not None,
            "where": where[number],
        }
        for number in numbers
    ]
    check_unique_ids(requests, "rows")
    return [request["id"] for request in requests]


def write_predictions(path: Path, fmt: str, spec, split: str, ids: list, answers: list) -> None:
    """One prediction file: ``id``, ``prediction`` (the label's name, or the score) and ``probability`` (of the
    predicted label), JSON Lines with ``probabilities`` by label name too; a GLUE test split in TSV as GLUE's
    submission server reads it (``index``, ``prediction``)."""
    if spec.glue_folder and split.startswith("test") and fmt == "tsv":  # GLUE's submission format
        write_table(path, fmt, ["index", "prediction"], [[i, a.label] for i, a in zip(ids, answers)])
        return
    columns = ["id", "prediction", "probability"] + (["probabilities"] if fmt == "jsonl" else [])
    rows = [[i, a.label, a.probability] for i, a in zip(ids, answers)]
    if fmt == "jsonl":
        for row, answer in zip(rows, answers):
            row.append(answer.by_label if answer.probabilities else None)
    write_table(path, fmt, columns, rows)


def split_hint(spec, kind: str) -> str:
    """How to give a task the split it lacks: a file to predict, or the split in its task file (``--task-file``
    may add one); a task of a dataset names it in its ``splits``."""
    if spec.dataset is not None:
        where = f"add it to the task's splits in a copy of its task file (splits: {{..., {kind}: SPLIT}})"
    else:
        where = f"add '{kind}: FILE' to the task's entry in a copy of its task file"
    return f"{where} and give that file with --task-file, or predict a file of its own with --file FILE"


def one_task(export) -> Path:
    """The one task folder ``--file`` reads for (a task folder, or an export of one task)."""
    folders = task_folders(export)
    if len(folders) > 1:
        names = ", ".join(f.name for f in folders)
        raise ConfigError(
            f"--file reads rows of one task; {export} holds {names}: give the task's folder (e.g. {folders[0]})"
        )
    return folders[0]


def predict_file(args, load_export) -> None:
    """``predict EXPORT[/TASK] --file FILE``: the task's predictions for every row of a new file (its text
    columns; ids kept), written to ``--out`` (a file .tsv / .csv / .jsonl, or a folder for TASK-FILE.tsv).
    ``load_export``: the command's loader of a task folder (model, tokenizer, task on the file, max length)."""
    if args.split is not None:
        raise ConfigError("--split chooses the tasks' own files; with --file the file is predicted: leave it out")
    task_dir = one_task(args.export)
    out = Path(args.out)
    if out.is_dir() or not out.suffix:
        fmt = args.format or "tsv"
        out = out / f"{task_dir.name}-{Path(args.file).stem}.{fmt}"
    else:
        fmt = answer_format(out, args.format)
    check_output_place(out)
    model, tokenizer, spec, max_length, _ = load_export(task_dir, args)
    data = load_split(spec, "test")
    ids = row_ids(spec, "test", data)
    answers = [
        decode(spec, row) for row in predict(model, spec.name, tokenize(data, spec, tokenizer, max_length), tokenizer)
    ]
    write_predictions(out, fmt, spec, "test", ids, answers)
    print(f"{out}: {len(answers)} predictions of task {spec.name!r} for {args.file}")
