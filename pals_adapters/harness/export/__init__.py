"""Per-task export of a multi-task run, and loading one task back with every file checked.

`write` puts the shared base once and each task's own files into one folder per task; `read`
loads a task back after checking the sha256 of every file and the identity of its base (weights,
config, tokenizer); `manifest` is the typed record both use; `fingerprint` identifies a base;
`files` checks files; `staging` swaps a whole export in at once.
"""

from .files import BASE_DIR
from .fingerprint import base_config, base_state_dict, fingerprint, fingerprint_model, tokenizer_fingerprint
from .manifest import (
    BaseManifest,
    EvaluationRecord,
    MethodRecord,
    TaskManifest,
    read_base_manifest,
    read_task_manifest,
)
from .read import load_task, load_tasks, load_tokenizer, task_folders
from .write import export_base, export_run, export_task

__all__ = [
    "BASE_DIR",
    "BaseManifest",
    "EvaluationRecord",
    "MethodRecord",
    "TaskManifest",
    "base_config",
    "base_state_dict",
    "export_base",
    "export_run",
    "export_task",
    "fingerprint",
    "fingerprint_model",
    "load_task",
    "load_tasks",
    "load_tokenizer",
    "read_base_manifest",
    "read_task_manifest",
    "task_folders",
    "tokenizer_fingerprint",
]
