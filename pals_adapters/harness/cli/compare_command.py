"""``pals-bench compare``: its options (the grid file, the output folder, the shared settings it may
override) and the command."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
import typing

from ..comparison.grid import NOT_SETTABLE  # what compare decides per run: no option
from ..run_config import RunConfig


def add_compare_parser(sub) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "compare",
        help="train a grid of methods x seeds on the same tasks and budget, and compare them with intervals",
        description="Compare methods on the same tasks, data and budget: every row and seed of the grid file is "
        "one run under OUTPUT_DIR/runs/, and the report (comparison.md, .csv, .json, .png) compares each row with "
        "the reference row. Options below the first group replace the grid file's shared settings.",
    )
    parser.add_argument("--config", required=True, help="the grid file (YAML or JSON), see docs/compare.md")
    parser.add_argument("--output-dir", required=True, help="the folder of the runs and of the report")
    parser.add_argument("--jobs", type=int, default=1, help="runs trained at a time, each in its own process")
    parser.add_argument(
        "--launcher",
        choices=["local", "ray"],
        help="where the runs train: local (the default; --jobs processes here) or ray (each run a task on a Ray "
        "cluster, with the grid's resources_per_run; needs pals-adapters[ray])",
    )
    parser.add_argument(
        "--ray-address",
        help="with --launcher ray: the cluster's address (auto, HOST:PORT, ray://HOST:10001); none starts Ray here",
    )
    parser.add_argument("--dry-run", action="store_true", help="list the runs, which are done, and each row's size")
    parser.add_argument(
        "--print-commands",
        action="store_true",
        help="with --dry-run: print each missing run as the pals-bench train command that makes it",
    )
    parser.add_argument("--report-only", action="store_true", help="train nothing; report the runs that are done")
    parser.add_argument("--seeds", type=int, nargs="+", default=argparse.SUPPRESS, help="replace the grid's seeds")
    shared = parser.add_argument_group("shared settings (each replaces the grid file's)")
    hints = typing.get_type_hints(RunConfig)
    for f in dataclasses.fields(RunConfig):
        if f.name in NOT_SETTABLE:
            continue
        kind = hints[f.name]
        if typing.get_origin(kind) is not None and type(None) in typing.get_args(kind):
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
        option = "--" + f.name.replace("_", "-")
        given = dict(default=argparse.SUPPRESS, help=f.metadata.get("help", ""))  # absent: the grid's value
        if kind is bool:
            shared.add_argument(option, action=argparse.BooleanOptionalAction, **given)
        elif typing.get_origin(kind) is list:
            shared.add_argument(option, nargs="+", **given)
        else:
            shared.add_argument(option, type=kind, **given)
    parser.set_defaults(func=cmd_compare)
    return parser


def cmd_compare(args) -> None:
    from ...errors import ConfigError
    from ..comparison import compare

    if args.print_commands and not args.dry_run:
        raise ConfigError("--print-commands goes with --dry-run (it prints the runs instead of training them)")
    names = {f.name for f in dataclasses.fields(RunConfig)} - set(NOT_SETTABLE)
    overrides = {name: getattr(args, name) for name in sorted(names) if hasattr(args, name)}
    if hasattr(args, "seeds"):
        overrides["seeds"] = args.seeds
    compare(
        args.config,
        args.output_dir,
        overrides=overrides,
        jobs=args.jobs,
        dry_run=args.dry_run,
        print_commands=args.print_commands,
        report_only=args.report_only,
        launcher=args.launcher,
        ray_address=args.ray_address,
        command=shlex.join(["pals-bench", *sys.argv[1:]]) if sys.argv[1:2] == ["compare"] else None,
    )
