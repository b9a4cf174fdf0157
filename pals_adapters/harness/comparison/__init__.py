"""`compare`: methods compared on the same tasks, data and budget, from one grid file (``pals-bench compare``)."""

from ...lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".api": ["compare"],
        ".handoff": ["export_row"],
    },
)

__all__ = ["compare", "export_row"]
