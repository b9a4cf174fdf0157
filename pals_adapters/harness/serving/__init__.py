"""Serving exported tasks: `MultiTaskPredictor` (`predictor`), request and answer files
(`request_files`), and adding a task to an existing export (`add_tasks`)."""

from ..export.read import load_tasks
from .predictor import MultiTaskPredictor

__all__ = ["MultiTaskPredictor", "load_tasks"]
