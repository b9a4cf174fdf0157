"""The methods the harness compares: `Method` (a row: name, backend kind, settings), the registry by
name (`registry`), the backend protocol (`backend`) and one module per backend family
(`adapter_configs`, `ca_mtl`, `heads`, `peft_lora`, `top_layers`), the multi-task model that runs
them (`model`) and their parameter counts (`accounting`).

A new method family is one backend module here (subclass `MethodBackend`, call `register_backend`)
and one `register_method` entry.
"""

from ...lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".backend": ["MethodBackend", "get_backend", "register_backend"],
        ".method": ["BASE_MODES", "Method"],
        ".registry": ["METHODS", "OLD_NAMES", "current_name", "get_method", "register_method"],
    },
)

__all__ = [
    "BASE_MODES",
    "METHODS",
    "Method",
    "MethodBackend",
    "OLD_NAMES",
    "current_name",
    "get_backend",
    "get_method",
    "register_backend",
    "register_method",
]
