"""The main job: `pals-bench train` with the committed settings of main_job.yaml beside this file.

    python -m benchmarks run main_job --glue-dir ../shared/glue

is `pals-bench train --config benchmarks/main_job/main_job.yaml --glue-dir ../shared/glue`.

Options after the suite's name are `pals-bench train` options and win over the file's (e.g. `--seed 43`,
`--output-dir DIR`). It prints the per-task dev table and writes per-task exports to runs/main_job/export/.
"""

import sys
from pathlib import Path

from pals_adapters.harness.cli import main as pals_bench

DESCRIPTION = "the main job: multi-task PALs on the bundled MiniLM and five GLUE tasks (pals-bench train)"
CONFIG = Path(__file__).resolve().parent / "main_job.yaml"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return pals_bench(["train", "--config", str(CONFIG), *argv])
