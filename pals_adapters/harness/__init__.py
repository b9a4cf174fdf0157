"""The multi-task harness: tasks and data, samplers, method backends, the model, training with
transformers' `Trainer`, evaluation, per-task export, and the ``pals-bench`` CLI.

Needs the ``harness`` extra (``pip install "pals-adapters[harness]"``); the plugin itself
(``import pals_adapters``) does not.
"""

from .compare import compare
from .data.sampling import make_sampler
from .export import TaskManifest, export_run, export_task, load_task, load_tasks
from .methods.accounting import count_method_parameters
from .methods.backend import MethodBackend, get_backend, register_backend
from .methods.method import Method
from .methods.model import MultiTaskModel, build_model
from .methods.registry import METHODS, get_method, register_method
from .scoring.evaluate_metric import TaskMetric, task_metric
from .serving.predictor import MultiTaskPredictor
from .tasks.glue import GLUE_TASKS, get_task
from .tasks.spec import TaskSpec
from .tasks.splits import load_split
from .tasks.user_tasks import custom_task, load_task_specs
from .training.run_environment import quiet_deepspeed_cpu_notice
from .training.runner import RunConfig, run

quiet_deepspeed_cpu_notice()  # a line every run printed, DeepSpeed or not

__all__ = [
    "GLUE_TASKS",
    "METHODS",
    "Method",
    "MethodBackend",
    "MultiTaskModel",
    "MultiTaskPredictor",
    "RunConfig",
    "TaskManifest",
    "TaskMetric",
    "TaskSpec",
    "build_model",
    "compare",
    "count_method_parameters",
    "custom_task",
    "export_run",
    "export_task",
    "get_backend",
    "get_method",
    "get_task",
    "load_split",
    "load_task",
    "load_tasks",
    "load_task_specs",
    "make_sampler",
    "register_backend",
    "register_method",
    "run",
    "task_metric",
]
