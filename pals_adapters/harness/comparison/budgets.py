"""The budget of a comparison's runs: the training examples each task sees (steps x batch, split among
the tasks as the run's sampler draws them, in expectation), and the number of dev examples each task is
scored on. Task sizes are read once per grid, as the runs will read them."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ...errors import ConfigError

if TYPE_CHECKING:
    from ..run_config import RunConfig
    from ..tasks.spec import TaskSpec

logger = logging.getLogger(__name__)

EQUAL, PER_TASK_STEPS = "equal", "per_task_steps"
SEPARATE_BUDGETS = (EQUAL, PER_TASK_STEPS)
# What a multi-task run's budget is made of: a separate row trains each task for its share of it.
BUDGET_SETTINGS = ("max_steps", "sampler", "alpha", "steps_per_epoch")
MIN_DEV_EXAMPLES = 2  # a score, a bootstrap and a floor need two dev examples or more


class TaskSizes:
    """Training and dev examples per task, each split read once (the runs read the same files)."""

    def __init__(self, glue_dir: str | None, source: str):
        self.glue_dir, self.source = glue_dir, source
        self._rows: dict[tuple[str, str], int] = {}

    def _count(self, spec: TaskSpec, split: str) -> int:
        key = (spec.name, split)
        if key not in self._rows:
            from ..tasks.splits import load_split  # the data libraries: loaded when a grid is planned, not at import

            self._rows[key] = len(load_split(spec, split, glue_dir=self.glue_dir, source=self.source))
        return self._rows[key]

    def train(self, specs: dict[str, TaskSpec], max_train_examples: int | None) -> dict[str, int]:
        """The training examples a run samples from: the subset of ``max_train_examples`` where set."""
        sizes = {name: self._count(spec, "train") for name, spec in specs.items()}
        return {name: min(n, max_train_examples) if max_train_examples else n for name, n in sizes.items()}

    def dev(self, spec: TaskSpec, max_eval_examples: int | None) -> dict[str, int]:
        """The dev examples scored per dev split: the first ``max_eval_examples`` where set."""
        sizes = {split: self._count(spec, split) for split in spec.dev_splits}
        return {split: min(n, max_eval_examples) if max_eval_examples else n for split, n in sizes.items()}


def expected_steps(config: RunConfig, sizes: dict[str, int]) -> dict[str, float]:
    """The steps each task is expected to train in a run of ``config`` (a validated one: its sampler
    resolved): its sampling probability summed over the steps. The probabilities change only from one
    sampling epoch to the next, so one row of `schedule` per epoch, weighted by its steps, is exact."""
    if len(sizes) == 1:
        return {name: float(config.max_steps) for name in sizes}
    from ..data.sampling import make_sampler
    from ..data.schedule import schedule

    sampler = make_sampler(
        config.sampler,
        sizes,
        total_steps=config.max_steps,
        steps_per_epoch=config.steps_per_epoch,
        alpha=config.alpha,
    )
    steps = dict.fromkeys(sizes, 0.0)
    for row in schedule(sampler, config.max_steps):
        length = min(sampler.steps_per_epoch, config.max_steps - row["step"])
        for name in sizes:
            steps[name] += row[f"p_{name}"] * length
    return {name: round(n, 6) for name, n in steps.items()}  # no float dust in the report


def separate_steps(multi_task_steps: dict[str, float]) -> dict[str, int]:
    """Whole steps for each task's own run: its expected steps in the multi-task run, at least one."""
    return {name: max(1, round(steps)) for name, steps in multi_task_steps.items()}


def check_dev_examples(where: str, spec: TaskSpec, counts: dict[str, int]) -> None:
    """ConfigError before any run when a task would be scored on fewer than two dev examples."""
    for split, n in counts.items():
        if n < MIN_DEV_EXAMPLES:
            raise ConfigError(
                f"{where}: task {spec.name!r} would be scored on {n} dev example{'s' * (n != 1)} ({split}); a "
                f"comparison needs at least {MIN_DEV_EXAMPLES} per task (scores, intervals and the floor): raise "
                "max_eval_examples or give the task more dev rows"
            )


def warn_without_loss_curve(where: str, configs: list[RunConfig]) -> None:
    """A warning before training when runs are shorter than their logging_steps (no loss logged)."""
    short = [c for c in configs if c.logging_steps > c.max_steps]
    if short:
        logger.warning(
            "%s: logging_steps %d exceeds the %d steps of %s: no training loss is logged, so no loss curve is "
            "drawn; lower logging_steps to get one",
            where,
            short[0].logging_steps,
            min(c.max_steps for c in short),
            "its runs" if len(short) == len(configs) else "some of its runs",
        )
