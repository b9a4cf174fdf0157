"""Process-wide state a run sets for itself and puts back afterwards: torch's thread count, and the run's
own precision in accelerate's environment switch, whatever the process had there before.

transformers' `TrainingArguments` tells accelerate the mixed precision through the environment variable
``ACCELERATE_MIXED_PRECISION``: it *reads* the variable first and keeps its value when the run asks for
neither fp16 nor bf16, and it leaves it set for the rest of the process. So a float32 run after a bfloat16
one in the same process (or launched from a shell or launcher that exported ``bf16``) trained under bfloat16
autocast without a word: its weights and scores silently changed. `run_precision_environment` sets the
variable to what the run's ``precision`` says for the run, warns when it overrides another value, and puts
the environment back afterwards.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

from ...errors import ConfigError

logger = logging.getLogger(__name__)

MIXED_PRECISION_VARIABLE = "ACCELERATE_MIXED_PRECISION"
# the run's precision setting -> accelerate's name for it
ACCELERATE_NAMES = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}


@contextlib.contextmanager
def run_precision_environment(precision: str) -> Iterator[None]:
    wanted = ACCELERATE_NAMES[precision]
    before = os.environ.get(MIXED_PRECISION_VARIABLE)
    if before not in (None, wanted):
        logger.warning(
            "%s=%s in the environment is not used: this run trains in %s (its precision setting, --precision)",
            MIXED_PRECISION_VARIABLE,
            before,
            precision,
        )
    os.environ[MIXED_PRECISION_VARIABLE] = wanted
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(MIXED_PRECISION_VARIABLE, None)
        else:
            os.environ[MIXED_PRECISION_VARIABLE] = before


@contextlib.contextmanager
def torch_threads(count: int | None):
    """Runs the block with ``count`` torch threads (None: as the process has them: OMP_NUM_THREADS, else
    one per core), and puts the number back after it."""
    if count is None:
        yield
        return
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ConfigError(f"threads={count!r}: give a whole number >= 1 (or leave it unset)")
    import torch  # here: the CLI imports this module to build its parser

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# DeepSpeed logs this when it is first imported on a machine without a GPU. transformers and accelerate import
# it whenever it is installed (every `save_pretrained` asks whether a model is a DeepSpeed engine), so every
# run, export and test printed it, DeepSpeed or not; a run that asks for DeepSpeed is told its device anyway.
_DEEPSPEED_CPU_NOTICE = "Setting accelerator to CPU"


def _not_the_deepspeed_cpu_notice(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith(_DEEPSPEED_CPU_NOTICE)


def quiet_deepspeed_cpu_notice() -> None:
    """Drops DeepSpeed's "Setting accelerator to CPU" line (its logger keeps everything else)."""
    deepspeed_logger = logging.getLogger("DeepSpeed")
    if _not_the_deepspeed_cpu_notice not in deepspeed_logger.filters:
        deepspeed_logger.addFilter(_not_the_deepspeed_cpu_notice)
