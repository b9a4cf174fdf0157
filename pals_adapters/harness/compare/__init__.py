"""`compare`: methods compared on the same tasks, data and budget, from one grid file (``pals-bench compare``)."""

from .api import compare

__all__ = ["compare"]
