"""The paper's comparisons of methods (its Tables 2 and 3), made with `pals-bench compare`.

Each profile is a grid file in benchmarks/quality/grids/: smoke runs every medium row for a few steps
to check the suite on a new machine (its scores mean nothing), quick fits two CPU cores, medium is the
comparison whose results are committed, and full is the paper's setting for a GPU. Runs are kept under
the output folder, so an interrupted profile goes on where it stopped when the same command runs again.

    python -m benchmarks run quality [--profile P] [options]   # one profile's grid through compare
    python -m benchmarks run quality references [options]     # single-task references (quality.references)
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

DESCRIPTION = "Compares every method on the same GLUE tasks and budget (the paper's Tables 2 and 3)."
GRIDS = Path(__file__).resolve().parent / "grids"
PROFILES = ("smoke", "quick", "medium", "full")
# medium/ holds the committed runs made before the grid files (their report: --committed); a rerun of the
# medium grid gets a folder of its own, so that neither report replaces the other.
FOLDERS = {"medium": "medium-grid"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks run quality",
        description=DESCRIPTION + " " + __doc__.split("\n\n")[1].replace("\n", " "),
    )
    parser.add_argument(
        "--profile",
        choices=PROFILES,
        default="quick",
        help="The grid to run, from grids/PROFILE.yaml (default: quick).",
    )
    parser.add_argument(
        "--glue-dir", default=None, help="The folder of the GLUE tasks (default: the GLUE_DIR variable)."
    )
    parser.add_argument(
        "--model", default=None, help="Another base model for the same comparison (default: the grid's)."
    )
    parser.add_argument(
        "--out",
        default="benchmarks/results/quality",
        help="The folder that receives one subfolder per profile with its runs and report (medium: medium-grid, "
        "beside the committed medium runs; default: %(default)s).",
    )
    parser.add_argument("--jobs", type=int, default=1, help="How many runs train at a time, each in its own process.")
    parser.add_argument("--dry-run", action="store_true", help="List the runs and which are done, and train nothing.")
    parser.add_argument("--report-only", action="store_true", help="Write the report of the finished runs only.")
    parser.add_argument(
        "--committed",
        action="store_true",
        help="Report the committed medium runs of benchmarks/results/quality/medium/runs, which predate the grid "
        "files, with the same report as every grid (use --glue-dir for the majority-class floor).",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Runs (or reports) one profile through `pals_adapters.harness.compare`; returns the exit status."""
    if argv and argv[0] == "references":  # the single-task references every row is read against
        from benchmarks.quality import references

        return references.main(argv[1:]) or 0
    args = parse_args(argv)
    words = list(sys.argv[1:] if argv is None else argv)
    command = shlex.join(["python", "-m", "benchmarks", "run", "quality", *words])
    if args.committed:
        from benchmarks.quality.committed import report_committed
        from pals_adapters.harness.comparison.reporting.report import markdown

        print(markdown(report_committed(glue_dir=args.glue_dir, command=command)))
        return 0
    from pals_adapters.errors import PalsError
    from pals_adapters.harness import compare

    overrides = {key: value for key in ("glue_dir", "model") if (value := getattr(args, key)) is not None}
    try:
        compare(
            GRIDS / f"{args.profile}.yaml",
            Path(args.out) / FOLDERS.get(args.profile, args.profile),
            overrides=overrides,
            jobs=args.jobs,
            dry_run=args.dry_run,
            report_only=args.report_only,
            command=command,
        )
    except PalsError as err:
        print(f"quality: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
