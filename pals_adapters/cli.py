"""``pals-bench``: train, evaluate, export and predict with the multi-task harness.

    pals-bench train --model bert-base-uncased --tasks cola sst2 mrpc --method pals --base finetune
    pals-bench export runs/pals --checkpoint runs/pals/checkpoint-2000
    pals-bench evaluate runs/pals/export/rte --glue-dir ../shared/glue
    pals-bench predict runs/pals/export --glue-dir ../shared/glue --out predictions/
    pals-bench schedule --tasks cola sst2 mrpc stsb rte --sampler annealed --steps 20000 --plot schedule.png
    pals-bench params --model bert-base-uncased --methods pals low_rank houlsby full shared
"""

import argparse
import dataclasses
import json
import sys
import typing
from pathlib import Path
from typing import List, Optional

from .errors import PalsError

GLUE_SUBMISSION_NAMES = {
    ("cola", "test"): "CoLA", ("sst2", "test"): "SST-2", ("mrpc", "test"): "MRPC", ("stsb", "test"): "STS-B",
    ("qqp", "test"): "QQP", ("mnli", "test_matched"): "MNLI-m", ("mnli", "test_mismatched"): "MNLI-mm",
    ("qnli", "test"): "QNLI", ("rte", "test"): "RTE", ("wnli", "test"): "WNLI",
}


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    """One option per `RunConfig` field, with its default and type."""
    from .harness import RunConfig

    hints = typing.get_type_hints(RunConfig)
    for f in dataclasses.fields(RunConfig):
        option = "--" + f.name.replace("_", "-")
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        kind = hints[f.name]
        if typing.get_origin(kind) is typing.Union:  # Optional[X] -> X
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
        base_type = kind
        help_text = f"default: {default}"
        if base_type is bool:
            parser.add_argument(option, action=argparse.BooleanOptionalAction, default=default, help=help_text)
        elif typing.get_origin(base_type) in (list, List):
            parser.add_argument(option, nargs="+", default=default, help=help_text)
        else:
            parser.add_argument(option, type=base_type, default=default, help=help_text)


def _run_config(args: argparse.Namespace):
    from .harness import RunConfig

    return RunConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(RunConfig)})


def _config_file_defaults(argv: Optional[List[str]]) -> dict:
    """Settings of ``train --config FILE``; they become defaults, so command-line options win."""
    from .harness import RunConfig

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
    text = Path(path).read_text()
    if path.endswith((".yaml", ".yml")):
        import yaml

        data = yaml.safe_load(text)
    else:
        data = json.loads(text)
    if not isinstance(data, dict):
        raise PalsError(f"{path}: expected a mapping of settings")
    return data


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def cmd_train(args) -> None:
    from .harness import results_table, run

    results = run(_run_config(args))
    print(results_table(results))
    print(f"wall time to the table: {results['wall_seconds']:.0f} s ({torch_threads()} torch threads)")
    print(f"results: {Path(args.output_dir) / 'results.json'}")


def _task_dirs(path: Path) -> List[Path]:
    """An export folder of one task, or a run's export folder holding several."""
    def is_task(folder: Path) -> bool:
        manifest = folder / "manifest.json"
        return manifest.is_file() and json.loads(manifest.read_text()).get("contents") == "task"

    if is_task(path):
        return [path]
    dirs = sorted(p for p in path.iterdir() if is_task(p)) if path.is_dir() else []
    if not dirs:
        raise PalsError(f"{path}: no manifest.json here or in its sub-folders; point to a task export folder")
    return dirs


def _load_export(task_dir: Path, args):
    from transformers import AutoTokenizer

    from .export import load_task

    model = load_task(task_dir, base=args.base_model)
    manifest = json.loads((task_dir / "manifest.json").read_text())
    tokenizer_source = args.base_model or manifest.get("base_model_name")
    base_path = manifest.get("base_path")
    if args.base_model is None and base_path and (task_dir / base_path / "tokenizer_config.json").is_file():
        tokenizer_source = str(task_dir / base_path)
    return model, AutoTokenizer.from_pretrained(tokenizer_source), manifest


def _task_spec(name: str, task_file: Optional[str]):
    from .harness import resolve_task_names

    return resolve_task_names([name], task_file)[name]


def cmd_evaluate(args) -> None:
    from .batches import tokenize
    from .data import load_split
    from .evaluation import evaluate_tasks
    from .metrics import glue_average

    scores = {}
    for task_dir in _task_dirs(Path(args.export)):
        model, tokenizer, manifest = _load_export(task_dir, args)
        task = manifest["task"]
        spec = _task_spec(task, args.task_file)
        splits = {
            split: tokenize(load_split(spec, split, glue_dir=args.glue_dir), spec, tokenizer, args.max_length)
            for split in spec.splits
            if split.startswith("validation")
        }
        metrics = evaluate_tasks(model, {task: splits}, tokenizer)
        scores[task] = metrics[f"{task}_score"]
        detail = ", ".join(f"{k}={100 * v:.2f}" for k, v in metrics.items() if k != "average")
        print(f"{task}: {detail}")
    if len(scores) > 1:
        print(f"average: {100 * glue_average(scores):.2f}")


def cmd_predict(args) -> None:
    """GLUE-format prediction files (``index<TAB>prediction``) for the test sets."""
    import numpy as np

    from .batches import tokenize
    from .data import load_split
    from .evaluation import predict

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for task_dir in _task_dirs(Path(args.export)):
        model, tokenizer, manifest = _load_export(task_dir, args)
        task = manifest["task"]
        spec = _task_spec(task, args.task_file)
        for split in (s for s in spec.splits if s.startswith("test")):
            data = load_split(spec, split, glue_dir=args.glue_dir)
            logits = predict(model, task, tokenize(data, spec, tokenizer, args.max_length), tokenizer)
            if spec.is_regression:
                values = [f"{v:.3f}" for v in np.clip(logits[:, 0], *(spec.label_range or (-np.inf, np.inf)))]
            else:
                values = [spec.labels[i] for i in logits.argmax(-1)]
            name = GLUE_SUBMISSION_NAMES.get((task, split), f"{task}-{split}")
            path = out / f"{name}.tsv"
            lines = ["index\tprediction"] + [f"{i}\t{v}" for i, v in zip(data["idx"], values)]
            path.write_text("\n".join(lines) + "\n")
            print(f"{path}: {len(values)} predictions")


def cmd_export(args) -> None:
    from .harness import export_checkpoint

    for name, path in export_checkpoint(args.run, args.checkpoint, args.out).items():
        print(f"{name}: {path}")


def cmd_schedule(args) -> None:
    from .data import load_split
    from .sampling import format_schedule, make_sampler, plot_schedule, schedule

    sizes = {}
    for name in args.tasks:
        sizes[name] = len(load_split(_task_spec(name, args.task_file), "train", glue_dir=args.glue_dir))
    sampler = make_sampler(
        args.sampler, sizes, total_steps=args.steps, steps_per_epoch=args.steps_per_epoch, alpha=args.alpha
    )
    print(format_schedule(schedule(sampler, args.steps, every=args.every)))
    if args.plot:
        print(f"plot: {plot_schedule(sampler, args.steps, args.plot)}")


def cmd_params(args) -> None:
    from .accounting import count_parameters

    print(f"| method | per task | total ({args.n_tasks} tasks) | x base |\n|---|---:|---:|---:|")
    for method in args.methods:
        c = count_parameters(method, args.model, n_tasks=args.n_tasks)
        print(f"| {method} | {c.per_task + c.head_per_task:,} | {c.total:,} | {c.multiplier:.3f} |")


def build_parser(run_defaults: Optional[dict] = None) -> argparse.ArgumentParser:
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
        p.add_argument("--glue-dir", default=None)
        p.add_argument("--task-file", default=None, help="YAML/JSON of user tasks")
        p.add_argument("--base-model", default=None, help="base model to load the tasks on (default: manifest)")
        p.add_argument("--max-length", type=int, default=128)
        if name == "predict":
            p.add_argument("--out", required=True, help="folder for the prediction files")
        p.set_defaults(func=func)

    export = sub.add_parser("export", help="per-task exports of a run's checkpoint (train exports at the end)")
    export.add_argument("run", help="the output_dir of a `pals-bench train` run")
    export.add_argument("--checkpoint", default=None, help="a checkpoint-N folder (default: the newest complete one)")
    export.add_argument("--out", default=None, help="default: <run>/export")
    export.set_defaults(func=cmd_export)

    sched = sub.add_parser("schedule", help="print (and plot) a sampler's task probabilities over training")
    sched.add_argument("--tasks", nargs="+", required=True)
    sched.add_argument("--task-file", default=None)
    sched.add_argument("--glue-dir", default=None)
    sched.add_argument("--sampler", default="annealed")
    sched.add_argument("--steps", type=int, required=True)
    sched.add_argument("--steps-per-epoch", type=int, default=2400)
    sched.add_argument("--alpha", type=float, default=None)
    sched.add_argument("--every", type=int, default=None)
    sched.add_argument("--plot", default=None, help="write a PNG here")
    sched.set_defaults(func=cmd_schedule)

    params = sub.add_parser("params", help="task-specific parameters and the multiplier, from a model config")
    params.add_argument("--model", default="bert-base-uncased", help="model name or folder (only its config is read)")
    params.add_argument("--methods", nargs="+", default=["pals", "pals_no_share", "low_rank", "houlsby", "lora"])
    params.add_argument("--n-tasks", type=int, default=8)
    params.set_defaults(func=cmd_params)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
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
