"""Adding a task later: train only the new task's parameters against the shared base of an existing
export (frozen), and export the task next to the others. The old tasks' files are not touched."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import AdapterLoadError, ConfigError
from .export.files import BASE_DIR, verify_files
from .export.manifest import read_base_manifest
from .export.read import _checked, task_folders
from .methods import Method


@dataclass(frozen=True)
class SharedBase:
    """What the tasks of an export share: the base they need, and the method that adds a task."""

    export_dir: Path
    method: Method
    base_mode: str  # how the base was made ("finetune": by the run, in <export>/base)
    fingerprint: str
    source: str  # folder or model name to load the base from
    base_model_name: str | None
    tasks: tuple[str, ...]


def shared_base_of(export_dir: str | Path) -> SharedBase:
    """The shared base of a run's export folder, every file of its tasks and base checked."""
    export_dir = Path(export_dir)
    checked = [_checked(folder, allow_pickle=False) for folder in task_folders(export_dir)]
    first, _, method = checked[0]
    for manifest, _, other in checked[1:]:
        if (other.spec, manifest.base_mode, manifest.base_fingerprint) != (
            method.spec,
            first.base_mode,
            first.base_fingerprint,
        ):
            raise AdapterLoadError(
                f"{export_dir}: its tasks do not share one method and base; give a run's export folder"
            )
    if first.base_mode == "finetune":
        base_dir = export_dir / BASE_DIR
        base = read_base_manifest(base_dir)  # a missing or unreadable manifest is an error
        verify_files(base_dir, base.files)
        if base.fingerprint != first.base_fingerprint:
            raise AdapterLoadError(f"{base_dir} is not the base its tasks were trained with (fingerprints differ)")
        source = str(base_dir)
    else:
        if not first.base_model_name:
            raise AdapterLoadError(f"{export_dir}: its tasks name no base model")
        source = first.base_model_name
    return SharedBase(
        export_dir,
        method,
        first.base_mode,
        first.base_fingerprint,
        source,
        first.base_model_name,
        tuple(spec.name for _, spec, _ in checked),
    )


def check_new_tasks(shared: SharedBase, tasks, method: Method) -> None:
    """Refuses tasks that the export already has, and a method other than the export's."""
    taken = sorted(set(tasks) & set(shared.tasks))
    if taken:
        raise ConfigError(f"add_to={shared.export_dir}: it already has tasks {taken}; give new task names")
    if method.spec != shared.method.spec:
        raise ConfigError(
            f"add_to={shared.export_dir}: its tasks use method {shared.method.spec!r}; a task added to it must "
            f"use the same (got {method.spec!r}) so that all tasks load onto one model"
        )
