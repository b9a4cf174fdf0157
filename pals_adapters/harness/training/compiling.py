"""torch.compile for a `MultiTaskModel`: how many graphs it may keep, and the Trainer's compile switch.

Each task's forward is its own graph (the active adapter is part of what torch.compile checks before
it reuses one), and so is training against evaluation, and a batch mixing tasks. torch's default of
8 graphs per function would send the 5th task of an 8-task run back to eager Python without a word;
`allow_task_graphs` makes room for all of them, so a change of task costs no compilation after each
task's first step. `prepare_compile` also has compiled code draw its random numbers (dropout) with
torch's own kernels, as eager code does: inductor's generated CPU code seeds a generator per element,
which made a compiled training step slower than the eager one.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch
import torch._inductor.config  # noqa: F401  (torch._inductor.config.fallback_random below)
from torch import nn

# Graphs one task may need: training and evaluation forwards, then each with shapes marked dynamic
# after the first change of batch shape.
GRAPHS_PER_TASK = 4
# TrainingArguments(torch_compile=True) tells accelerate to compile through these environment variables
# and leaves them set for the rest of the process.
ACCELERATE_DYNAMO_PREFIX = "ACCELERATE_DYNAMO_"


def allow_task_graphs(num_tasks: int) -> None:
    """Raises torch.compile's graph limit per function to fit ``num_tasks`` tasks (never lowers it)."""
    config = torch._dynamo.config
    needed = GRAPHS_PER_TASK * num_tasks + 2  # + a mixed-task batch, trained and evaluated
    config.recompile_limit = max(config.recompile_limit, needed)
    config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, 4 * needed)


def prepare_compile(num_tasks: int) -> None:
    """Process-wide settings for compiling a model of ``num_tasks`` tasks: a graph per task, and random
    numbers from torch's kernels (faster than inductor's on a CPU, and the same draws as eager code except
    for the PAL attention's dropout on a CPU: see `pals_adapters.pals.dropout_attention`)."""
    allow_task_graphs(num_tasks)
    torch._inductor.config.fallback_random = True


def compile_model(model: nn.Module, **options) -> nn.Module:
    """``torch.compile(model, **options)`` after `prepare_compile`; the compiled module forwards attribute
    reads (``tasks``, ``backbone``) to the model."""
    prepare_compile(len(getattr(model, "tasks", {})) or 1)
    return torch.compile(model, **options)


@contextlib.contextmanager
def trainer_compile_environment(enabled: bool) -> Iterator[None]:
    """The block runs with accelerate's compile switch as this run asks (on or off), whatever an earlier run
    in the process left in the environment; the environment is put back afterwards."""
    saved = {key: value for key, value in os.environ.items() if key.startswith(ACCELERATE_DYNAMO_PREFIX)}
    if not enabled:
        for key in saved:
            del os.environ[key]
    try:
        yield
    finally:
        for key in [k for k in os.environ if k.startswith(ACCELERATE_DYNAMO_PREFIX)]:
            del os.environ[key]
        os.environ.update(saved)
