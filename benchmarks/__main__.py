"""`python -m benchmarks list` and `python -m benchmarks run NAME [options]` (see benchmarks/__init__.py)."""

import argparse
import ast
import importlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def suite_names() -> list[str]:
    """The folders of benchmarks/ that hold a suite.py, sorted."""
    return sorted(p.parent.name for p in HERE.glob("*/suite.py"))


def load_suite(name: str):
    if name not in suite_names():
        raise SystemExit(
            f"unknown suite {name!r}; choose one of {', '.join(suite_names())} (python -m benchmarks list)"
        )
    return importlib.import_module(f"benchmarks.{name}.suite")


def description(name: str) -> str:
    """A suite's DESCRIPTION, read from its source: listing imports no suite (nor torch)."""
    tree = ast.parse((HERE / name / "suite.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "DESCRIPTION" for t in node.targets):
            return ast.literal_eval(node.value)
    raise SystemExit(f"benchmarks/{name}/suite.py defines no DESCRIPTION")


def list_suites() -> int:
    names = suite_names()
    width = max(map(len, names))
    for name in names:
        print(f"{name:<{width}}  {description(name)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description="The project's benchmark suites.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the suites and what each measures")
    run = sub.add_parser("run", help="run one suite; the options after its name are the suite's own")
    run.add_argument("name", help="a suite (python -m benchmarks list)")
    argv = sys.argv[1:] if argv is None else list(argv)
    # everything after `run NAME` belongs to the suite, `--help` included
    if len(argv) >= 2 and argv[0] == "run":
        suite = load_suite(argv[1])
        program, sys.argv[0] = sys.argv[0], f"python -m benchmarks run {argv[1]}"  # the suite's usage line
        try:
            return suite.main(argv[2:])
        finally:
            sys.argv[0] = program
    args = parser.parse_args(argv)
    if args.command == "list":
        return list_suites()
    parser.error("run needs a suite's name")


if __name__ == "__main__":
    sys.exit(main())
