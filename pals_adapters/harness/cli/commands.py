"""The ``pals-bench`` commands: train, evaluate, predict, export, schedule, params."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import torch

from ...errors import ConfigError, PalsError
from ..checks import check_compile_mode
from ..data.batches import tokenize
from ..data.sampling import make_sampler
from ..data.schedule import format_schedule, plot_schedule, schedule
from ..export import EvaluationRecord, load_task, load_tokenizer
from ..export.manifest import read_task_manifest
from ..export.read import task_folders, task_spec_of
from ..methods.accounting import count_method_parameters
from ..scoring.evaluation import evaluate_tasks, predict
from ..scoring.metrics import glue_average
from ..scoring.report import class_table, never_predicted, results_table
from ..serving.add_tasks import taken_from_export
from ..serving.predictor import (
    DEFAULT_MAX_LENGTH,
    MultiTaskPredictor,
    check_max_length,
    check_requests,
    decode,
    usable_positions,
)
from ..serving.request_files import (
    answer_format,
    check_output_place,
    read_requests,
    served_tasks,
    write_answers,
)
from ..tasks.dataset_rows import changed_splits, pinned
from ..tasks.file_record import changed_files, locate_glue_dir, locate_task_files
from ..tasks.splits import load_split
from ..tasks.user_tasks import task_on_file
from ..training.compiling import compile_model
from ..training.export_checkpoint import export_checkpoint
from ..training.runner import resolve_task_names, run, trainer_is_writer
from .options import config_from_args
from .prediction_files import one_task, predict_file, row_ids, split_hint, write_predictions


def cmd_train(args) -> None:
    config = config_from_args(args)
    taken = taken_from_export(config)
    if taken and trainer_is_writer():
        print(taken)
    results = run(config)
    _leave_process_group()
    if not trainer_is_writer():  # under torchrun the table is rank 0's
        return
    print(results_table(results))
    never = never_predicted(results.get("per_class", {}))
    for line in never:
        print(f"note: {line}")
    if never:
        print("note: the per-class view of each dev split: results.json ('per_class'), or pals-bench evaluate")
    for task, splits in results.get("skipped_rows", {}).items():
        for split, report in splits.items():
            print(f"note: task {task!r} {split}: {report['count']} malformed rows of {report['file']} skipped")
    threads = results.get("threads", torch.get_num_threads())
    precision = results["config"]["precision"]
    print(f"wall time to the table: {results['wall_seconds']:.0f} s ({threads} torch threads, {precision})")
    print(f"results: {Path(args.output_dir) / 'results.json'}")
    if results.get("plot"):
        print(f"plot: {results['plot']}")


def _leave_process_group() -> None:
    """Under a launcher: every rank done, then the process group closed, so that no rank exits while
    another's collective threads still run (gloo aborts such a process: "terminate called ...")."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


def _load_export(task_dir: Path, args):
    """The task's model, tokenizer, spec and max length, all as trained (from the export; the options
    may change the base or max length, and a task file gives the task's files at their new place)."""
    manifest = read_task_manifest(task_dir)
    _check_length_option(args, manifest)  # before anything loads
    evaluation = manifest.evaluation or EvaluationRecord()
    if getattr(args, "file", None):  # a new file: to predict (test), or to score (validation), every row of it
        spec = task_on_file(
            task_spec_of(manifest, task_dir), args.file, "validation" if args.command == "evaluate" else "test"
        )
        evaluation = dataclasses.replace(evaluation, max_eval_examples=None)
    else:
        spec = _task_files(task_spec_of(manifest, task_dir), manifest, task_dir, args.task_file)
    model = load_task(task_dir, base=args.base_model)
    model.tasks[spec.name] = spec  # the same task; its files (and metrics) as the task file says
    if args.compile:
        model = compile_model(model, mode=args.compile_mode)
    tokenizer = load_tokenizer(task_dir, base=args.base_model)
    max_length = args.max_length if args.max_length is not None else manifest.max_length or DEFAULT_MAX_LENGTH
    check_max_length(max_length, usable_positions(model.backbone.config), "--max-length")
    return model, tokenizer, spec, max_length, evaluation


def _glue_dir(args, evaluation: EvaluationRecord, task_dir: Path, spec) -> str | None:
    """--glue-dir, else the GLUE folder the run scored on, found from the export (`locate_glue_dir`)."""
    if args.glue_dir:
        return args.glue_dir
    return locate_glue_dir(spec, evaluation.glue_dir, evaluation.glue_dir_from_export, task_dir)


def _task_files(trained, manifest, task_dir: Path, task_file: str | None):
    """The exported task with its files where they are now: as the task file says (its labels and columns
    must be the trained ones), else where the export recorded them (found again after a move of the
    folder holding the data and the export); notes on files that moved or differ from the recorded ones."""
    if task_file:
        spec = _check_task_file(trained, task_file)
    else:
        spec, moved = locate_task_files(trained, manifest.task_data, task_dir)
        if moved:
            print(f"note: {moved}", file=sys.stderr)
    spec = pinned(spec, manifest.dataset_source)  # a Hub dataset at the commit it was trained on
    notes = changed_files(spec, manifest.task_data)
    notes += changed_splits(spec, manifest.dataset_source, spec.dev_splits + spec.test_splits)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return spec


def _check_task_file(trained, task_file: str):
    """The task of a task file given to evaluate / predict, which must describe the task as it was trained."""
    spec = resolve_task_names([trained.name], task_file)[trained.name]
    differences = [
        f"{name}: trained {getattr(trained, name)!r}, task file {getattr(spec, name)!r}"
        for name in ("labels", "is_regression", "text_columns", "label_column")
        if getattr(trained, name) != getattr(spec, name)
    ]
    if differences:
        raise PalsError(
            f"{task_file}: task {trained.name!r} differs from the one the export was trained on ("
            + "; ".join(differences)
            + "); leave out --task-file to use the export's own task"
        )
    return spec


def _dev_split(spec, split, glue_dir, evaluation: EvaluationRecord, limit: int | None, skipped=None):
    if limit is not None and limit < 0:
        raise ConfigError(f"--max-eval-examples {limit}: give a number >= 0 (0: every dev example)")
    data = load_split(spec, split, glue_dir=glue_dir, source=evaluation.data_source or "auto", skipped=skipped)
    limit = evaluation.max_eval_examples if limit is None else (limit or None)  # 0: every example
    return data.select(range(min(limit, len(data)))) if limit else data


def evaluate_export(task_dir: Path, args, details: dict | None = None) -> tuple[dict[str, float], list[int]]:
    """Dev metrics of one exported task (flat, as the run's ``results.json`` has them) and the number of
    examples per dev split; with no options exactly as the run scored it at its end. ``details`` receives
    ``per_class`` (``{split: class_report}``, classification tasks) and ``skipped_rows`` (``{split: ...}``)."""
    model, tokenizer, spec, max_length, evaluation = _load_export(task_dir, args)
    glue_dir = _glue_dir(args, evaluation, task_dir, spec)
    skipped = []
    splits = {
        split: tokenize(
            _dev_split(spec, split, glue_dir, evaluation, args.max_eval_examples, skipped), spec, tokenizer, max_length
        )
        for split in spec.dev_splits
    }
    if not splits:
        raise PalsError(f"task {spec.name!r} has no validation split to evaluate; add one to its task file")
    per_class = {}
    metrics = evaluate_tasks(
        model, {spec.name: splits}, tokenizer, evaluation.eval_batch_size or 64, progress=True, per_class=per_class
    )
    if details is not None:
        details["per_class"] = per_class.get(spec.name, {})
        details["skipped_rows"] = {report.split: report.as_json() for report in skipped}
    return metrics, [len(data) for data in splits.values()]


def cmd_evaluate(args) -> None:
    """Dev scores of each task, with no options exactly as the run scored it at its end, and the per-class
    view of each classification task; ``--out`` also writes them as JSON."""
    check_compile_mode(args.compile_mode, args.compile, "--compile-mode ", "--compile")
    out = Path(args.out) if args.out else None
    if out is not None and out.is_dir():
        raise ConfigError(f"--out {out} is a folder; give a file name for the JSON report (e.g. {out / 'eval.json'})")
    if out is not None:
        check_output_place(out)
    scores, report = {}, {"tasks": {}}
    for task_dir in [one_task(args.export)] if args.file else task_folders(args.export):
        details = {}
        metrics, sizes = evaluate_export(task_dir, args, details)
        task = read_task_manifest(task_dir).task
        scores[task] = metrics[f"{task}_score"]
        detail = ", ".join(f"{k}={100 * v:.2f}" for k, v in metrics.items() if k != "average")
        scored = f"{sizes[0]} examples of {args.file}" if args.file else f"{'/'.join(map(str, sizes))} dev examples"
        print(f"{task}{' on ' + args.file if args.file else ''}: {detail} ({scored})")
        for split, skipped in details["skipped_rows"].items():
            print(f"note: task {task!r} {split}: {skipped['count']} malformed rows of {skipped['file']} skipped")
        for split, classes in details["per_class"].items():
            print(class_table(task, split, classes))
        for line in never_predicted({task: details["per_class"]}):
            print(f"note: {line}")
        own = {k: v for k, v in metrics.items() if k != "average"}
        report["tasks"][task] = {"metrics": own, "dev_examples": sizes, **details}
    if len(scores) > 1:
        report["average"] = glue_average(scores)
        print(f"average: {100 * report['average']:.2f}")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"report: {out}")


def _check_length_option(args, manifest) -> None:
    """``--max-length`` (else the trained one) against the positions of the base the export recorded."""
    length = args.max_length if args.max_length is not None else manifest.max_length or DEFAULT_MAX_LENGTH
    positions = usable_positions(manifest.base_config) if args.base_model is None else None
    check_max_length(length, positions, "--max-length")


def _splits(spec, kind: str) -> list[str]:
    return spec.test_splits if kind == "test" else spec.dev_splits


def cmd_predict(args) -> None:
    """Prediction files for every task's test files (``--split validation``: its dev files), or with
    ``--input`` the answers to a file of requests that each name their task (all tasks on one model)."""
    check_compile_mode(args.compile_mode, args.compile, "--compile-mode ", "--compile")
    if args.input and args.file:
        raise ConfigError("--input (requests naming their tasks) and --file (rows of one task): give one of them")
    if args.input:
        return _predict_requests(args)
    if args.file:
        return predict_file(args, _load_export)
    kind, fmt, out = args.split or "test", args.format or "tsv", Path(args.out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; give a folder for the prediction files (one per task and split)")
    check_output_place(out)
    planned, skipped, specs = [], [], {}
    for task_dir in task_folders(args.export):
        manifest = read_task_manifest(task_dir)
        spec = task_spec_of(manifest, task_dir)
        spec = _check_task_file(spec, args.task_file) if args.task_file else spec  # it may add a split
        specs[spec.name] = spec
        if not _splits(spec, kind):
            skipped.append(spec.name)
            continue
        _check_length_option(args, manifest)
        planned.append(task_dir)
    if not planned:
        hints = "; ".join(f"{name}: {split_hint(specs[name], kind)}" for name in skipped)
        raise PalsError(f"{args.export}: no task has a {kind} split to predict ({hints}), or choose another --split")
    jobs = []  # every file read and checked before any prediction is written
    for task_dir in planned:
        model, tokenizer, spec, max_length, evaluation = _load_export(task_dir, args)
        for split in _splits(spec, kind):
            source = evaluation.data_source or "auto"
            data = load_split(spec, split, glue_dir=_glue_dir(args, evaluation, task_dir, spec), source=source)
            ids = row_ids(spec, split, data)
            jobs.append((model, tokenizer, spec, split, tokenize(data, spec, tokenizer, max_length), ids))
    out.mkdir(parents=True, exist_ok=True)
    for model, tokenizer, spec, split, data, ids in jobs:
        answers = [decode(spec, row) for row in predict(model, spec.name, data, tokenizer)]
        path = out / f"{spec.submission_name(split)}.{fmt}"
        write_predictions(path, fmt, spec, split, ids, answers)
        print(f"{path}: {len(answers)} predictions")
    for name in skipped:
        print(f"skipped {name}: it has no {kind} file ({split_hint(specs[name], kind)})")


def _predict_requests(args) -> None:
    if args.split is not None:
        raise ConfigError("--split chooses the tasks' own files; with --input the requests are answered: leave it out")
    out = Path(args.out)
    if out.is_dir() or not out.suffix:
        fmt = args.format or "tsv"
        out = out / f"predictions.{fmt}"
    else:
        fmt = answer_format(out, args.format)
    check_output_place(out)
    for task_dir in task_folders(args.export):
        _check_length_option(args, read_task_manifest(task_dir))
    requests = read_requests(args.input)
    tasks = served_tasks(args.export)
    check_requests(requests, tasks)  # every request checked before the model loads, every bad one named
    predictor = MultiTaskPredictor.from_exports(args.export, base=args.base_model, max_length=args.max_length)
    if args.compile:
        predictor.model = compile_model(predictor.model, mode=args.compile_mode)
    answers = predictor.predict(requests)
    write_answers(out, fmt, requests, answers, tasks)
    print(f"{out}: {len(answers)} predictions for tasks {sorted(set(a.task for a in answers))}")


def cmd_export(args) -> None:
    for name, path in export_checkpoint(args.run, args.checkpoint, args.out, with_base=args.with_base).items():
        print(f"{name}: {path}")


def cmd_schedule(args) -> None:
    """The sampler's task probabilities over the run, from the task sizes the run trains on (the subsets
    of ``--max-train-examples`` where given)."""
    if args.max_train_examples is not None and args.max_train_examples < 1:
        raise ConfigError(f"--max-train-examples {args.max_train_examples}: give a number >= 1 (or leave it out)")
    if args.steps < 1:
        raise ConfigError(f"--steps {args.steps}: give a number of training steps >= 1")
    specs = resolve_task_names(args.tasks, args.task_file)
    files = {name: len(load_split(spec, "train", glue_dir=args.glue_dir)) for name, spec in specs.items()}
    limit = args.max_train_examples
    sizes = {name: min(n, limit) if limit else n for name, n in files.items()}
    shown = ", ".join(
        f"{name} {sizes[name]:,}" + (f" (of {n:,})" if sizes[name] < n else "") for name, n in files.items()
    )
    print(f"training examples per task: {shown}")
    sampler = make_sampler(
        args.sampler, sizes, total_steps=args.steps, steps_per_epoch=args.steps_per_epoch, alpha=args.alpha
    )
    print(format_schedule(schedule(sampler, args.steps, every=args.every)))
    if args.plot:
        print(f"plot: {plot_schedule(sampler, args.steps, args.plot)}")


def cmd_params(args) -> None:
    print(f"| method | per task | total ({args.n_tasks} tasks) | x base |\n|---|---:|---:|---:|")
    for method in args.methods:
        c = count_method_parameters(method, args.model, n_tasks=args.n_tasks)
        print(f"| {method} | {c.per_task + c.head_per_task:,} | {c.total:,} | {c.multiplier:.3f} |")
