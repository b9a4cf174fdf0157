"""Projected Attention Layers (PALs) and CA-MTL for the AdapterHub `adapters` library, and a multi-task harness.

``import pals_adapters`` registers the ``"pals"`` adapter config type and its presets
(``pals``, ``pals_no_share``, ``low_rank``, ``pals_top_layers``, ``pals_bottom_layers``) and ``"ca_mtl"``::

    model.add_adapter("sst", config="pals")

The presets' old names ``pals_top`` / ``pals_bottom`` (`RENAMED_PRESETS`) still work until 0.3, with a
`RenamedWarning`.

Registration happens once `adapters` is imported, before or after this package (`registration`), and the
public names below are imported on first use: importing the package itself costs no torch import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import (
    AdapterLoadError,
    ConfigError,
    DataError,
    PalsError,
    RenamedWarning,
    UnknownNameError,
    UnsupportedModelError,
    UnsupportedOperationError,
)
from .lazy import lazy_exports
from .registration import register_when_adapters_imported

__version__ = "0.1.0"

# public name -> its module, imported on first use (the methods' modules import torch and adapters)
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".accounting": ["ParameterCount", "count_parameters"],
        ".architectures": ["ARCHITECTURES", "PALSite", "supports_pals"],
        ".ca_mtl": ["CAMTLConfig"],
        ".pals": [
            "PALS_PRESETS",
            "RENAMED_PRESETS",
            "SUPPORTED_MODEL_TYPES",
            "PALsConfig",
            "ProjectedAttentionLayer",
            "ProjectedSelfAttention",
            "attach_pal_layers",
            "is_pal_adapter",
            "register",
        ],
    },
)

if TYPE_CHECKING:
    from .accounting import ParameterCount, count_parameters
    from .architectures import ARCHITECTURES, PALSite, supports_pals
    from .ca_mtl import CAMTLConfig
    from .pals import (
        PALS_PRESETS,
        RENAMED_PRESETS,
        SUPPORTED_MODEL_TYPES,
        PALsConfig,
        ProjectedAttentionLayer,
        ProjectedSelfAttention,
        attach_pal_layers,
        is_pal_adapter,
        register,
    )


def _register_plugin() -> None:
    """PALs, then CA-MTL: their patches of the same adapters functions stack in this order. Idempotent."""
    from .ca_mtl.integration import register as register_ca_mtl
    from .pals.integration import register as register_pals

    register_pals()
    register_ca_mtl()


register_when_adapters_imported(_register_plugin)

__all__ = [
    "ARCHITECTURES",
    "PALSite",
    "supports_pals",
    "PALS_PRESETS",
    "RENAMED_PRESETS",
    "PALsConfig",
    "CAMTLConfig",
    "ParameterCount",
    "count_parameters",
    "ProjectedAttentionLayer",
    "ProjectedSelfAttention",
    "SUPPORTED_MODEL_TYPES",
    "attach_pal_layers",
    "is_pal_adapter",
    "register",
    "AdapterLoadError",
    "ConfigError",
    "DataError",
    "PalsError",
    "RenamedWarning",
    "UnknownNameError",
    "UnsupportedModelError",
    "UnsupportedOperationError",
]
