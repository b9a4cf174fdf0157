"""The multi-task harness: tasks and data, samplers, method backends, the model, training with
transformers' `Trainer`, evaluation, per-task export, and the ``pals-bench`` CLI.

Needs the ``harness`` extra (``pip install "pals-adapters[harness]"``); the plugin itself
(``import pals_adapters``) does not.
"""

from ..lazy import lazy_exports
from .training.run_environment import quiet_deepspeed_cpu_notice

# public name -> its module, imported on first use (the harness's modules import torch, models and data)
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".comparison": ["compare", "export_row"],
        ".data.sampling": ["make_sampler"],
        ".export": ["TaskManifest", "export_run", "export_task", "load_task", "load_tasks"],
        ".methods.accounting": ["count_method_parameters"],
        ".methods.backend": ["MethodBackend", "get_backend", "register_backend"],
        ".methods.method": ["Method"],
        ".methods.model": ["MultiTaskModel", "build_model"],
        ".methods.registry": ["METHODS", "get_method", "register_method"],
        ".scoring.evaluate_metric": ["TaskMetric", "task_metric"],
        ".serving.predictor": ["MultiTaskPredictor"],
        ".tasks.glue": ["GLUE_TASKS", "get_task"],
        ".tasks.spec": ["TaskSpec"],
        ".tasks.splits": ["load_split"],
        ".tasks.user_tasks": ["custom_task", "load_task_specs"],
        ".run_config": ["RunConfig"],
        ".training.runner": ["run"],
    },
)

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
    "export_row",
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
