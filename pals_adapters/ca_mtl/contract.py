"""CA-MTL in the generic calls of `adapters` (the patches `register` adds after its own three).

A CA-MTL adapter owns a task embedding only; what its task runs with beyond the base model is that
embedding and the conditional modules that every CA-MTL task of the model shares. The library's
generic calls assume an adapter owns all of its weights, so these wrappers tell them otherwise:

4. ``adapter_summary``: the shared modules are counted with the CA-MTL adapters, not in "Full model"
   (the base model's own parameters). Each CA-MTL row's ``#param`` is its task embedding plus the shared
   modules, its ``train`` says whether both train; the string form adds a line saying that the shared
   part is counted once in the model.
5. ``delete_adapter``: deleting the last CA-MTL adapter also removes the shared modules, the
   task-embedding layer and the hooks, so the model is its base model again.
6. ``load_adapter``: a CA-MTL task loaded onto a model without CA-MTL modules (the load creates them,
   as initialised) *waits* for the modules it was trained with, and so does every task loaded while
   one waits: a forward that uses one is refused until `load_shared_modules` (or a state dict holding
   them) brings the modules, or ``train_adapter`` starts training them. The task's folder holds its
   embedding only; the modules belong to the base, as in an export. A task loaded onto modules that
   were already there (added, loaded or trained) uses them.
7. ``merge_adapter``: refused for a CA-MTL adapter (the library would silently do nothing).
8. ``add_adapter_fusion``: refused for CA-MTL adapters (fusion mixes the outputs of adapters; a CA-MTL
   task has none of its own, it conditions the shared modules). ``Fuse`` in a setup is refused by the
   task-embedding layer.
9. ``supports_adapter``: False for a CA-MTL config on a model CA-MTL does not fit; ``add_adapter``
   then raises `UnsupportedModelError` saying why (the library would say only "not supported").
"""

from adapters import AdapterConfig
from adapters.composition import Fuse
from adapters.model_mixin import ModelAdaptersMixin

from ..errors import UnsupportedModelError, UnsupportedOperationError
from .attach import ca_mtl_modules, check_model, detach_ca_mtl, is_ca_mtl_adapter
from .config import CA_MTL_PRESETS, CAMTLConfig
from .modeling import CAMTLModules


def wrap_generic_calls(wrap) -> None:
    """Installs the wrappers with ``wrap(owner, name, wrapper)`` (idempotent, see `integration`)."""
    wrap(ModelAdaptersMixin, "adapter_summary", _adapter_summary)
    wrap(ModelAdaptersMixin, "delete_adapter", _delete_adapter)
    wrap(ModelAdaptersMixin, "load_adapter", _load_adapter)
    wrap(ModelAdaptersMixin, "merge_adapter", _refuse_merge)
    wrap(ModelAdaptersMixin, "add_adapter_fusion", _refuse_fusion)
    wrap(ModelAdaptersMixin, "supports_adapter", _supports_adapter)
    wrap(ModelAdaptersMixin, "add_adapter", _check_before_adding)


def _shared_modules(model) -> CAMTLModules | None:
    modules = getattr(model.base_model, "ca_mtl", None)
    return modules if isinstance(modules, CAMTLModules) else None


def _ca_mtl_names(model, names) -> list[str]:
    return sorted(n for n in names if n in model.adapters_config and is_ca_mtl_adapter(model, n))


# --- 4. adapter_summary ---


def _adapter_summary(original, model, as_dict=False):
    modules = _shared_modules(model)
    if modules is None:
        return original(model, as_dict)
    rows = original(model, as_dict=True)
    params = list(modules.parameters())
    shared = sum(p.numel() for p in params)
    full = rows[-1]
    full["#param"] -= shared  # the library counted them as the base model's
    for row in rows[:-1]:
        if is_ca_mtl_adapter(model, row["name"]):
            row["#param"] += shared
            row["train"] = row["train"] and all(p.requires_grad for p in params)
        row["%param"] = row["#param"] / full["#param"] * 100
    if as_dict:
        return rows
    note = (
        f"CA-MTL rows include the {shared:,} parameters of the conditional modules their tasks share "
        f"({shared / full['#param'] * 100:.3f}% of the full model, counted once in the model)."
    )
    return _table(rows) + "\n" + note


def _table(rows) -> str:
    """The library's summary table layout: a row per adapter, then "Full model"."""
    columns = ("name", "architecture", "#param", "%param", "active", "train")
    heading = "{:<25}{:<15}{:>12}{:>12}{:>8}{:>8}"
    line = "{:<25}{:<15}{:>12,}{:>12.3f}{:>8}{:>8}"
    rule, double = "-" * 80, "=" * 80
    body = [line.format(*(row.get(c, "") for c in columns)) for row in rows]
    return "\n".join([double, heading.format(*(c.title() for c in columns)), rule, *body[:-1], rule, body[-1], double])


# --- 5. delete_adapter ---


def _delete_adapter(original, model, adapter_name):
    was_ca_mtl = bool(_ca_mtl_names(model, [adapter_name]))
    result = original(model, adapter_name)
    modules = _shared_modules(model)
    if was_ca_mtl and modules is not None:
        modules.waiting.pop(adapter_name, None)
        if not _ca_mtl_names(model, model.adapters_config.adapters):
            detach_ca_mtl(model)
    return result


# --- 6. load_adapter ---


def _load_adapter(original, model, adapter_name_or_path, *args, **kwargs):
    created = _shared_modules(model) is None  # this load creates them, as initialised
    name = original(model, adapter_name_or_path, *args, **kwargs)
    if isinstance(name, str) and _ca_mtl_names(model, [name]):
        modules = ca_mtl_modules(model)
        if created or modules.waiting:
            modules.waiting[name] = str(adapter_name_or_path)
    return name


# --- 7. and 8. what CA-MTL cannot do ---


def _refuse_merge(original, model, name, *args, **kwargs):
    if _ca_mtl_names(model, [name]):
        raise UnsupportedOperationError(
            f"CA-MTL adapter '{name}' cannot be merged into the model's weights: its task embedding "
            "conditions modules that every CA-MTL task shares (attention biases, LayerNorms, a bottleneck), "
            "computed from it at every forward"
        )
    return original(model, name, *args, **kwargs)


def _refuse_fusion(original, model, adapter_names, *args, **kwargs):
    if isinstance(adapter_names, Fuse):
        names = adapter_names.flatten()
    elif isinstance(adapter_names, str):
        names = adapter_names.split(",")
    else:
        names = list(adapter_names)
    refused = _ca_mtl_names(model, names)
    if refused:
        raise UnsupportedOperationError(
            f"CA-MTL adapters {refused} cannot be fused: AdapterFusion mixes the outputs of adapters, and a "
            "CA-MTL task has no output of its own (its embedding conditions the shared modules). To combine "
            "CA-MTL tasks, average their embeddings: Average(...) in a setup, or model.average_adapter(...)"
        )
    return original(model, adapter_names, *args, **kwargs)


# --- 9. supports_adapter ---


def _is_ca_mtl_config(config) -> bool:
    if isinstance(config, str) and config in CA_MTL_PRESETS:
        return True
    try:
        return isinstance(AdapterConfig.load(config), CAMTLConfig)
    except Exception:  # not a config at all: the library says so itself
        return False


def _supports_adapter(original, model, type_or_config):
    if _is_ca_mtl_config(type_or_config):
        try:
            check_model(model)
        except UnsupportedModelError:
            return False
    return original(model, type_or_config)


def _check_before_adding(original, model, adapter_name, config=None, *args, **kwargs):
    if config is not None and _is_ca_mtl_config(config):
        check_model(model)
    return original(model, adapter_name, config, *args, **kwargs)
