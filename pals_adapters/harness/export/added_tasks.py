"""Adding tasks to an existing export: the tasks it keeps must still fit the base, and the new ones are
written next to them (the old tasks' files are not touched)."""

from __future__ import annotations

from pathlib import Path

from ...errors import ConfigError
from ..methods.model import MultiTaskModel
from .files import BASE_DIR
from .manifest import (
    EvaluationRecord,
)
from .staging import staged_export
from .write import PathLike, _Base, _base_is_current, _check_exportable, _why_not_kept, _write_task, other_tasks


def export_added_task(
    model: MultiTaskModel,
    task: str,
    out_dir: PathLike,
    *,
    base_mode: str,
    base_model_name: str | None,
    metrics: dict | None = None,
    max_length: int | None = None,
    tokenizer=None,
    evaluation: EvaluationRecord | None = None,
    replace: bool = False,
    run_config=None,
) -> Path:
    """Writes a task trained later against an export's shared base into that export, next to its tasks,
    which are carried over unchanged (see `export_added_tasks`)."""
    return export_added_tasks(
        model,
        [task],
        out_dir,
        base_mode=base_mode,
        base_model_name=base_model_name,
        metrics_by_task={task: metrics} if metrics else None,
        max_length=max_length,
        tokenizer=tokenizer,
        evaluation=evaluation,
        replace=replace,
        run_config=run_config,
    )[task]


def export_added_tasks(
    model: MultiTaskModel,
    tasks,
    out_dir: PathLike,
    *,
    base_mode: str,
    base_model_name: str | None,
    metrics_by_task: dict[str, dict] | None = None,
    max_length: int | None = None,
    tokenizer=None,
    evaluation: EvaluationRecord | None = None,
    replace: bool = False,
    run_config=None,
) -> dict[str, Path]:
    """Writes tasks trained later against an export's shared base into that export, in one step, next to its
    other tasks, which are carried over unchanged. The base is not written again: the model must hold the one
    there (same fingerprint as every task of the export), with the export's method. A task the export already
    has is refused unless ``replace`` (then its folder is replaced, the others stay byte for byte). Each task
    written gets its model card (``run_config``: the run's settings, for its training section); the others'
    cards stay as they are."""
    tasks = list(tasks)
    for task in tasks:
        _check_exportable(model, task)
    base = _Base(model, tokenizer)
    metrics_by_task = metrics_by_task or {}
    with staged_export(out_dir, only=tasks) as staging:
        existing = other_tasks(out_dir, ())  # every task of the export (read under the export's lock)
        taken = sorted(set(tasks) & set(existing))
        if taken and not replace:
            raise ConfigError(
                f"{out_dir} already has tasks {taken}; replace them with replace=True; nothing was written"
            )
        refused = {name: why for name, m in existing.items() if (why := _why_not_kept(m, model, base, base_mode))}
        if not existing:
            raise ConfigError(
                f"{out_dir} holds no task to add to; give the export folder of a run; nothing was written"
            )
        if refused or (base_mode == "finetune" and not _base_is_current(staging / BASE_DIR, base)):
            detail = "; ".join(f"{name}: {why}" for name, why in refused.items()) or f"{BASE_DIR}/ differs"
            raise ConfigError(f"{out_dir}: the model's base is not the export's base ({detail}); nothing was written")
        # a frozen base carried in the export (``with_base``): the new tasks name it as the others do
        carried = base_mode == "frozen" and _base_is_current(staging / BASE_DIR, base)
        for task in tasks:
            _write_task(
                model,
                task,
                staging / task,
                base,
                base_model_name,
                metrics_by_task.get(task),
                max_length,
                evaluation,
                base_mode=base_mode,
                run_config=run_config,
                with_base=carried,
            )
    return {task: Path(out_dir) / task for task in tasks}
