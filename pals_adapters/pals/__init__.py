"""PALs (Stickland & Murray 2019) as an `adapters` config type: ``config="pals"`` and its presets.

``config`` holds `PALsConfig` and the presets, ``modeling`` the math (projections, the projected
attention layer), ``layer`` the glue between a transformer layer and the PAL modules of every adapter,
``integration`` the registration with `adapters` (every patch listed with its reason).
"""

from .config import PALS_PRESETS, RENAMED_PRESETS, PALsConfig
from .integration import (
    SUPPORTED_MODEL_TYPES,
    attach_pal_layers,
    is_pal_adapter,
    pal_config_of,
    register,
    shared_projections,
)
from .modeling import ProjectedAttentionLayer, ProjectedSelfAttention

__all__ = [
    "PALS_PRESETS",
    "RENAMED_PRESETS",
    "PALsConfig",
    "ProjectedAttentionLayer",
    "ProjectedSelfAttention",
    "SUPPORTED_MODEL_TYPES",
    "attach_pal_layers",
    "is_pal_adapter",
    "pal_config_of",
    "register",
    "shared_projections",
]
