"""What a run records of its task files (sizes, digests), and finding them again in a moved data folder."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from ...errors import ConfigError
from .dataset_source import local_folder
from .spec import TaskSpec, spec_from_json, spec_to_json
from .user_tasks import split_files, with_data_dir

# --------------------------------------------------------------------------- the task as an export records it


def shared_spec_json(spec: TaskSpec, seen_from: str | os.PathLike) -> dict[str, Any]:
    """The task as a shared file records it: its data folder relative to ``seen_from`` (the export's task
    folder), never a local absolute path (the user's home, their environment)."""
    record = spec_to_json(spec)
    if spec.data_dir is not None:  # files given by absolute paths: relative to the task file's folder, as others
        record["splits"] = {split: relative_file(file, spec.data_dir) for split, file in spec.splits.items()}
        if record.get("dataset") and record["dataset"].get("data_files") is not None:
            record["dataset"]["data_files"] = relative_file(record["dataset"]["data_files"], spec.data_dir)
        here = os.path.normpath(os.path.abspath(seen_from))
        try:
            record["data_dir"] = Path(os.path.relpath(spec.data_dir, here)).as_posix()
        except ValueError:  # another drive (Windows): the folder's name, found again with --task-file
            record["data_dir"] = Path(spec.data_dir).name
    return record


def relative_file(files, data_dir: str | os.PathLike):
    """A file of a task (or a list or mapping of them, as ``data_files``) as a shared file records it: an absolute
    path relative to the task's ``data_dir`` (which moves with the export); a relative one as given."""
    if isinstance(files, list):
        return [relative_file(f, data_dir) for f in files]
    if isinstance(files, dict):
        return {key: relative_file(f, data_dir) for key, f in files.items()}
    if not isinstance(files, str) or not os.path.isabs(files):
        return files
    try:
        return Path(os.path.relpath(files, os.path.abspath(data_dir))).as_posix()
    except ValueError:  # another drive (Windows): by its name, found again with --task-file
        return Path(files).name


def relative_to(folder: str | os.PathLike | None, seen_from: str | os.PathLike) -> str | None:
    """``folder`` relative to ``seen_from`` (an export's task folder), as a shared file records a local
    folder (the rule a task's own data folder follows); None for no folder, or one on another drive
    (Windows)."""
    if folder is None:
        return None
    try:
        return Path(os.path.relpath(os.path.abspath(folder), os.path.abspath(seen_from))).as_posix()
    except ValueError:
        return None


def spec_from_shared_json(record: dict[str, Any], seen_from: str | os.PathLike) -> TaskSpec:
    """`shared_spec_json` read back: a relative data folder is where it was seen from ``seen_from``
    (exports written before recorded it absolute, and still load)."""
    spec = spec_from_json(record)
    if spec.data_dir is not None and not os.path.isabs(spec.data_dir):
        spec = with_data_dir(spec, os.path.normpath(os.path.join(os.path.abspath(seen_from), spec.data_dir)))
    return spec


# --------------------------------------------------------------------------- moved data folders


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def data_record(spec: TaskSpec, seen_from: str | os.PathLike) -> dict[str, Any] | None:
    """Where a user task's files are, seen from ``seen_from`` (an export's task folder), and the sha256 of
    each file that is there: what finds them again after the folders moved together, and tells whether
    the files found later are the ones the task was trained and scored on. None for GLUE tasks."""
    if spec.data_dir is None:
        return None
    relative = relative_to(spec.data_dir, seen_from)
    files = {split: Path(file) for split, file in split_files(spec).items()}
    return {
        "data_dir_from_export": relative,
        "sha256": {split: _sha256(path) for split, path in files.items() if path.is_file()},
    }


def locate_task_files(
    spec: TaskSpec, record: dict[str, Any] | None, seen_from: str | os.PathLike
) -> tuple[TaskSpec, str | None]:
    """The task with its files where they are now, and a note when they moved: at the recorded place when
    any of them is still there, else at the same place relative to ``seen_from`` (the export's task folder)
    as when it was written (a project folder copied or moved whole). Else the task as recorded (loading then
    says which file is missing and how to give the new place)."""
    if spec.data_dir is None or not record or not record.get("data_dir_from_export"):
        return spec, None
    if spec.dataset is not None and local_folder(spec) is None:
        return spec, None  # a Hub dataset: no files of the task's own
    if _data_present(spec):
        return spec, None
    moved = with_data_dir(spec, Path(seen_from) / record["data_dir_from_export"])
    if not _data_present(moved):
        return spec, None
    note = (
        f"task {spec.name!r}: its files are no longer in {spec.data_dir}; using {moved.data_dir}, where they "
        "were relative to the export"
    )
    return moved, note


def _data_present(spec: TaskSpec) -> bool:
    folder = local_folder(spec)  # a local dataset's folder, else the task's files
    return folder.exists() if folder is not None else any(Path(f).is_file() for f in split_files(spec).values())


def changed_files(spec: TaskSpec, record: dict[str, Any] | None) -> list[str]:
    """Notes on the task's files that differ from the ones recorded at export (sha256), e.g. a dev set that
    was edited: the scores of `evaluate` are then of the new file, not the run's."""
    recorded = (record or {}).get("sha256") or {}
    notes = []
    for split, file in split_files(spec).items():
        path = Path(file)
        if split in recorded and path.is_file() and _sha256(path) != recorded[split]:
            notes.append(
                f"task {spec.name!r}: {path} ({split}) differs from the file recorded at export (sha256): "
                "results are of the file as it is now"
            )
    return notes


def locate_glue_dir(
    spec: TaskSpec, name: str | None, from_export: str | None, task_dir: str | os.PathLike
) -> str | None:
    """The GLUE folder a GLUE task's export was scored on (``name``, the folder's name, and ``from_export``,
    its path from the export's task folder, as the manifest records them): where it was relative to the
    export (found again after the export and the data moved together), else at ``name`` where exports of
    earlier releases recorded an absolute path, else None to read env GLUE_DIR. A run that read a GLUE
    folder that none of these finds is refused naming the option (the hub's copy is other files than the
    run scored)."""
    recorded = [from_export and Path(task_dir).resolve() / from_export, name]
    for folder in recorded:
        if folder and Path(folder).is_absolute() and Path(folder).is_dir():
            return str(Path(folder).resolve())
    if os.environ.get("GLUE_DIR") or not name or spec.data_dir is not None or spec.dataset is not None:
        return None  # env GLUE_DIR, or a task that needs no GLUE folder
    raise ConfigError(
        f"{task_dir}: task {spec.name!r} was scored on the GLUE folder {name!r}, which is no longer where it was "
        f"relative to the export ({from_export or 'not recorded'}); give it with --glue-dir DIR (or set GLUE_DIR)"
    )
