"""Projected Attention Layers (PALs) and CA-MTL for the AdapterHub `adapters` library, and a multi-task harness.

``import pals_adapters`` registers the ``"pals"`` adapter config type and its presets
(``pals``, ``pals_no_share``, ``low_rank``, ``pals_top_layers``, ``pals_bottom_layers``)::

    model.add_adapter("sst", config="pals")

The presets' old names ``pals_top`` / ``pals_bottom`` (`RENAMED_PRESETS`) still work until 0.3, with a
`RenamedWarning`.
"""

from .accounting import ParameterCount, count_parameters
from .architectures import ARCHITECTURES, PALSite, supports_pals
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

__version__ = "0.1.0"

register()  # PALs first, then CA-MTL: their patches of the same adapters functions stack in this order
from .ca_mtl import CAMTLConfig  # noqa: E402, F401  (importing it registers config="ca_mtl")

__all__ = [
    "ARCHITECTURES",
    "PALSite",
    "supports_pals",
    "PALS_PRESETS",
    "RENAMED_PRESETS",
    "PALsConfig",
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
