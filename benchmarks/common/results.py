"""What every result file carries (the machine, the command that reproduces it) and where it goes."""

import datetime
import json
import os
import platform
import shlex
import sys
from pathlib import Path

import torch

RESULTS_DIR = Path(__file__).resolve().parents[1] / "results"  # benchmarks/results/<suite>/


def machine_info(device="cpu"):
    """What the numbers were measured on (goes into every result file)."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {
        "cpu_model": cpu,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
        "gpu": torch.cuda.get_device_name(0) if str(device).startswith("cuda") else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    for package in ("transformers", "adapters", "peft"):
        try:
            info[package] = __import__(package).__version__
        except ImportError:
            info[package] = None
    return info


def command_line(suite=None, argv=None):
    """The command that reproduces a run of ``suite`` (``"speed"``, or ``"speed throughput"`` for a
    suite's sub-command) with the options ``argv``, as the one entry point takes it; without a suite,
    the command line as typed."""
    if suite is None:
        return shlex.join(["python", *sys.argv])
    return shlex.join(["python", "-m", "benchmarks", "run", *suite.split(), *argv])


def results_dir(suite):
    """Where ``suite`` writes its results by default: ``benchmarks/results/<suite>/``."""
    return RESULTS_DIR / suite


def verdict_line(passed, text):
    """``PASS: text`` or ``FAIL: text``, the line a benchmark's check prints."""
    return f"{'PASS' if passed else 'FAIL'}: {text}"


def write_results(name, data, markdown, out_dir=None):
    """Writes ``<out_dir>/<name>.json`` and ``<out_dir>/<name>.md`` (default benchmarks/results); returns both
    paths."""
    out_dir = Path(out_dir or RESULTS_DIR)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / f"{name}.json", out_dir / f"{name}.md"
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    md_path.write_text(markdown.rstrip() + "\n")
    return json_path, md_path


def print_and_write(name, data, lines, out_dir=None):
    """Prints a report's Markdown lines, then writes them and ``data`` as write_results does, saying where."""
    print("\n".join(lines))
    json_path, md_path = write_results(name, data, "\n".join(lines), out_dir)
    print(f"wrote {json_path} and {md_path}")


def markdown_table(header, rows):
    """A GitHub-flavoured Markdown table; numbers are expected already formatted as strings."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)
