"""Serving exported tasks: `MultiTaskPredictor` (`predictor`), request and answer files
(`request_files`), and adding a task to an existing export (`add_tasks`)."""

from ...lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "..export.read": ["load_tasks"],
        ".predictor": ["MultiTaskPredictor"],
    },
)

__all__ = ["MultiTaskPredictor", "load_tasks"]
