"""Tasks: what a task is (`spec`), the GLUE tasks (`glue`), a user's own tasks and task files
(`user_tasks`), reading rows from tsv/csv/jsonl files (`readers`), tasks of a `datasets` dataset
(`dataset_source`, `dataset_tasks`, `dataset_rows`), the checks every loaded row goes through
(`row_checks`), loading a split as a dataset (`splits`) and recording a run's task files (`file_record`).

A new task source is one module here that returns `TaskSpec`s.
"""

from ...lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".glue": ["GLUE_TASKS", "get_task"],
        ".spec": ["TaskSpec"],
        ".splits": ["load_split"],
        ".user_tasks": ["custom_task", "load_task_specs"],
    },
)

__all__ = ["GLUE_TASKS", "TaskSpec", "custom_task", "get_task", "load_split", "load_task_specs"]
