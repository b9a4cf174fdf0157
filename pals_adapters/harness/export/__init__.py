"""Per-task export of a multi-task run, and loading one task back with every file checked.

`write` puts the shared base once and each task's own files into one folder per task; `read`
loads a task back after checking the sha256 of every file and the fingerprint of its base;
`manifest` is the typed record both use; `fingerprint` identifies a base; `files` keeps folders whole.
"""

from .files import BASE_DIR
from .fingerprint import base_state_dict, fingerprint, fingerprint_model
from .manifest import BaseManifest, MethodRecord, TaskManifest, read_base_manifest, read_task_manifest
from .read import load_task, load_tasks, task_folders
from .write import export_base, export_run, export_task

__all__ = [
    "BASE_DIR",
    "BaseManifest",
    "MethodRecord",
    "TaskManifest",
    "base_state_dict",
    "export_base",
    "export_run",
    "export_task",
    "fingerprint",
    "fingerprint_model",
    "load_task",
    "load_tasks",
    "read_base_manifest",
    "read_task_manifest",
    "task_folders",
]
