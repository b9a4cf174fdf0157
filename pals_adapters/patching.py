"""The patch points into `adapters` that both methods (PALs, CA-MTL) use: one public module.

`adapters` 1.3 has no public hook for a new adapter *method*. Each method's ``register()``
(`pals_adapters.pals.integration`, `pals_adapters.ca_mtl.integration`) wraps a few of the library's
functions with `wrap`, under its own marker, so the two methods' patches of the same function stack
(in either order) without being skipped or doubled. This module also holds the two behaviours the
project's own adapter types share (each method puts its config type under them with
`follow_safe_file_policy`):

- `strict_load` (for ``AdapterLoader.load``): a missing, unexpected or mis-shaped weight is an error and
  the half-loaded adapter is removed (the library only logs such keys);
- `file_policy` (for the save/load calls in `FILE_METHODS`): safetensors unless the caller passes
  ``use_safetensors``, missing parent folders created on save, and a folder whose weights would come
  from a pickle file refused unless ``allow_pickle=True``.
"""

import contextvars
import functools
import inspect
import json
import os
from typing import NamedTuple

from .errors import AdapterLoadError, IntegrityError

# The save/load calls of both adapters mixins that follow `file_policy`.
FILE_METHODS = ("save_adapter", "save_all_adapters", "save_adapter_setup", "load_adapter", "load_adapter_setup")


def wrap(owner, name, wrapper, marker: str, static=False):
    """Replaces ``owner.name`` by a function calling ``wrapper(original, *args, **kwargs)``, once per
    ``marker`` (each method passes its own, so patches of the same function stack). A classmethod stays one
    (the wrapper gets the class first); ``static`` marks a staticmethod."""
    original = vars(owner)[name]
    descriptor = classmethod if isinstance(original, classmethod) else staticmethod if static else None
    original = original.__func__ if descriptor else original
    if getattr(original, marker, False):
        return

    @functools.wraps(original)
    def patched(*args, **kwargs):
        return wrapper(original, *args, **kwargs)

    setattr(patched, marker, True)
    setattr(owner, name, descriptor(patched) if descriptor else patched)


def bind_arguments(original, *args, **kwargs) -> inspect.BoundArguments:
    """The call's arguments by name, as ``original`` would see them."""
    return inspect.signature(original).bind(*args, **kwargs)


def strict_load(original, loader, adapter_name_or_path, *args, loading_info=None, **kwargs):
    """For the project's own adapter types (`SAFE_FILE_CONFIGS`): every weight of the file must find its
    place and every place its weight, or nothing of the load is kept."""
    model = loader.model
    info = loading_info if isinstance(loading_info, dict) else {}
    names_before = set(model.adapters_config.adapters)

    def discard_new_own_adapters():
        new = [n for n in set(model.adapters_config.adapters) - names_before if own_method_name(model, n)]
        methods = sorted({own_method_name(model, n) for n in new})
        for name in new:
            model.delete_adapter(name)
        return methods

    try:
        folder, name = original(loader, adapter_name_or_path, *args, loading_info=info, **kwargs)
    except RuntimeError as err:  # torch's load_state_dict: size mismatch
        methods = discard_new_own_adapters()
        if not methods:
            raise
        raise AdapterLoadError(
            f"{'/'.join(methods)} adapter weights in '{adapter_name_or_path}' do not fit this model "
            f"({type(model).__name__}, hidden size {model.config.hidden_size}); nothing was loaded. {err}"
        ) from err
    method = own_method_name(model, name)
    if method is None:
        return folder, name
    missing = [k for k in info.get("missing_keys", []) if f".{name}." in k]
    unexpected = list(info.get("unexpected_keys", []))
    if missing or unexpected:
        discard_new_own_adapters()
        problems = []
        if missing:
            problems.append(f"weights missing from the file: {_preview(missing)}")
        if unexpected:
            problems.append(f"weights in the file that this model has no place for: {_preview(unexpected)}")
        raise AdapterLoadError(
            f"{method} adapter '{name}' from '{adapter_name_or_path}' does not match this model; nothing was kept. "
            + "; ".join(problems)
        )
    return folder, name


def _preview(keys, limit=4):
    shown = ", ".join(sorted(keys)[:limit])
    return shown + (f" (+{len(keys) - limit} more)" if len(keys) > limit else "")


class _FilePolicy(NamedTuple):
    """What the outermost save/load call asked for; inner calls made by `adapters` follow it."""

    format_given: bool  # the caller passed use_safetensors: honour it for every adapter
    allow_pickle: bool | None  # None: refuse pickle for PAL adapters only


_POLICY = contextvars.ContextVar("pals_adapters_file_policy", default=None)
# (safetensors, pickle) names of the weight files `load_adapter` reads from a folder: adapter, head.
_LOADED_WEIGHTS = (("adapter.safetensors", "pytorch_adapter.bin"), ("model_head.safetensors", "pytorch_model_head.bin"))


def file_policy(original, model, *args, **kwargs):
    """PAL adapters: safetensors unless ``use_safetensors`` is passed, pickle refused unless ``allow_pickle=True``.

    Library calls made inside (``save_all_adapters`` -> ``save_adapter``, ``load_adapter_setup`` ->
    ``load_adapter``, the heads mixin -> the base mixin) pass ``use_safetensors`` explicitly; they follow
    what the user's outermost call asked for, kept in a context variable.
    """
    allow_pickle = kwargs.pop("allow_pickle", None)
    bound = bind_arguments(original, model, *args, **kwargs)
    policy = _POLICY.get() or _FilePolicy("use_safetensors" in bound.arguments, allow_pickle)
    token = _POLICY.set(policy)
    try:
        if original.__name__ == "save_adapter":
            _prepare_save(model, bound, policy)
        elif original.__name__ == "load_adapter":
            _prepare_load(bound, policy)
        return original(*bound.args, **bound.kwargs)
    finally:
        _POLICY.reset(token)


# The project's own config types (architecture name -> config class) whose files follow the safe
# policy above: each method registers its own (`follow_safe_file_policy`).
SAFE_FILE_CONFIGS: dict = {}
_METHOD_NAMES: dict = {}  # architecture -> the name errors give it


def follow_safe_file_policy(architecture: str, config_class, method_name: str | None = None) -> None:
    """Puts adapters of ``config_class`` under the file policy of PAL adapters (safetensors, no pickle)
    and `strict_load`; errors call them ``method_name`` (default: the architecture name)."""
    SAFE_FILE_CONFIGS[architecture] = config_class
    _METHOD_NAMES[architecture] = method_name or architecture


def own_method_name(model, adapter_name: str) -> str | None:
    """What errors call ``adapter_name``'s method (PAL, CA-MTL) if it is one of the project's own config
    types, else None."""
    for architecture, cls in SAFE_FILE_CONFIGS.items():
        if model.adapters_config.match(adapter_name, cls) is not None:
            return _METHOD_NAMES[architecture]
    return None


def _is_own_adapter(model, adapter_name: str) -> bool:
    return own_method_name(model, adapter_name) is not None


def _prepare_save(model, bound, policy: _FilePolicy) -> None:
    if not _is_own_adapter(model, bound.arguments["adapter_name"]):
        return
    if not policy.format_given:
        bound.arguments["use_safetensors"] = True
    target = bound.arguments["save_directory"]
    if isinstance(target, (str, os.PathLike)):
        os.makedirs(target, exist_ok=True)  # adapters itself creates only the last folder


def _prepare_load(bound, policy: _FilePolicy) -> None:
    source = bound.arguments["adapter_name_or_path"]
    pal = _folder_holds_pals(source)
    if pal and not policy.format_given:
        bound.arguments["use_safetensors"] = True
    if policy.allow_pickle is False or (policy.allow_pickle is None and pal):
        _refuse_pickle_weights(source, bool(bound.arguments.get("use_safetensors", False)))


def _folder_holds_pals(source) -> bool:
    """True if ``source`` is a local adapter folder whose saved config is (or contains) a PAL config (or
    another of `SAFE_FILE_CONFIGS`)."""
    if not isinstance(source, (str, os.PathLike)):
        return False
    path = os.path.join(source, "adapter_config.json")
    if not os.path.isfile(path):
        return False  # hub names and URLs are resolved by `adapters` itself
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f).get("config")
    except (OSError, ValueError, AttributeError):
        return False  # the library's own loader reports unreadable configs
    if not isinstance(config, dict):
        return False
    members = config.get("configs") if config.get("architecture") == "union" else [config]
    return any(isinstance(c, dict) and c.get("architecture") in SAFE_FILE_CONFIGS for c in members or [])


def _refuse_pickle_weights(source, use_safetensors: bool) -> None:
    if not isinstance(source, (str, os.PathLike)) or not os.path.isdir(source):
        return  # hub names and URLs are resolved by `adapters` itself
    for safe_name, pickle_name in _LOADED_WEIGHTS:
        pickled = os.path.join(source, pickle_name)
        if os.path.isfile(pickled) and (not use_safetensors or not os.path.isfile(os.path.join(source, safe_name))):
            raise IntegrityError(
                f"{pickled}: pickle weight file refused (loading it can run arbitrary code); save the adapter "
                "with safetensors (save_adapter's default for PAL adapters), or pass allow_pickle=True to "
                "load_adapter if you trust its source"
            )
