"""Registers PALs with the `adapters` library.

`adapters` 1.3 has no public hook for a new adapter *method*, so `register()` wraps (never replaces)
a few of the library's functions. Every wrapper acts on PAL adapters only and passes every other
call through unchanged, so importing this package changes nothing for the library's own methods.
The complete list, with the reason for each:

1. ``ADAPTER_CONFIG_MAP`` and ``AdapterConfig._get_config_class`` learn ``"pals"`` and its presets:
   config strings, dicts and saved ``adapter_config.json`` files resolve to `PALsConfig`.
   ``AdapterConfig.load`` reads the presets' old names (``pals_top``, ``pals_bottom``, also in
   ``name[key=value]`` and ``a|b`` strings) as their new ones, with a `RenamedWarning` (until 0.3).
2. ``ModelAdaptersMixin.supports_adapter`` answers False for a PAL config on a model PALs do not fit
   (the library would answer True for any unknown method), and ``add_adapter`` raises
   `UnsupportedModelError` saying why, before anything is built.
3. ``ModelAdaptersMixin._add_adapter_weights`` (the path of ``add_adapter``, ``load_adapter`` and
   ``from_pretrained``) attaches PAL layers on demand (so models created before ``import pals_adapters``
   work too) and creates the per-adapter ``V_E``/``V_D`` shared across layers.
4. ``ModelAdaptersMixin.average_adapter`` also averages the shared ``V_E``/``V_D``, with the weights the
   library passed to the layers (it averages only per-layer modules and PHM/VeRA shared weights).
5. ``ModelAdaptersMixin.merge_adapter`` raises `UnsupportedOperationError` for a PAL adapter: a PAL is
   an extra attention path and cannot be folded into the model's weights (the library would silently do
   nothing). ``reset_adapter`` is left alone: it undoes merges, PALs are never merged, and the library
   itself calls it from ``set_active_adapters``.
6. ``AdapterLoader.load`` is strict for PAL adapters (and CA-MTL's, via `follow_safe_file_policy`): a
   missing, unexpected or mis-shaped weight is an error and the half-loaded adapter is removed (the
   library only logs such keys). The wrapper is `pals_adapters.patching.strict_load`, shared by both methods.
7. ``AdapterLoader.filter_func`` / ``rename_func`` also match a PAL adapter's shared weights at the top
   level of a plain transformers model wrapped with ``adapters.init`` (the library's substring
   patterns miss them: they would be neither saved nor loaded).
8. ``save_adapter`` / ``save_all_adapters`` / ``save_adapter_setup`` / ``load_adapter`` /
   ``load_adapter_setup`` (both mixins): a PAL adapter is written and read as safetensors unless the
   caller passes ``use_safetensors`` itself, ``save_adapter`` of a PAL adapter creates missing parent
   folders, and loading a PAL adapter folder whose weights would come from a pickle file is refused
   unless ``allow_pickle=True`` (also accepted by ``load_adapter_setup``). Other adapters keep the
   library's defaults; ``allow_pickle=False`` is the explicit opt-in to refuse pickle for them too.
   The wrapper is `pals_adapters.patching.file_policy`, shared by both methods.
"""

import os

import torch
from adapters import ADAPTER_CONFIG_MAP, AdapterConfig, ConfigUnion
from adapters.loading import AdapterLoader
from adapters.model_mixin import ModelAdaptersMixin, ModelWithHeadsAdaptersMixin
from torch import nn

from ..architectures import ARCHITECTURES, site_for, supports_pals
from ..errors import UnsupportedOperationError
from ..patching import FILE_METHODS, bind_arguments, file_policy, follow_safe_file_policy, strict_load, wrap
from .config import PALS_PRESETS, RENAMED_PRESETS, PALsConfig, current_config_string
from .layer import AVERAGE_WEIGHTS, PALsLayer
from .modeling import Projections, init_projections, seeded_generator

# Model types whose layers PALs fit (see architectures.py).
SUPPORTED_MODEL_TYPES = tuple(ARCHITECTURES)

# The marker of the PAL patches (`pals_adapters.patching.wrap`).
PATCH_MARKER = "_pals_adapters_patched"


def register() -> None:
    """Makes ``config="pals"`` (and the presets) work in `adapters`. Safe to call any number of times."""
    old_names = {old: PALS_PRESETS[new] for old, new in RENAMED_PRESETS.items()}  # looked up directly
    for name, config in {**PALS_PRESETS, **old_names}.items():
        existing = ADAPTER_CONFIG_MAP.get(name)
        if existing is not None and not isinstance(existing, PALsConfig):
            raise RuntimeError(f"adapters already defines a config named '{name}'; cannot register the PAL preset")
        ADAPTER_CONFIG_MAP[name] = config
    follow_safe_file_policy("pals", PALsConfig, "PAL")
    _wrap(AdapterConfig, "_get_config_class", _resolve_config_class, static=True)
    _wrap(AdapterConfig, "load", _read_old_preset_names)
    _wrap(ModelAdaptersMixin, "supports_adapter", _supports_adapter)
    _wrap(ModelAdaptersMixin, "add_adapter", _check_before_adding)
    _wrap(ModelAdaptersMixin, "_add_adapter_weights", _add_adapter_weights)
    _wrap(ModelAdaptersMixin, "average_adapter", _average_adapter)
    _wrap(ModelAdaptersMixin, "merge_adapter", _refuse_merge)
    _wrap(AdapterLoader, "load", strict_load)
    _wrap(AdapterLoader, "filter_func", _filter_top_level_shared)
    _wrap(AdapterLoader, "rename_func", _rename_top_level_shared)
    for cls in (ModelAdaptersMixin, ModelWithHeadsAdaptersMixin):
        for method in FILE_METHODS:
            if method in vars(cls):
                _wrap(cls, method, file_policy)


def _wrap(owner, name, wrapper, static=False):
    wrap(owner, name, wrapper, PATCH_MARKER, static=static)


# --- 1. config resolution ---


def _resolve_config_class(original, config_dict):
    if config_dict.get("architecture") == "pals":
        return PALsConfig
    return original(config_dict)


def _read_old_preset_names(original, cls, config, *args, **kwargs):
    if isinstance(config, str) and not os.path.isfile(config):
        config = current_config_string(config)
    return original(cls, config, *args, **kwargs)


def pal_config_of(config) -> PALsConfig | None:
    """The `PALsConfig` in ``config`` (a config, a union, a name or a dict), or None."""
    if isinstance(config, str) and config == "pals":  # the method name, as supports_adapter takes it
        return PALS_PRESETS["pals"]
    if config is None or isinstance(config, str) and "pals" not in config and not os.path.isfile(config):
        return None  # cheap exit: no need to resolve names of other methods
    config = AdapterConfig.load(config)
    if isinstance(config, PALsConfig):
        return config
    if isinstance(config, ConfigUnion):
        return next((c for c in config.configs if isinstance(c, PALsConfig)), None)
    return None


# --- 2. support checks ---


def _supports_adapter(original, model, type_or_config):
    # A method type string ("pals"), a preset name, or a config (or union) holding a PALsConfig.
    if isinstance(type_or_config, str):
        is_pal = type_or_config in PALS_PRESETS or type_or_config in RENAMED_PRESETS
    else:
        is_pal = isinstance(type_or_config, AdapterConfig) and pal_config_of(type_or_config) is not None
    if is_pal and not supports_pals(model):
        return False
    return original(model, type_or_config)


def _check_before_adding(original, model, *args, **kwargs):
    config = pal_config_of(bind_arguments(original, model, *args, **kwargs).arguments.get("config"))
    if config is not None:
        site_for(model)  # UnsupportedModelError naming the reason
        config.layer_indices(sum(1 for _ in model.base_model.iter_layers()))  # ConfigError for absent layers
    return original(model, *args, **kwargs)


# --- 3. PAL layers and shared projections ---


def attach_pal_layers(model) -> list[PALsLayer]:
    """Gives every transformer layer of ``model`` a `PALsLayer` (once) and returns them."""
    site = site_for(model)
    base = model.base_model
    layers = list(base.iter_layers())
    pal_layers = []
    for _, layer in layers:
        pals = getattr(layer, "pals", None)
        if not isinstance(pals, PALsLayer):
            pals = PALsLayer(base.config.hidden_size, len(layers), base.adapters_config, site)
            pals.train(layer.training)
            layer.pals = pals
            layer.register_forward_pre_hook(pals.layer_pre_hook, with_kwargs=True)
            getattr(layer, site.residual_module).register_forward_pre_hook(pals.residual_pre_hook, with_kwargs=True)
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
    if config.shared_projections:
        hidden_size = base.config.hidden_size
        projections = init_projections(
            hidden_size,
            config.projected_size(hidden_size),
            config.init_range,
            seeded_generator(config.init_weights_seed, -1),
            config.init_weights,
        )
        _set_shared(base, adapter_name, dict(projections.items()))
    model.adapter_to(adapter_name, device=next(base.parameters()).device)


def _set_shared(base, adapter_name: str, params: dict) -> None:
    """Puts ``params`` into ``base.shared_parameters[adapter_name]``, next to what another method put there."""
    existing = base.shared_parameters[adapter_name] if adapter_name in base.shared_parameters else None
    if isinstance(existing, nn.ParameterDict):
        existing.update(params)
    else:
        base.shared_parameters[adapter_name] = nn.ParameterDict(params)


def shared_projections(model, adapter_name: str) -> tuple[list[nn.Parameter], int]:
    """The ``V_E``/``V_D`` parameters that PAL adapter ``adapter_name`` shares across layers, and the number
    of layers that use them; ``([], 0)`` when it has none (not a PAL adapter, or ``shared_projections=False``).
    One step on these weights moves the output of every one of those layers at once."""
    base = model.base_model
    if model.adapters_config.match(adapter_name, PALsConfig) is None or adapter_name not in base.shared_parameters:
        return [], 0
    layers = sum(
        1
        for _, layer in base.iter_layers()
        if isinstance(getattr(layer, "pals", None), PALsLayer)
        and adapter_name in layer.pals.adapters
        and layer.pals.adapters[adapter_name].projections is None
    )
    if not layers:
        return [], 0
    shared = base.shared_parameters[adapter_name]
    return [shared[name] for name in Projections._fields if name in shared], layers


def is_pal_adapter(model, adapter_name: str) -> bool:
    """True if ``adapter_name`` on ``model`` is (or contains) a PAL adapter."""
    return model.adapters_config.match(adapter_name, PALsConfig) is not None


# --- 4. average_adapter ---


def _average_adapter(original, model, *args, **kwargs):
    adapter_name = bind_arguments(original, model, *args, **kwargs).arguments["adapter_name"]
    weights = {}
    token = AVERAGE_WEIGHTS.set(weights)
    try:
        result = original(model, *args, **kwargs)
    finally:
        AVERAGE_WEIGHTS.reset(token)
    config = model.adapters_config.match(adapter_name, PALsConfig)
    if config is not None and config.shared_projections and weights:
        shared = model.base_model.shared_parameters
        with torch.no_grad():
            averaged = {
                key: nn.Parameter(sum(w * shared[name][key] for name, w in weights.items()))
                for key in ("down_weight", "down_bias", "up_weight", "up_bias")
            }
        _set_shared(model.base_model, adapter_name, averaged)
    return result


# --- 5. merge_adapter ---


def _refuse_merge(original, model, *args, **kwargs):
    name = bind_arguments(original, model, *args, **kwargs).arguments["name"]
    if name in model.adapters_config and is_pal_adapter(model, name):
        raise UnsupportedOperationError(
            f"merge_adapter('{name}'): PAL adapters cannot be merged into the model weights (a PAL adds its own "
            "projected attention to each layer, which no change of the existing weights reproduces); "
            f"keep '{name}' as an adapter and activate it with set_active_adapters"
        )
    return original(model, *args, **kwargs)


# --- 6. strict loading: pals_adapters.patching.strict_load ---


# --- 7. shared weights at the top level of a wrapped plain model ---


def _filter_top_level_shared(original, loader, adapter_name):
    matches = original(loader, adapter_name)
    if not is_pal_adapter(loader.model, adapter_name):
        return matches
    prefix = f"shared_parameters.{adapter_name}."
    return lambda key: matches(key) or key.startswith(prefix)


def _rename_top_level_shared(original, loader, old_name, new_name):
    rename = original(loader, old_name, new_name)
    if not is_pal_adapter(loader.model, new_name):
        return rename
    old_prefix, new_prefix = f"shared_parameters.{old_name}.", f"shared_parameters.{new_name}."

    def renamed(key):
        if key.startswith(old_prefix):
            key = new_prefix + key[len(old_prefix) :]
        return rename(key)

    return renamed


# --- 8. file handling: pals_adapters.patching.file_policy ---
