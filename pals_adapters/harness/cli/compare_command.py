"""``pals-bench compare``: its options (the grid file, the output folder, the shared settings it may
override) and the command."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import signal
import sys
import typing

from ..comparison.grid import NOT_SETTABLE, CommandLineOverrides  # NOT_SETTABLE: what compare decides per run
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
    handoff = parser.add_argument_group("hand-off (train nothing: export a finished row's run)")
    handoff.add_argument(
        "--export",
        dest="export_row",
        metavar="ROW",
        default=None,
        help="write the export of this row's run to --out, its card saying the comparison and its scores there",
    )
    handoff.add_argument(
        "--seed", type=int, default=None, help="with --export: this seed's run (default: the closest to the row's mean)"
    )
    handoff.add_argument("--out", default=None, help="with --export: the folder of the export")
    handoff.add_argument(
        "--with-base",
        action="store_true",
        help="with --export: a frozen base goes into the export (config, weights, tokenizer): it loads with no hub",
    )
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
        if f.name == "export":  # --export names the row to hand off: the setting is --no-export
            given["help"] = "no per-task exports of the runs (the grid's export: false); --export names a row"
            shared.add_argument("--no-export", dest="export", action="store_false", **given)
        elif kind is bool:
            shared.add_argument(option, action=argparse.BooleanOptionalAction, **given)
        elif typing.get_origin(kind) is list:
            shared.add_argument(option, nargs="+", **given)
        else:
            shared.add_argument(option, type=kind, **given)
    parser.set_defaults(func=cmd_compare)
    return parser


class Terminated(BaseException):
    """SIGTERM, raised where the command is (as Ctrl-C raises KeyboardInterrupt)."""


def _on_sigterm(signum, frame) -> None:
    raise Terminated


INTERRUPTED = "pals-bench compare: interrupted; run the same command again to go on"


def cmd_compare(args) -> None:
    """The comparison; Ctrl-C or SIGTERM end it with one line and exit status 130 or 143 (each run keeps its
    complete checkpoints, and the same command goes on from them)."""
    from ...errors import ConfigError
    from ..comparison import compare

    if args.print_commands and not args.dry_run:
        raise ConfigError("--print-commands goes with --dry-run (it prints the runs instead of training them)")
    names = {f.name for f in dataclasses.fields(RunConfig)} - set(NOT_SETTABLE)
    # errors about them name the options (--max-steps), not the Python argument
    overrides = CommandLineOverrides({name: getattr(args, name) for name in sorted(names) if hasattr(args, name)})
    if hasattr(args, "seeds"):
        overrides["seeds"] = args.seeds
    if args.export_row is not None or args.out or args.seed is not None or args.with_base:
        return _hand_off(args, overrides)
    before = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
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
            command=command_line(args, overrides),
        )
    except (KeyboardInterrupt, Terminated) as stop:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one line, however many signals follow
        print(INTERRUPTED, file=sys.stderr, flush=True)
        sys.exit(130 if isinstance(stop, KeyboardInterrupt) else 143)
    finally:
        signal.signal(signal.SIGTERM, before)


def command_line(args, overrides: dict) -> str:
    """The command as the report records it, from what was parsed (also when `main` was called from Python)."""
    words = ["pals-bench", "compare", "--config", str(args.config), "--output-dir", str(args.output_dir)]
    words += ["--jobs", str(args.jobs)] if args.jobs != 1 else []
    words += ["--report-only"] if args.report_only else []
    words += ["--launcher", args.launcher] if args.launcher else []
    words += ["--ray-address", args.ray_address] if args.ray_address else []
    for name, value in overrides.items():
        option = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            words.append(option if value else "--no-" + option[2:])
        elif isinstance(value, list):
            words += [option, *map(str, value)]
        else:
            words += [option, str(value)]
    return shlex.join(words)


def _hand_off(args, overrides: dict) -> None:
    """``--export ROW --out DIR``: the export of a finished run of the row (`export_row`); trains nothing."""
    from ...errors import ConfigError
    from ..comparison import export_row

    if args.export_row is None or not args.out:
        raise ConfigError("--seed, --out and --with-base go with --export ROW (give the row and --out DIR)")
    if args.dry_run or args.report_only:
        raise ConfigError("--export trains nothing: leave out --dry-run / --report-only")
    command = shlex.join(["pals-bench", *sys.argv[1:]]) if sys.argv[1:2] == ["compare"] else None
    written = export_row(
        args.config,
        args.output_dir,
        args.export_row,
        args.out,
        seed=args.seed,
        with_base=args.with_base,
        overrides=overrides,
        command=command,
    )
    for name, path in written.items():
        print(f"{name}: {path}")
