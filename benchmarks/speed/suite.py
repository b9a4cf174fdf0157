"""The speed suite: time and memory of a step, training throughput, and fp32 against bf16 on the CPU.

    python -m benchmarks run speed [options]               # step time and memory of each method (speed.step)
    python -m benchmarks run speed throughput [options]    # the harness's examples/s (speed.throughput)
    python -m benchmarks run speed precision [options]     # fp32 against bf16 autocast on the CPU (speed.precision)

``--help`` after any of them lists its options. Results go to benchmarks/results/speed/.
"""

import sys

from . import precision, step, throughput

DESCRIPTION = "speed and memory of a step per method; `throughput`: examples/s; `precision`: fp32 vs bf16 on CPU"
PARTS = {"throughput": throughput.main, "precision": precision.main}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in PARTS:
        program, sys.argv[0] = sys.argv[0], f"{sys.argv[0]} {argv[0]}"  # the part's usage line
        try:
            return PARTS[argv[0]](argv[1:])
        finally:
            sys.argv[0] = program
    return step.main(argv)
