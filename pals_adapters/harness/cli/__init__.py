"""``pals-bench``: train, evaluate, export and predict with the multi-task harness.

pals-bench train --model bert-base-uncased --tasks cola sst2 mrpc --method pals --base finetune
pals-bench export runs/pals --checkpoint runs/pals/checkpoint-2000
pals-bench evaluate runs/pals/export/rte --glue-dir ../shared/glue
pals-bench predict runs/pals/export --glue-dir ../shared/glue --out predictions/
pals-bench schedule --tasks cola sst2 mrpc stsb rte --sampler annealed --steps 20000 --plot schedule.png
pals-bench compare --config grid.yaml --output-dir comparisons/mine
pals-bench params --model bert-base-uncased --methods pals low_rank houlsby separate shared
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from ...errors import PalsError
from ..data.sampling import STRATEGIES
from ..run_config import RunConfig
from .compare_command import add_compare_parser
from .options import add_run_options, config_file_defaults


def _command(name: str):
    """The verb ``name`` of `commands`, imported when it runs: the verbs load torch, models and data, which
    building the parser (and ``--help``) must not pay for."""

    def run(args) -> None:
        from . import commands

        getattr(commands, name)(args)

    return run


def _schedule_defaults(run_defaults: dict | None) -> dict:
    """What `schedule --config RUN.yaml` previews: the mix of that run."""
    if not run_defaults:
        return {}
    run = RunConfig(**run_defaults)  # the sampler a run uses when its file names none (the method's own)
    return {
        "tasks": run.tasks,
        "task_file": run.task_file,
        "glue_dir": run.glue_dir,
        "sampler": run.sampler,
        "steps": run.max_steps,
        "steps_per_epoch": run.steps_per_epoch,
        "alpha": run.alpha,
        "max_train_examples": run.max_train_examples,
    }


def build_parser(run_defaults: dict | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pals-bench", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    parser.commands = sub.choices  # name -> the command's parser (its usage goes with its errors)

    train = sub.add_parser("train", help="train one multi-task model, evaluate it, export every task")
    train.add_argument(
        "--config",
        help="YAML or JSON file of settings, or a recipe shipped with pals_adapters: small-cpu (command-line "
        "options win)",
    )
    add_run_options(train)
    train.set_defaults(func=_command("cmd_train"), **(run_defaults or {}))

    for name, func, text in (
        ("evaluate", _command("cmd_evaluate"), "dev-set metrics of exported tasks"),
        (
            "predict",
            _command("cmd_predict"),
            "predictions of exported tasks: their test or dev files, or a file of requests",
        ),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("export", help="a task export folder, or a run's export folder")
        p.add_argument(
            "--glue-dir", default=None, help="GLUE folder for GLUE tasks (default: the run's, else env GLUE_DIR)"
        )
        p.add_argument(
            "--task-file",
            default=None,
            help="the task file, e.g. at the data's new place: the task's files are read as it says (its "
            "labels and columns must be the trained ones); default: the files the export recorded",
        )
        p.add_argument(
            "--file",
            default=None,
            help="a new CSV/TSV/JSONL file of one task (EXPORT/TASK) with its text columns"
            + (" and its label column: its scores" if name == "evaluate" else " (and optional ids): its predictions"),
        )
        p.add_argument("--base-model", default=None, help="base model to load the tasks on (default: the export's)")
        p.add_argument("--max-length", type=int, default=None, help="tokens per example (default: as trained)")
        p.add_argument(
            "--threads",
            type=int,
            default=None,
            help="CPU threads of torch (default: torch's own, the OMP_NUM_THREADS environment variable, else one "
            "per core)",
        )
        p.add_argument(
            "--compile",
            action="store_true",
            help="torch.compile the loaded model first (its first batches compile; see docs/harness.md)",
        )
        p.add_argument(
            "--compile-mode",
            default=None,
            help="with --compile: torch.compile's mode, e.g. reduce-overhead (CUDA graphs on a GPU) or max-autotune "
            "(default: torch's default)",
        )
        if name == "evaluate":
            p.add_argument(
                "--max-eval-examples",
                type=int,
                default=None,
                help="the first N dev examples per task; 0: all (default: as the run evaluated, so that the "
                "scores are the run's end-of-training scores)",
            )
            p.add_argument(
                "--out",
                default=None,
                help="also write the scores, the per-class view and any skipped rows to this JSON file",
            )
        if name == "predict":
            p.add_argument(
                "--out",
                required=True,
                help="folder for the prediction files (one per task and split); with --input, the answers file "
                "(.tsv, .csv or .jsonl: id, task, prediction, probability), or a folder for predictions.tsv",
            )
            p.add_argument(
                "--input",
                default=None,
                help="CSV/TSV/JSONL of requests with task, text, text_b (pair tasks) and optional id: all tasks "
                "answered by one model on one base",
            )
            p.add_argument(
                "--split",
                choices=("test", "validation"),
                default=None,
                help="which files of each task to predict (default: test); tasks without one are skipped, and named",
            )
            p.add_argument(
                "--format",
                choices=("tsv", "csv", "jsonl"),
                default=None,
                help="format of the prediction files (default: tsv; with --input: from the --out name); jsonl keeps "
                "ids and texts exact",
            )
        p.set_defaults(func=func)

    export = sub.add_parser("export", help="per-task exports of a run's checkpoint (train exports at the end)")
    export.add_argument("run", help="the output_dir of a `pals-bench train` run")
    export.add_argument("--checkpoint", default=None, help="a checkpoint-N folder (default: the newest complete one)")
    export.add_argument("--out", default=None, help="default: <run>/export")
    export.add_argument(
        "--with-base",
        action="store_true",
        help="also write a frozen base into the export (<out>/base: config, weights, tokenizer), so that it loads "
        "with no hub and no model package (a fine-tuned base is always written)",
    )
    export.set_defaults(func=_command("cmd_export"))

    sched = sub.add_parser("schedule", help="print (and plot) a sampler's task probabilities over training")
    sched.add_argument(
        "--config",
        help="a run's YAML/JSON settings file: preview that run's mix (its tasks, task file, sampler, max_steps, "
        "steps_per_epoch, alpha, max_train_examples); options given here win",
    )
    sched.add_argument("--tasks", nargs="+", default=None, help="task names (default: every task of --task-file)")
    sched.add_argument("--task-file", default=None, help="YAML/JSON file of your own tasks")
    sched.add_argument("--glue-dir", default=None, help="GLUE folder (default: env GLUE_DIR)")
    sched.add_argument("--sampler", default="annealed", help=f"one of {', '.join(STRATEGIES)}")
    run_default = {f.name: f.default for f in dataclasses.fields(RunConfig)}
    sched.add_argument(
        "--steps",
        "--max-steps",
        dest="steps",
        type=int,
        default=run_default["max_steps"],
        help=f"training steps of the run (default: {run_default['max_steps']}, as train)",
    )
    sched.add_argument("--steps-per-epoch", type=int, default=2400, help="steps of one annealing epoch")
    sched.add_argument("--alpha", type=float, default=None, help="exponent of the temperature sampler")
    sched.add_argument(
        "--max-train-examples",
        type=int,
        default=None,
        help="as train: each task trains on at most N examples, so the sampler sees those sizes",
    )
    sched.add_argument("--every", type=int, default=None, help="print a row every N steps")
    sched.add_argument("--plot", default=None, help="write a PNG here")
    sched.set_defaults(func=_command("cmd_schedule"), **_schedule_defaults(run_defaults))

    add_compare_parser(sub)

    params = sub.add_parser("params", help="task-specific parameters and the multiplier, from a model config")
    params.add_argument("--model", default="bert-base-uncased", help="model name or folder (only its config is read)")
    params.add_argument(
        "--methods",
        nargs="+",
        default=["pals", "pals_no_share", "low_rank", "houlsby", "lora"],
        help="harness method names (pals_adapters.harness.methods) or adapters config names",
    )
    params.add_argument("--n-tasks", type=int, default=8, help="number of tasks sharing the base")
    params.set_defaults(func=_command("cmd_params"))
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        words = argv if argv is not None else sys.argv[1:]
        run_defaults = {} if words[:1] == ["compare"] else config_file_defaults(argv)  # a grid, not run settings
    except PalsError as err:
        build_parser().exit(2, f"pals-bench: error: {err}\n")
    parser = build_parser(run_defaults)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the command's own parser, with its usage (not the list of commands)
        parser.commands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    from ..training.run_environment import torch_threads  # torch: once a verb runs

    try:
        with torch_threads(args.threads if args.command in ("evaluate", "predict") else None):
            args.func(args)
    except PalsError as err:
        # Our errors carry a message that says what to fix: no traceback.
        parser.exit(2, f"pals-bench {args.command}: error: {err}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
