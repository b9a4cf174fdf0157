"""Tasks: what a task is (`spec`), the GLUE tasks (`glue`), a user's own tasks and task files
(`user_tasks`), reading rows from tsv/csv/jsonl files (`readers`), tasks of a `datasets` dataset
(`dataset_source`, `dataset_tasks`, `dataset_rows`), the checks every loaded row goes through
(`row_checks`), loading a split as a dataset (`splits`) and recording a run's task files (`file_record`).

A new task source is one module here that returns `TaskSpec`s.
"""

from .glue import GLUE_TASKS, get_task
from .spec import TaskSpec
from .splits import load_split
from .user_tasks import custom_task, load_task_specs

__all__ = ["GLUE_TASKS", "TaskSpec", "custom_task", "get_task", "load_split", "load_task_specs"]
