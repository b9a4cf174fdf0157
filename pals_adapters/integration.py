"""Registers PALs with the `adapters` library.

`adapters` 1.3 has no public hook for a new adapter *method*, so `register()` makes four small,
idempotent patches, each wrapping (never replacing) the library's own code:

1. the config name map and the dict -> config class resolver learn ``"pals"`` and its presets;
2. adding an adapter with a PAL config first attaches PAL layers to a supported model
   (on demand, so models created before ``import pals_adapters`` work too) and creates the
   per-adapter ``V_E``/``V_D`` shared across layers;
3. loading a PAL adapter is strict: a missing, unexpected or mis-shaped weight is an error and
   the half-loaded adapter is removed (`adapters` itself only logs such keys);
4. ``save_adapter`` / ``load_adapter`` default to safetensors, as transformers and PEFT do;
   ``save_adapter`` creates missing parent folders (as ``save_pretrained`` does), and
   ``load_adapter`` refuses pickle weight files unless called with ``allow_pickle=True``.
"""

import contextvars
import functools
import os
from typing import List

from adapters import ADAPTER_CONFIG_MAP, AdapterConfig
from adapters.loading import AdapterLoader
from adapters.model_mixin import ModelAdaptersMixin, ModelWithHeadsAdaptersMixin

from .config import PALS_PRESETS, PALsConfig
from .errors import AdapterLoadError, IntegrityError, UnsupportedModelError
from .layer import PALsLayer
from .modeling import init_projections

# Layers with BERT's block structure (attention -> intermediate -> output(h, residual) with LayerNorm).
SUPPORTED_MODEL_TYPES = ("bert", "roberta", "xlm-roberta")

_PATCHED = "_pals_adapters_patched"


def register() -> None:
    """Makes ``config="pals"`` (and the presets) work in `adapters`. Safe to call any number of times."""
    for name, config in PALS_PRESETS.items():
        existing = ADAPTER_CONFIG_MAP.get(name)
        if existing is not None and not isinstance(existing, PALsConfig):
            raise RuntimeError(f"adapters already defines a config named '{name}'; cannot register the PAL preset")
        ADAPTER_CONFIG_MAP[name] = config
    _wrap(AdapterConfig, "_get_config_class", _resolve_config_class, static=True)
    _wrap(ModelAdaptersMixin, "_add_adapter_weights", _add_adapter_weights)
    _wrap(AdapterLoader, "load", _strict_load)
    _wrap(AdapterLoader, "filter_func", _filter_top_level_shared)
    _wrap(AdapterLoader, "rename_func", _rename_top_level_shared)
    for cls in (ModelAdaptersMixin, ModelWithHeadsAdaptersMixin):
        for method in ("save_adapter", "load_adapter", "save_all_adapters"):
            if method in vars(cls):
                _wrap(cls, method, _default_to_safetensors)


def _wrap(owner, name, wrapper, static=False):
    """Replaces ``owner.name`` by a function calling ``wrapper(original, *args, **kwargs)``, once."""
    original = vars(owner)[name]
    original = original.__func__ if static else original
    if getattr(original, _PATCHED, False):
        return

    @functools.wraps(original)
    def patched(*args, **kwargs):
        return wrapper(original, *args, **kwargs)

    setattr(patched, _PATCHED, True)
    setattr(owner, name, staticmethod(patched) if static else patched)


# --- 1. config resolution ---


def _resolve_config_class(original, config_dict):
    if config_dict.get("architecture") == "pals":
        return PALsConfig
    return original(config_dict)


# --- 2. PAL layers and shared projections ---


def attach_pal_layers(model) -> List[PALsLayer]:
    """Gives every transformer layer of ``model`` a `PALsLayer` (once) and returns them."""
    base = model.base_model
    model_type = getattr(base.config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES or getattr(base, "adapter_interface", None) is not None:
        raise UnsupportedModelError(
            f"PAL adapters are not supported on {type(model).__name__} (model_type '{model_type}'); "
            f"supported model types: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    if getattr(base.config, "chunk_size_feed_forward", 0):
        raise UnsupportedModelError(
            "PAL adapters need chunk_size_feed_forward=0 (the PAL output is added to the whole sequence); "
            f"this model has {base.config.chunk_size_feed_forward}"
        )
    layers = list(base.iter_layers())
    pal_layers = []
    for _, layer in layers:
        pals = getattr(layer, "pals", None)
        if not isinstance(pals, PALsLayer):
            pals = PALsLayer(base.config.hidden_size, len(layers), base.adapters_config)
            pals.train(layer.training)
            layer.pals = pals
            layer.register_forward_pre_hook(pals.layer_pre_hook, with_kwargs=True)
            layer.output.register_forward_pre_hook(pals.output_pre_hook, with_kwargs=True)
        pal_layers.append(pals)
    return pal_layers


def _add_adapter_weights(original, model, adapter_name):
    config = model.adapters_config.match(adapter_name, PALsConfig)
    if config is None:
        return original(model, adapter_name)
    pal_layers = attach_pal_layers(model)
    config.layer_indices(len(pal_layers))  # layers out of range -> ConfigError before anything is built
    original(model, adapter_name)
    base = model.base_model
    hidden_size = base.config.hidden_size
    if config.shared_projections and adapter_name not in base.shared_parameters:
        base.shared_parameters[adapter_name] = init_projections(
            hidden_size, config.projected_size(hidden_size), config.init_range
        )
    device = next(base.parameters()).device
    model.adapter_to(adapter_name, device=device)


def is_pal_adapter(model, adapter_name: str) -> bool:
    """True if ``adapter_name`` on ``model`` is (or contains) a PAL adapter."""
    return model.adapters_config.match(adapter_name, PALsConfig) is not None


# --- 3. strict loading ---


def _strict_load(original, loader, adapter_name_or_path, *args, loading_info=None, **kwargs):
    model = loader.model
    info = loading_info if isinstance(loading_info, dict) else {}
    names_before = set(model.adapters_config.adapters)

    def discard_new_pal_adapters():
        new = [n for n in set(model.adapters_config.adapters) - names_before if is_pal_adapter(model, n)]
        for name in new:
            model.delete_adapter(name)
        return new

    try:
        folder, name = original(loader, adapter_name_or_path, *args, loading_info=info, **kwargs)
    except RuntimeError as err:  # torch's load_state_dict: size mismatch
        if not discard_new_pal_adapters():
            raise
        raise AdapterLoadError(
            f"PAL adapter weights in '{adapter_name_or_path}' do not fit this model "
            f"({type(model).__name__}, hidden size {model.config.hidden_size}); nothing was loaded. {err}"
        ) from err
    if not is_pal_adapter(model, name):
        return folder, name
    missing = [k for k in info.get("missing_keys", []) if f".{name}." in k]
    unexpected = list(info.get("unexpected_keys", []))
    if missing or unexpected:
        discard_new_pal_adapters()
        problems = []
        if missing:
            problems.append(f"weights missing from the file: {_preview(missing)}")
        if unexpected:
            problems.append(f"weights in the file that this model has no place for: {_preview(unexpected)}")
        raise AdapterLoadError(
            f"PAL adapter '{name}' from '{adapter_name_or_path}' does not match this model; nothing was kept. "
            + "; ".join(problems)
        )
    return folder, name


# On a plain transformers model wrapped with adapters.init, shared weights sit at the top
# level ("shared_parameters.<name>.…", no leading dot), which the library's substring filter
# misses: they would be neither saved nor reported missing on load.


def _filter_top_level_shared(original, loader, adapter_name):
    matches = original(loader, adapter_name)
    prefix = f"shared_parameters.{adapter_name}."
    return lambda key: matches(key) or key.startswith(prefix)


def _rename_top_level_shared(original, loader, old_name, new_name):
    rename = original(loader, old_name, new_name)
    old_prefix, new_prefix = f"shared_parameters.{old_name}.", f"shared_parameters.{new_name}."

    def renamed(key):
        if key.startswith(old_prefix):
            key = new_prefix + key[len(old_prefix) :]
        return rename(key)

    return renamed


def _preview(keys, limit=4):
    shown = ", ".join(sorted(keys)[:limit])
    return shown + (f" (+{len(keys) - limit} more)" if len(keys) > limit else "")


# --- 4. safetensors by default ---


# Set while a load_adapter call that opted in runs (ModelWithHeads' load_adapter calls the wrapped base one).
_PICKLE_ALLOWED = contextvars.ContextVar("pals_adapters_pickle_allowed", default=False)
# (safetensors, pickle) names of the weight files `load_adapter` reads from a folder: adapter, head.
_LOADED_WEIGHTS = (("adapter.safetensors", "pytorch_adapter.bin"), ("model_head.safetensors", "pytorch_model_head.bin"))


def _default_to_safetensors(original, model, *args, use_safetensors=True, **kwargs):
    """``save_adapter`` / ``save_all_adapters`` / ``load_adapter`` with ``use_safetensors=True`` by default.

    ``load_adapter(..., allow_pickle=False)``: a local adapter folder whose weights would be read
    from a pickle file (``pytorch_adapter.bin`` / ``pytorch_model_head.bin`` without a safetensors
    twin, or any of them with ``use_safetensors=False``) is refused with `IntegrityError` naming the
    file, before anything is loaded; pass ``allow_pickle=True`` for a folder you trust.
    """
    if original.__name__ != "load_adapter":
        target = args[0] if args else kwargs.get("save_directory")
        if isinstance(target, (str, os.PathLike)):
            os.makedirs(target, exist_ok=True)  # adapters itself creates only the last folder
        return original(model, *args, use_safetensors=use_safetensors, **kwargs)
    allow_pickle = bool(kwargs.pop("allow_pickle", False)) or _PICKLE_ALLOWED.get()
    if not allow_pickle:
        source = args[0] if args else kwargs.get("adapter_name_or_path")
        _refuse_pickle_weights(source, use_safetensors)
    token = _PICKLE_ALLOWED.set(allow_pickle)
    try:
        return original(model, *args, use_safetensors=use_safetensors, **kwargs)
    finally:
        _PICKLE_ALLOWED.reset(token)


def _refuse_pickle_weights(source, use_safetensors: bool) -> None:
    if not isinstance(source, (str, os.PathLike)) or not os.path.isdir(source):
        return  # hub names and URLs are resolved by `adapters` itself
    for safe_name, pickle_name in _LOADED_WEIGHTS:
        pickled = os.path.join(source, pickle_name)
        if os.path.isfile(pickled) and (not use_safetensors or not os.path.isfile(os.path.join(source, safe_name))):
            raise IntegrityError(
                f"{pickled}: pickle weight file refused (loading it can run arbitrary code); save the adapter "
                "with safetensors (save_adapter's default), or pass allow_pickle=True to load_adapter if you "
                "trust its source"
            )
