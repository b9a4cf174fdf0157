"""Start-up time: ``pals-bench --help``, each verb's ``--help`` and the package imports, each in a fresh process,
beside the imports they leave to the verbs (torch, adapters) timed the same way, interleaved, on the same machine.

    python -m benchmarks run startup                          # 5 timed runs of each (after one warm-up), median
    python -m benchmarks run startup --repeats 1 --out-dir /tmp/startup

Writes benchmarks/results/startup/startup.{json,md}. Exits 1 if a help takes 2 s or more (median), or imports one
of the heavy libraries (torch, transformers, adapters, datasets, evaluate, peft): the verbs import them when they
run, not to print their options.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import command_line, machine_info, markdown_table, print_and_write, results_dir, verdict_line

DESCRIPTION = "start-up: pals-bench --help and each verb's, the package imports, beside torch and adapters"

HEAVY = ("torch", "transformers", "adapters", "datasets", "evaluate", "peft", "ray")
HELP_LIMIT_S = 2.0
VERBS = ("train", "evaluate", "predict", "export", "schedule", "compare", "params")
IMPORTS = {  # what a user's program pays on its first line, and what the help leaves to the verbs
    "import pals_adapters": "import pals_adapters",
    "import pals_adapters.harness": "import pals_adapters.harness",
    "import torch": "import torch",
    "import adapters": "import adapters",
    "from adapters import AutoAdapterModel": "from adapters import AutoAdapterModel",  # a program that builds one
    "import pals_adapters, adapters": "import pals_adapters, adapters; adapters.AdapterConfig.load('pals')",
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each command (after one warm-up)")
    parser.add_argument("--out-dir", default=str(results_dir("startup")), help="where to write the results")
    parser.add_argument("--name", default="startup", help="file name of the results, without extension")
    return parser.parse_args(argv)


def help_arguments() -> dict[str, list[str]]:
    """``pals-bench`` arguments of every help, by how a user types it."""
    return {"pals-bench --help": ["--help"]} | {f"pals-bench {verb} --help": [verb, "--help"] for verb in VERBS}


def pals_bench() -> list[str]:
    """The ``pals-bench`` a user runs: the script installed beside this Python (else the module it runs)."""
    script = shutil.which("pals-bench", path=str(Path(sys.executable).parent)) or shutil.which("pals-bench")
    return [script] if script else [sys.executable, "-m", "pals_adapters.harness.cli"]


def heavy_imports(argv: list[str]) -> list[str]:
    """The heavy libraries that ``python -m pals_adapters.harness.cli ARGV`` imports, from python's own
    ``-X importtime`` list of every module a process imports."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "pals_adapters.harness.cli", *argv],
        capture_output=True,
        text=True,
        check=True,
    )
    names = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return sorted(name for name in HEAVY if name in names)


def _seconds(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def measure(commands: dict[str, list[str]], repeats: int) -> dict[str, list[float]]:
    """Seconds of each command over ``repeats`` rounds, every command once per round (interleaved, so that a
    busy moment of the machine falls on all of them), after one untimed round that warms the file cache."""
    for command in commands.values():
        _seconds(command)
    times = {name: [] for name in commands}
    for _ in range(repeats):
        for name, command in commands.items():
            times[name].append(_seconds(command))
    return times


def main(argv=None):
    args = parse_args(argv)
    if args.repeats < 1:
        raise SystemExit("--repeats must be 1 or more")
    helps = {name: [*pals_bench(), *arguments] for name, arguments in help_arguments().items()}
    heavy = {name: heavy_imports(arguments) for name, arguments in help_arguments().items()}
    imports = {name: [sys.executable, "-c", code] for name, code in IMPORTS.items()}
    times = measure({**helps, **imports}, args.repeats)
    medians = {name: statistics.median(seconds) for name, seconds in times.items()}
    slow = [name for name in helps if medians[name] >= HELP_LIMIT_S]
    loaded = [name for name in helps if heavy[name]]
    passed = not slow and not loaded
    rows = [
        [name, f"{medians[name]:.2f}", f"{min(times[name]):.2f}", ", ".join(heavy.get(name, [])) or "none"]
        for name in helps
    ] + [[name, f"{medians[name]:.2f}", f"{min(times[name]):.2f}", ""] for name in imports]
    verdict = verdict_line(
        passed,
        f"every help under {HELP_LIMIT_S:g} s (median) and none imports {', '.join(HEAVY)}"
        + (f"; slow: {', '.join(slow)}" if slow else "")
        + (f"; heavy imports: {', '.join(loaded)}" if loaded else ""),
    )
    machine = machine_info()
    lines = [
        "# Start-up time",
        "",
        f"Wall-clock seconds of a fresh process, median and fastest of {args.repeats} interleaved runs after a "
        f"warm-up; {machine['cpu_model']} ({os.cpu_count()} cores), Python {machine['python']}.",
        "",
        markdown_table(["command", "median (s)", "fastest (s)", "heavy libraries imported"], rows),
        "",
        verdict,
        "",
        f"Command: `{command_line('startup', argv or [])}`",
    ]
    data = {
        "command": command_line("startup", argv or []),
        "machine": machine,
        "repeats": args.repeats,
        "seconds": times,
        "median": medians,
        "heavy_imports": heavy,
        "check": {"limit_s": HELP_LIMIT_S, "passed": passed, "slow": slow, "heavy": loaded},
    }
    print_and_write(args.name, data, lines, args.out_dir)
    return 0 if passed else 1
