"""Task sampling for multi-task training.

A multi-task run trains one task per batch; a `TaskSampler` picks the
task for each optimiser step. The strategies follow "BERT and PALs"
(Stickland & Murray, 2019) and CA-MTL (Pilault et al., 2021):

- ``round_robin``: tasks in turn, task ``step % n``.
- ``proportional``: ``p_i ∝ N_i`` (``N_i`` = training-set size of task ``i``).
- ``sqrt``: ``p_i ∝ N_i ** 0.5``.
- ``temperature``: ``p_i ∝ N_i ** alpha`` for a given ``alpha >= 0`` (``alpha=0`` is uniform).
- ``annealed``: ``p_i ∝ N_i ** alpha_e`` with ``alpha_e = 1 - 0.8 * (e - 1) / (E - 1)``,
  where ``e = 1..E`` is the current epoch (``steps_per_epoch`` steps each)
  and ``E = ceil(total_steps / steps_per_epoch)``; see `annealing_alpha`.
- ``mt_uncertainty``: every step draws a candidate batch from *every* task and keeps the most
  uncertain examples (`select_uncertain`), so no single task is chosen.

Determinism: the task at step ``s`` is a pure function of ``(seed, s)``
(a fresh ``np.random.default_rng([seed, s])`` per step). There is no hidden
RNG state, so a resumed run continues the exact same sequence from any step,
and every rank of a distributed run that uses the same seed agrees without
communication. ``state_dict`` only records the configuration so a checkpoint
can check that it is resumed with the same sampler.

Invalid arguments raise `ConfigError` (unknown
strategy names `UnknownNameError`); both are
``ValueError`` subclasses.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...errors import ConfigError, UnknownNameError

__all__ = [
    "STRATEGIES",
    "TaskSampler",
    "annealing_alpha",
    "make_sampler",
]

STRATEGIES: tuple[str, ...] = (
    "round_robin",
    "proportional",
    "sqrt",
    "temperature",
    "annealed",
    "mt_uncertainty",
)

# Annealing end points from the PALs paper: alpha goes 1.0 -> 0.2.
_ALPHA_START = 1.0
_ALPHA_END = 0.2

_STATE_VERSION = 1


def is_int(value: Any) -> bool:
    # bool is an int subclass, but True as a step count is always a mistake.
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_positive_int(name: str, value: Any) -> int:
    if not is_int(value) or value <= 0:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _check_step(step: Any) -> int:
    if not is_int(step) or step < 0:
        raise ConfigError(f"step must be a non-negative integer, got {step!r}")
    return int(step)


def annealing_alpha(step: int, total_steps: int, steps_per_epoch: int) -> float:
    """Exponent ``alpha_e = 1 - 0.8 * (e - 1) / (E - 1)`` for the epoch holding ``step``.

    ``e = step // steps_per_epoch + 1`` and ``E = ceil(total_steps / steps_per_epoch)``,
    so alpha is 1.0 in the first epoch and exactly 0.2 in the last one. Steps at
    or past ``total_steps`` stay in the last epoch (alpha 0.2). When ``E == 1``
    the formula is undefined (0/0); alpha is then 1.0 throughout, i.e. plain
    proportional sampling, since there is no later epoch to anneal towards.
    """
    step = _check_step(step)
    total_steps = check_positive_int("total_steps", total_steps)
    steps_per_epoch = check_positive_int("steps_per_epoch", steps_per_epoch)
    num_epochs = -(-total_steps // steps_per_epoch)  # ceil without float error
    if num_epochs == 1:
        return _ALPHA_START
    epoch = min(step // steps_per_epoch + 1, num_epochs)
    if epoch == num_epochs:
        # Return the end point exactly; 1 - 0.8 is 0.19999999999999996 in floats.
        return _ALPHA_END
    return _ALPHA_START - (_ALPHA_START - _ALPHA_END) * (epoch - 1) / (num_epochs - 1)


class TaskSampler:
    """Chooses the task trained at each step; build one with `make_sampler`.

    Task indices follow the insertion order of ``task_sizes``. All methods are
    pure functions of the configuration and the step, so the same sampler gives
    the same answer on every rank and after a restart.
    """

    def __init__(
        self,
        strategy: str,
        task_sizes: Mapping[str, int],
        *,
        seed: int = 0,
        total_steps: int | None = None,
        steps_per_epoch: int = 2400,
        alpha: float | None = None,
    ) -> None:
        if strategy not in STRATEGIES:
            raise UnknownNameError("sampling strategy", strategy, STRATEGIES)
        if not isinstance(task_sizes, Mapping) or len(task_sizes) == 0:
            raise ConfigError("task_sizes must be a non-empty dict {task_name: training-set size}")
        for name, size in task_sizes.items():
            if not isinstance(name, str) or not name:
                raise ConfigError(f"task_sizes keys must be non-empty strings, got {name!r}")
            if not is_int(size) or size <= 0:
                raise ConfigError(
                    f"task_sizes[{name!r}] must be a positive integer (number of training examples), got {size!r}"
                )
        if not is_int(seed) or seed < 0:
            raise ConfigError(f"seed must be a non-negative integer, got {seed!r}")
        steps_per_epoch = check_positive_int("steps_per_epoch", steps_per_epoch)
        if total_steps is not None:
            total_steps = check_positive_int("total_steps", total_steps)
        if strategy == "annealed" and total_steps is None:
            raise ConfigError(
                "total_steps is required for strategy 'annealed' (it fixes the number "
                "of epochs E over which alpha goes from 1.0 to 0.2)"
            )
        if alpha is not None:
            if strategy != "temperature":
                # Silently ignoring it would hide a misconfigured run.
                raise ConfigError(f"alpha only applies to strategy 'temperature', not {strategy!r}; leave alpha=None")
            if not isinstance(alpha, numbers.Real) or isinstance(alpha, bool):
                raise ConfigError(f"alpha must be a real number >= 0, got {alpha!r}")
            alpha = float(alpha)
            if not math.isfinite(alpha) or alpha < 0:
                raise ConfigError(f"alpha must be a finite number >= 0, got {alpha!r}")
        elif strategy == "temperature":
            raise ConfigError("alpha is required for strategy 'temperature' (e.g. alpha=0.5)")

        self.strategy = strategy
        self.task_names: list[str] = list(task_sizes)
        self.task_sizes: list[int] = [int(task_sizes[n]) for n in self.task_names]
        self.seed = int(seed)
        self.total_steps = total_steps
        self.steps_per_epoch = steps_per_epoch
        self.alpha = alpha
        # Logs let N ** alpha be formed as exp(alpha * (log N - max log N)),
        # which cannot overflow for any alpha.
        self._log_sizes = np.log(np.asarray(self.task_sizes, dtype=np.float64))
        # alpha -> (probabilities, cdf, last task with p > 0). Few distinct alphas
        # occur (one per epoch at most), and caching makes sample() ~3x faster.
        self._by_alpha: dict[float, tuple[np.ndarray, np.ndarray, int]] = {}

    @property
    def num_tasks(self) -> int:
        return len(self.task_names)

    def __repr__(self) -> str:
        sizes = dict(zip(self.task_names, self.task_sizes))
        return (
            f"TaskSampler(strategy={self.strategy!r}, task_sizes={sizes}, seed={self.seed}, "
            f"total_steps={self.total_steps}, steps_per_epoch={self.steps_per_epoch}, "
            f"alpha={self.alpha})"
        )

    def alpha_at(self, step: int) -> float | None:
        """Size exponent in force at ``step``; ``None`` for round_robin and mt_uncertainty."""
        step = _check_step(step)
        if self.strategy == "proportional":
            return 1.0
        if self.strategy == "sqrt":
            return 0.5
        if self.strategy == "temperature":
            return self.alpha
        if self.strategy == "annealed":
            assert self.total_steps is not None
            return annealing_alpha(step, self.total_steps, self.steps_per_epoch)
        return None

    def probabilities(self, step: int) -> np.ndarray:
        """Distribution over task indices at ``step`` (float64, sums to 1).

        round_robin returns the uniform distribution, i.e. each task's share of
        steps (the task itself is fixed, ``step % n``; a one-hot vector would
        make schedules sampled every k steps misleading). mt_uncertainty also
        returns the uniform distribution: every step uses a candidate batch from
        every task, so no task is favoured.
        """
        return self._distribution(step)[0].copy()

    def _distribution(self, step: int) -> tuple[np.ndarray, np.ndarray, int]:
        alpha = self.alpha_at(step)
        if alpha is None:  # uniform strategies
            alpha = 0.0
        cached = self._by_alpha.get(alpha)
        if cached is None:
            weights = np.exp(alpha * (self._log_sizes - self._log_sizes.max()))
            probs = weights / weights.sum()
            cached = (probs, np.cumsum(probs), int(np.flatnonzero(probs)[-1]))
            self._by_alpha[alpha] = cached
        return cached

    def sample(self, step: int) -> int:
        """Task index trained at ``step``; a pure function of ``(seed, step)``.

        For mt_uncertainty this is a uniform draw and carries no meaning for
        training (every step uses all tasks); it exists so every sampler shares
        one interface.
        """
        step = _check_step(step)
        if self.strategy == "round_robin":
            return step % self.num_tasks
        _, cdf, last = self._distribution(step)
        # A fresh generator keyed on (seed, step): no state to save or sync.
        u = np.random.default_rng([self.seed, step]).random()
        index = int(np.searchsorted(cdf, u, side="right"))
        # cdf[-1] can round to just below 1; never return a zero-probability task.
        return min(index, last)

    def sequence(self, start: int, stop: int) -> list[int]:
        """Task indices for steps ``start, ..., stop - 1``."""
        start = _check_step(start)
        if not is_int(stop) or stop < start:
            raise ConfigError(f"stop must be an integer >= start ({start}), got {stop!r}")
        return [self.sample(s) for s in range(start, int(stop))]

    def state_dict(self) -> dict[str, Any]:
        """Configuration (JSON-serialisable); the sampler has no other state."""
        return {
            "version": _STATE_VERSION,
            "strategy": self.strategy,
            "task_names": list(self.task_names),
            "task_sizes": list(self.task_sizes),
            "seed": self.seed,
            "total_steps": self.total_steps,
            "steps_per_epoch": self.steps_per_epoch,
            "alpha": self.alpha,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Check that ``state`` matches this sampler's configuration.

        Since sampling is a pure function of the configuration and the step,
        nothing is restored; a mismatch means the run would resume with a
        different task sequence, so it raises ``ConfigError`` (a ``ValueError``) naming the field.
        """
        mine = self.state_dict()
        for field, expected in mine.items():
            if field not in state:
                raise ConfigError(f"sampler state is missing field {field!r}")
            got = state[field]
            # Checkpoints may round-trip through JSON, turning tuples into lists.
            if isinstance(got, tuple):
                got = list(got)
            if got != expected:
                raise ConfigError(
                    f"sampler state field {field!r} does not match: checkpoint has "
                    f"{got!r}, this sampler has {expected!r}; build the sampler with "
                    "the checkpoint's configuration"
                )


def make_sampler(
    strategy: str,
    task_sizes: dict[str, int],
    *,
    seed: int = 0,
    total_steps: int | None = None,
    steps_per_epoch: int = 2400,
    alpha: float | None = None,
) -> TaskSampler:
    """Build a `TaskSampler` for one of `STRATEGIES`.

    ``alpha`` is required for (and only accepted by) ``"temperature"``;
    ``total_steps`` is required for ``"annealed"``.
    """
    return TaskSampler(
        strategy,
        task_sizes,
        seed=seed,
        total_steps=total_steps,
        steps_per_epoch=steps_per_epoch,
        alpha=alpha,
    )
