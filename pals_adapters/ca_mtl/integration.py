"""Registers CA-MTL with the `adapters` library, and the functions that work on a model's CA-MTL part.

`adapters` 1.3 has no public hook for a new adapter *method*, so `register()` makes small, idempotent
patches: the three below, and those of `contract` (the library's generic calls: summary, delete, load,
merge, fusion). Each wraps (never replaces) the library's code, and passes every call that does not
concern a CA-MTL adapter through unchanged; they carry their own marker attribute, so they sit on top
of the PAL patches of the same functions (in either order) without being skipped or doubled:

1. ``ADAPTER_CONFIG_MAP`` and ``AdapterConfig._get_config_class`` learn ``"ca_mtl"`` (``load_adapter``
   and ``from_pretrained`` read a config back as a dict keyed by ``"architecture"``).
   Reason: strings and saved configs must resolve to `CAMTLConfig`.
2. ``ModelAdaptersMixin._add_adapter_weights``: before the first CA-MTL adapter of a model, checks the
   model (BERT-like encoders only, refused before anything is built), creates the shared conditional
   modules (``base_model.ca_mtl``) and the task-embedding layer (in layer 0), and registers the hooks.
   Later CA-MTL adapters must have the same config (they share the modules).
   Reason: `adapters` builds per-layer modules only for its own methods.
3. ``ModelAdaptersMixin.train_adapter``: with a CA-MTL adapter in the setup, also makes trainable what
   CA-MTL trains besides the task embeddings (`trainable_shared_parameters`): the shared conditional
   modules, the layers above the frozen bottom ones and the pooler. Embeddings and bottom layers stay frozen.
   Reason: ``train_adapter`` freezes the whole base model, but CA-MTL fine-tunes its upper half.

It also puts CA-MTL under the plugin core's file policy and strict loading (`follow_safe_file_policy`):
safetensors by default, pickle refused, and a missing, unexpected or mis-shaped weight is an error that
removes the half-loaded adapter (a silently dropped task embedding would leave a random one in place).

The shared conditional modules are not part of any single adapter's files (like a fine-tuned base,
they belong to every task): save and load them with `save_shared_modules` / `load_shared_modules`
(`shared_modules`), or as part of the whole model's state dict.
"""

from adapters import ADAPTER_CONFIG_MAP, AdapterConfig
from adapters.composition import parse_composition
from adapters.model_mixin import ModelAdaptersMixin

from ..patching import follow_safe_file_policy, wrap
from .attach import (  # noqa: F401  (public here too)
    SUPPORTED_MODEL_TYPES,
    attach_ca_mtl,
    ca_mtl_modules,
    check_model,
    detach_ca_mtl,
    is_ca_mtl_adapter,
    reinitialize_top_layer,
    trainable_shared_parameters,
)
from .config import CA_MTL_PRESETS, CAMTLConfig

# The marker of the CA-MTL patches (`pals_adapters.patching.wrap`).
PATCH_MARKER = "_pals_adapters_ca_mtl_patched"


def register() -> None:
    """Makes ``config="ca_mtl"`` work in `adapters`. Safe to call any number of times."""
    for name, config in CA_MTL_PRESETS.items():
        existing = ADAPTER_CONFIG_MAP.get(name)
        if existing is not None and not isinstance(existing, CAMTLConfig):
            raise RuntimeError(f"adapters already defines a config named '{name}'; cannot register CA-MTL")
        ADAPTER_CONFIG_MAP[name] = config
    _wrap(AdapterConfig, "_get_config_class", _resolve_config_class, static=True)
    # The PAL file policy (safetensors, pickle refused) and strict loading (pals_adapters.patching).
    follow_safe_file_policy("ca_mtl", CAMTLConfig, "CA-MTL")
    _wrap(ModelAdaptersMixin, "_add_adapter_weights", _add_adapter_weights)
    _wrap(ModelAdaptersMixin, "train_adapter", _train_adapter)
    from .contract import wrap_generic_calls  # it uses this module's functions

    wrap_generic_calls(_wrap)


def _wrap(owner, name, wrapper, static=False):
    wrap(owner, name, wrapper, PATCH_MARKER, static=static)


# --- 1. config resolution ---


def _resolve_config_class(original, config_dict):
    if config_dict.get("architecture") == "ca_mtl":
        return CAMTLConfig
    return original(config_dict)


# --- 2. shared modules, task embeddings and hooks (built by `attach.attach_ca_mtl`) ---


def _add_adapter_weights(original, model, adapter_name):
    config = model.adapters_config.match(adapter_name, CAMTLConfig)
    if config is None:
        return original(model, adapter_name)
    attach_ca_mtl(model, config)
    original(model, adapter_name)
    first = next(model.base_model.parameters())
    model.adapter_to(adapter_name, device=first.device, dtype=first.dtype)


# --- 3. what trains (`attach.trainable_shared_parameters`) ---


def _train_adapter(original, model, adapter_setup, *args, **kwargs):
    result = original(model, adapter_setup, *args, **kwargs)
    setup = parse_composition(adapter_setup)
    if setup is not None and any(is_ca_mtl_adapter(model, name) for name in setup.flatten()):
        for _, param in trainable_shared_parameters(model):
            param.requires_grad = True
        ca_mtl_modules(model).waiting.clear()  # they train from where they are, as the caller chose
    return result
