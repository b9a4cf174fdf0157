"""``pals-bench``: train, evaluate, export and predict with the multi-task harness.

pals-bench train --model bert-base-uncased --tasks cola sst2 mrpc --method pals --base finetune
pals-bench export runs/pals --checkpoint runs/pals/checkpoint-2000
pals-bench evaluate runs/pals/export/rte --glue-dir ../shared/glue
pals-bench predict runs/pals/export --glue-dir ../shared/glue --out predictions/
pals-bench schedule --tasks cola sst2 mrpc stsb rte --sampler annealed --steps 20000 --plot schedule.png
pals-bench params --model bert-base-uncased --methods pals low_rank houlsby full shared
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import types
import typing
from pathlib import Path

import numpy as np
import torch
import yaml

from ..errors import ConfigError, PalsError
from .accounting import count_method_parameters
from .batches import tokenize
from .data import load_split
from .evaluation import evaluate_tasks, predict
from .export import EvaluationRecord, load_task, load_tokenizer
from .export.manifest import read_task_manifest
from .export.read import task_folders, task_spec_of
from .metrics import glue_average
from .readers import getter, iter_records
from .reexport import export_checkpoint
from .report import results_table
from .runner import RunConfig, resolve_task_names, run
from .sampling import STRATEGIES, format_schedule, make_sampler, plot_schedule, schedule
from .serving import DEFAULT_MAX_LENGTH, MultiTaskPredictor, read_requests


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    """One option per `RunConfig` field, with its help, default and type."""
    hints = typing.get_type_hints(RunConfig)
    for f in dataclasses.fields(RunConfig):
        option = "--" + f.name.replace("_", "-")
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        kind = hints[f.name]
        if typing.get_origin(kind) in (typing.Union, types.UnionType):  # X | None -> X
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
        base_type = kind
        help_text = f"{f.metadata.get('help', '')} (default: {default})"
        if base_type is bool:
            parser.add_argument(option, action=argparse.BooleanOptionalAction, default=default, help=help_text)
        elif typing.get_origin(base_type) is list:
            parser.add_argument(option, nargs="+", default=default, help=help_text)
        else:
            parser.add_argument(option, type=base_type, default=default, help=help_text)


def _run_config(args: argparse.Namespace) -> RunConfig:
    return RunConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(RunConfig)})


def _config_file_defaults(argv: list[str] | None) -> dict:
    """Settings of ``train --config FILE``; they become defaults, so command-line options win."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(argv)
    if not known.config:
        return {}
    values = _read_mapping(known.config)
    valid = {f.name for f in dataclasses.fields(RunConfig)}
    unknown = set(values) - valid
    if unknown:
        raise PalsError(f"{known.config}: unknown settings {sorted(unknown)}; valid: {sorted(valid)}")
    return values


def _read_mapping(path: str) -> dict:
    try:
        text = Path(path).read_text(encoding="utf-8")
        data = yaml.safe_load(text) if path.endswith((".yaml", ".yml")) else json.loads(text)
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the config file ({err.strerror})") from None
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        line = f", line {where.line + 1}" if where is not None else ""
        problem = getattr(err, "problem", None) or err
        raise ConfigError(f"{path}{line}: not valid YAML ({problem}); fix the file") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}, line {err.lineno}: not valid JSON ({err.msg}); fix the file") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of settings (name: value per line)")
    return data


def cmd_train(args) -> None:
    results = run(_run_config(args))
    print(results_table(results))
    print(f"wall time to the table: {results['wall_seconds']:.0f} s ({torch.get_num_threads()} torch threads)")
    print(f"results: {Path(args.output_dir) / 'results.json'}")


def _load_export(task_dir: Path, args):
    """The task's model, tokenizer, spec and max length, all as trained (from the export; the options
    may change the base or max length, and a task file is only checked against the export's task)."""
    manifest = read_task_manifest(task_dir)
    model = load_task(task_dir, base=args.base_model)
    tokenizer = load_tokenizer(task_dir, base=args.base_model)
    spec = task_spec_of(manifest, task_dir)
    if args.task_file:
        _check_task_file(spec, args.task_file)
    max_length = args.max_length or manifest.max_length or DEFAULT_MAX_LENGTH
    positions = getattr(model.backbone.config, "max_position_embeddings", max_length)
    if not 0 < max_length <= positions:
        raise ConfigError(f"--max-length {max_length}: give 1 to {positions} (the base's positions)")
    return model, tokenizer, spec, max_length, manifest.evaluation or EvaluationRecord()


def _glue_dir(args, evaluation: EvaluationRecord) -> str | None:
    """--glue-dir, else the run's own GLUE folder when it is still there (else env GLUE_DIR)."""
    if args.glue_dir:
        return args.glue_dir
    if evaluation.glue_dir and Path(evaluation.glue_dir).is_dir():
        return evaluation.glue_dir
    return None


def _check_task_file(trained, task_file: str) -> None:
    """A task file given to evaluate / predict must describe the task as it was trained."""
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


def _dev_split(spec, split, glue_dir, evaluation: EvaluationRecord, limit: int | None):
    if limit is not None and limit < 0:
        raise ConfigError(f"--max-eval-examples {limit}: give a number >= 0 (0: every dev example)")
    data = load_split(spec, split, glue_dir=glue_dir, source=evaluation.data_source or "auto")
    limit = evaluation.max_eval_examples if limit is None else (limit or None)  # 0: every example
    return data.select(range(min(limit, len(data)))) if limit else data


def evaluate_export(task_dir: Path, args) -> tuple[dict[str, float], list[int]]:
    """Dev metrics of one exported task (flat, as the run's ``results.json`` has them) and the number of
    examples per dev split; with no options exactly as the run scored it at its end."""
    model, tokenizer, spec, max_length, evaluation = _load_export(task_dir, args)
    glue_dir = _glue_dir(args, evaluation)
    splits = {
        split: tokenize(
            _dev_split(spec, split, glue_dir, evaluation, args.max_eval_examples), spec, tokenizer, max_length
        )
        for split in spec.dev_splits
    }
    if not splits:
        raise PalsError(f"task {spec.name!r} has no validation split to evaluate; add one to its task file")
    metrics = evaluate_tasks(model, {spec.name: splits}, tokenizer, evaluation.eval_batch_size or 64)
    return metrics, [len(data) for data in splits.values()]


def cmd_evaluate(args) -> None:
    """Dev scores of each task; with no options exactly as the run scored it at its end."""
    scores = {}
    for task_dir in task_folders(args.export):
        metrics, sizes = evaluate_export(task_dir, args)
        task = read_task_manifest(task_dir).task
        scores[task] = metrics[f"{task}_score"]
        detail = ", ".join(f"{k}={100 * v:.2f}" for k, v in metrics.items() if k != "average")
        print(f"{task}: {detail} ({'/'.join(map(str, sizes))} dev examples)")
    if len(scores) > 1:
        print(f"average: {100 * glue_average(scores):.2f}")


def cmd_predict(args) -> None:
    """GLUE-format prediction files (``index<TAB>prediction``) for the test sets, or with ``--input``
    the answers to a file of requests that each name their task (all tasks on one model)."""
    if args.input:
        return _predict_requests(args)
    out = Path(args.out)
    jobs = []
    for task_dir in task_folders(args.export):
        model, tokenizer, spec, max_length, evaluation = _load_export(task_dir, args)
        if not spec.test_splits:
            raise PalsError(f"task {spec.name!r} has no test split to predict; add 'test: FILE' to its task")
        jobs.append((model, tokenizer, spec, max_length, evaluation))
    out.mkdir(parents=True, exist_ok=True)
    for model, tokenizer, spec, max_length, evaluation in jobs:
        for split in spec.test_splits:
            source = evaluation.data_source or "auto"
            data = load_split(spec, split, glue_dir=_glue_dir(args, evaluation), source=source)
            logits = predict(model, spec.name, tokenize(data, spec, tokenizer, max_length), tokenizer)
            if spec.is_regression:
                values = [f"{v:.3f}" for v in np.clip(logits[:, 0], *(spec.label_range or (-np.inf, np.inf)))]
            else:
                values = [spec.labels[i] for i in logits.argmax(-1)]
            path = out / f"{spec.submission_name(split)}.tsv"
            lines = ["index\tprediction"] + [f"{i}\t{v}" for i, v in zip(_row_ids(spec, split, data), values)]
            path.write_text("\n".join(lines) + "\n")
            print(f"{path}: {len(values)} predictions")


def _predict_requests(args) -> None:
    requests = read_requests(args.input)
    predictor = MultiTaskPredictor.from_exports(args.export, base=args.base_model)
    if args.max_length:
        predictor.max_length = {task: args.max_length for task in predictor.max_length}
    answers = predictor.predict(requests)
    out = Path(args.out)
    if out.is_dir() or not out.suffix:
        out = out / "predictions.tsv"
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = ["id\ttask\tprediction"]
    for position, (request, answer) in enumerate(zip(requests, answers)):
        label = f"{answer.label:.3f}" if isinstance(answer.label, float) else answer.label
        lines.append(f"{request.get('id', position)}\t{answer.task}\t{label}")
    out.write_text("\n".join(lines) + "\n")
    print(f"{out}: {len(answers)} predictions for tasks {sorted(set(a.task for a in answers))}")


def _row_ids(spec, split: str, data) -> list:
    """The ids of a split's rows for its prediction file: the file's own ``id`` column when a user task's
    file has one, else the row numbers (GLUE's ``index``)."""
    if spec.data_dir is None:
        return list(data["idx"])
    path = spec.split_path(split)
    columns, rows, _ = iter_records(path, spec.file_format, spec.header_for(split), spec.column_positions)
    if "id" not in columns:
        return list(data["idx"])
    get = getter(path, columns, spec.file_format, "id")
    return [str(get(row)) for _, row in rows]


def cmd_export(args) -> None:
    for name, path in export_checkpoint(args.run, args.checkpoint, args.out).items():
        print(f"{name}: {path}")


def cmd_schedule(args) -> None:
    specs = resolve_task_names(args.tasks, args.task_file)
    sizes = {name: len(load_split(spec, "train", glue_dir=args.glue_dir)) for name, spec in specs.items()}
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


def build_parser(run_defaults: dict | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pals-bench", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train one multi-task model, evaluate it, export every task")
    train.add_argument("--config", help="YAML or JSON file of settings (command-line options win)")
    _add_run_options(train)
    train.set_defaults(func=cmd_train, **(run_defaults or {}))

    for name, func, text in (
        ("evaluate", cmd_evaluate, "dev-set metrics of exported tasks"),
        ("predict", cmd_predict, "GLUE-format test predictions of exported tasks"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("export", help="a task export folder, or a run's export folder")
        p.add_argument(
            "--glue-dir", default=None, help="GLUE folder for GLUE tasks (default: the run's, else env GLUE_DIR)"
        )
        p.add_argument(
            "--task-file",
            default=None,
            help="optional: checked against the task stored in the export (which is what is used)",
        )
        p.add_argument("--base-model", default=None, help="base model to load the tasks on (default: the export's)")
        p.add_argument("--max-length", type=int, default=None, help="tokens per example (default: as trained)")
        if name == "evaluate":
            p.add_argument(
                "--max-eval-examples",
                type=int,
                default=None,
                help="the first N dev examples per task; 0: all (default: as the run evaluated, so that the "
                "scores are the run's end-of-training scores)",
            )
        if name == "predict":
            p.add_argument(
                "--out",
                required=True,
                help="folder for the GLUE-format files; with --input, the predictions file (TSV: id, task, prediction)",
            )
            p.add_argument(
                "--input",
                default=None,
                help="CSV/TSV/JSONL of requests with columns task, text, text_b (pairs) and optional id: "
                "all tasks answered by one model on one base",
            )
        p.set_defaults(func=func)

    export = sub.add_parser("export", help="per-task exports of a run's checkpoint (train exports at the end)")
    export.add_argument("run", help="the output_dir of a `pals-bench train` run")
    export.add_argument("--checkpoint", default=None, help="a checkpoint-N folder (default: the newest complete one)")
    export.add_argument("--out", default=None, help="default: <run>/export")
    export.set_defaults(func=cmd_export)

    sched = sub.add_parser("schedule", help="print (and plot) a sampler's task probabilities over training")
    sched.add_argument("--tasks", nargs="+", default=None, help="task names (default: every task of --task-file)")
    sched.add_argument("--task-file", default=None, help="YAML/JSON file of your own tasks")
    sched.add_argument("--glue-dir", default=None, help="GLUE folder (default: env GLUE_DIR)")
    sched.add_argument("--sampler", default="annealed", help=f"one of {', '.join(STRATEGIES)}")
    sched.add_argument("--steps", type=int, required=True, help="training steps to show")
    sched.add_argument("--steps-per-epoch", type=int, default=2400, help="steps of one annealing epoch")
    sched.add_argument("--alpha", type=float, default=None, help="exponent of the temperature sampler")
    sched.add_argument("--every", type=int, default=None, help="print a row every N steps")
    sched.add_argument("--plot", default=None, help="write a PNG here")
    sched.set_defaults(func=cmd_schedule)

    params = sub.add_parser("params", help="task-specific parameters and the multiplier, from a model config")
    params.add_argument("--model", default="bert-base-uncased", help="model name or folder (only its config is read)")
    params.add_argument(
        "--methods",
        nargs="+",
        default=["pals", "pals_no_share", "low_rank", "houlsby", "lora"],
        help="harness method names (pals_adapters.harness.methods) or adapters config names",
    )
    params.add_argument("--n-tasks", type=int, default=8, help="number of tasks sharing the base")
    params.set_defaults(func=cmd_params)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        run_defaults = _config_file_defaults(argv)
    except PalsError as err:
        build_parser().exit(2, f"pals-bench: error: {err}\n")
    parser = build_parser(run_defaults)
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except PalsError as err:
        # Our errors carry a message that says what to fix: no traceback.
        parser.exit(2, f"pals-bench {args.command}: error: {err}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
