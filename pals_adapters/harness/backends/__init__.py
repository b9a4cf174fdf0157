"""Method backends, one file each; importing this package registers the built-in ones."""

from . import adapter_configs, ca_mtl, heads, peft_lora, top_layers  # noqa: F401  (each registers itself)
from .base import MethodBackend, get_backend, register_backend

__all__ = ["MethodBackend", "get_backend", "register_backend"]
