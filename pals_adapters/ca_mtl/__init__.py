"""CA-MTL_BASE (Pilault, El hattami & Pal, ICLR 2021) as an `adapters` config type: ``config="ca_mtl"``.

``model.add_adapter("cola", config="ca_mtl")`` adds the task embedding of ``cola``; the conditional
modules are created once per model and shared by every CA-MTL task (see docs/ca-mtl.md)::

    import pals_adapters  # registers "pals" and "ca_mtl"
    model.add_adapter("cola", config="ca_mtl")
    model.add_adapter("rte", config="ca_mtl")
    model.train_adapter(MultiTask("cola", "rte"))  # task embeddings, conditional modules, upper layers
"""

from .accounting import CAMTLParameterCount, count_ca_mtl_parameters
from .attach import (
    SUPPORTED_MODEL_TYPES,
    attach_ca_mtl,
    ca_mtl_modules,
    detach_ca_mtl,
    is_ca_mtl_adapter,
    reinitialize_top_layer,
    trainable_shared_parameters,
)
from .config import CA_MTL_PRESETS, CAMTLConfig, CAMTLSizes
from .integration import register
from .modeling import (
    CAMTLModules,
    ConditionalAlignment,
    ConditionalAttentionBias,
    ConditionalBottleneck,
    ConditionalLayer,
    ConditionalLayerNorm,
    FiLM,
    film,
)
from .shared_modules import (
    SHARED_CONFIG_FILE,
    SHARED_MODULES_FILE,
    load_shared_modules,
    load_shared_state_dict,
    save_shared_modules,
    shared_state_dict,
)

__all__ = [
    "CA_MTL_PRESETS",
    "CAMTLConfig",
    "CAMTLModules",
    "CAMTLParameterCount",
    "CAMTLSizes",
    "ConditionalAlignment",
    "ConditionalAttentionBias",
    "ConditionalBottleneck",
    "ConditionalLayer",
    "ConditionalLayerNorm",
    "FiLM",
    "SHARED_CONFIG_FILE",
    "SHARED_MODULES_FILE",
    "SUPPORTED_MODEL_TYPES",
    "attach_ca_mtl",
    "ca_mtl_modules",
    "count_ca_mtl_parameters",
    "detach_ca_mtl",
    "film",
    "is_ca_mtl_adapter",
    "load_shared_modules",
    "load_shared_state_dict",
    "register",
    "reinitialize_top_layer",
    "save_shared_modules",
    "shared_state_dict",
    "trainable_shared_parameters",
]
