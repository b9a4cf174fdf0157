"""The multi-task harness: tasks and data, samplers, method backends, the model, training with
transformers' `Trainer`, evaluation, per-task export, and the ``pals-bench`` CLI.

Needs the ``harness`` extra (``pip install "pals-adapters[harness]"``); the plugin itself
(``import pals_adapters``) does not.
"""

from .accounting import count_method_parameters
from .backends import MethodBackend, get_backend, register_backend
from .data import load_split
from .evaluate_metric import TaskMetric, task_metric
from .export import TaskManifest, export_run, export_task, load_task
from .methods import METHODS, Method, get_method, register_method
from .model import MultiTaskModel, build_model
from .runner import RunConfig, run
from .sampling import make_sampler
from .tasks import GLUE_TASKS, TaskSpec, custom_task, get_task, load_task_specs

__all__ = [
    "GLUE_TASKS",
    "METHODS",
    "Method",
    "MethodBackend",
    "MultiTaskModel",
    "RunConfig",
    "TaskManifest",
    "TaskMetric",
    "TaskSpec",
    "build_model",
    "count_method_parameters",
    "custom_task",
    "export_run",
    "export_task",
    "get_backend",
    "get_method",
    "get_task",
    "load_split",
    "load_task",
    "load_task_specs",
    "make_sampler",
    "register_backend",
    "register_method",
    "run",
    "task_metric",
]
