"""A run's settings validated and resolved once: `plan_run(RunConfig) -> RunPlan`.

`RunConfig` holds what a user wrote (the CLI, a YAML file, Python). `plan_run` checks every setting
(`RunConfig.validate`), parses the method string once, resolves the tasks, the export added to and the
base, and hands on one immutable `RunPlan`: what runs downstream reads the plan, never the method
string or the raw settings again.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from .methods.backend import MethodBackend, get_backend
from .methods.method import Method
from .run_config import RunConfig
from .serving.add_tasks import SharedBase
from .tasks.spec import TaskSpec


@dataclass(frozen=True)
class RunPlan:
    """One run, resolved. ``settings`` is a private copy of the validated `RunConfig` (the model, method
    and base filled in from the export with add_to): the numbers the trainer reads (steps, lr, batch
    size ...) and the record written to the run folder."""

    settings: RunConfig
    method: Method  # parsed once, settings checked by its backend
    backend: type[MethodBackend]  # the family that gives each task its parameters
    tasks: Mapping[str, TaskSpec]  # by canonical name, read-only
    shared: SharedBase | None  # the export the run adds tasks to (add_to), else None
    base_source: str  # where the base comes from: the model, or the export's base with add_to
    base_mode: str  # "frozen" or "finetune"
    sampler: str
    precision: str
    output_dir: Path
    export_dir: Path | None  # where the tasks are exported at the end (None: export=False)

    @property
    def task_specs(self) -> dict[str, TaskSpec]:
        """The tasks as a new dict (for the functions that take one)."""
        return dict(self.tasks)


def plan_run(config: RunConfig) -> RunPlan:
    """Checks every setting of ``config`` (ConfigError / UnknownNameError naming what to fix, before
    anything is loaded) and returns the resolved, immutable plan of the run."""
    resolved = config.validate_and_resolve()
    settings = copy.deepcopy(config)
    shared = resolved.shared
    if not settings.export or settings.selection is not None:  # a run scored on its selection part: no export
        export_dir = None
    elif shared is not None:
        export_dir = Path(shared.export_dir)
    else:
        export_dir = Path(settings.output_dir) / "export"
    return RunPlan(
        settings=settings,
        method=resolved.method,
        backend=get_backend(resolved.method.kind),
        tasks=MappingProxyType(dict(resolved.tasks)),
        shared=shared,
        base_source=shared.source if shared is not None else settings.model,
        base_mode=settings.base,
        sampler=settings.sampler,
        precision=settings.precision,
        output_dir=Path(settings.output_dir),
        export_dir=export_dir,
    )
