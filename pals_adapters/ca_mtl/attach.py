"""The functions that work on a model's CA-MTL part: find, check, attach and detach the shared conditional
modules, the task-embedding layer and the hooks, and list what CA-MTL trains. `integration` (the patches of
`adapters`) and `contract` call them; so can users."""

import functools

import torch
from adapters.methods.adapter_layer_base import AdapterLayerBase
from torch import nn

from ..errors import ConfigError, UnsupportedModelError
from ..errors import config_differences as differences
from .config import CAMTLConfig
from .layer import (
    CAMTLTaskEmbeddings,
    add_attention_bias,
    align_embeddings,
    conditional_bottleneck,
    conditional_norm,
)
from .modeling import CAMTLModules

# BERT's block structure: embeddings -> layers (attention with .output.LayerNorm, intermediate,
# output with .LayerNorm) -> pooler.
SUPPORTED_MODEL_TYPES = ("bert", "roberta", "xlm-roberta")


def is_ca_mtl_adapter(model, adapter_name: str) -> bool:
    """True if ``adapter_name`` on ``model`` is a CA-MTL adapter."""
    return model.adapters_config.match(adapter_name, CAMTLConfig) is not None


def ca_mtl_modules(model) -> CAMTLModules:
    """The shared conditional modules of ``model`` (an adapters model, or its base model)."""
    modules = getattr(model.base_model, "ca_mtl", None)
    if not isinstance(modules, CAMTLModules):
        raise ConfigError(f"{type(model).__name__} has no CA-MTL modules: add a CA-MTL adapter first")
    return modules


def check_model(model) -> None:
    """Refuses a model CA-MTL does not fit (`UnsupportedModelError` saying why)."""
    base = model.base_model
    model_type = getattr(base.config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES or getattr(base, "adapter_interface", None) is not None:
        raise UnsupportedModelError(
            f"CA-MTL adapters are not supported on {type(model).__name__} (model_type '{model_type}'); "
            f"supported model types: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    if getattr(base.config, "is_decoder", False):
        raise UnsupportedModelError("CA-MTL adapters need an encoder (config.is_decoder is set)")


def attach_ca_mtl(model, config: CAMTLConfig) -> CAMTLModules:
    """Creates the shared conditional modules, the task-embedding layer and the hooks of ``model`` (once)."""
    check_model(model)
    base = model.base_model
    existing = getattr(base, "ca_mtl", None)
    if isinstance(existing, CAMTLModules):
        differences = ca_mtl_config_differences(existing.config, config)
        if differences:
            raise ConfigError(
                "all CA-MTL adapters of a model share its conditional modules and need the same config; "
                f"this one differs from the model's: {'; '.join(differences)}"
            )
        return existing
    layers = [layer for _, layer in base.iter_layers()]
    sizes = config.sizes(base.config.hidden_size, len(layers))  # impossible sizes -> ConfigError, nothing built
    first = next(base.parameters())
    with torch.device(first.device):
        modules = CAMTLModules(
            sizes.hidden_size,
            sizes.num_layers,
            sizes.max_seq_length,
            sizes.block_size,
            sizes.first_conditional_norm_layer,
            sizes.bottleneck_size,
            init_range=config.init_range,
            eps=getattr(base.config, "layer_norm_eps", 1e-12),
        )
    modules.to(dtype=first.dtype)
    modules.config = config
    modules.sizes = sizes
    modules.train(base.training)
    base.ca_mtl = modules
    tasks = CAMTLTaskEmbeddings(sizes.hidden_size, base.adapters_config)
    tasks.train(base.training)
    layers[0].ca_mtl_tasks = tasks
    base.embeddings.register_forward_hook(functools.partial(align_embeddings, tasks, modules))
    for layer, conditional in zip(layers, modules.layers):
        layer.attention.register_forward_pre_hook(functools.partial(add_attention_bias, conditional), with_kwargs=True)
        if conditional.attention_norm is not None:
            layer.attention.output.LayerNorm.register_forward_hook(
                functools.partial(conditional_norm, conditional.attention_norm)
            )
            layer.output.LayerNorm.register_forward_hook(functools.partial(conditional_norm, conditional.output_norm))
        if conditional.bottleneck is not None:
            layer.output.register_forward_hook(functools.partial(conditional_bottleneck, conditional), with_kwargs=True)
    return modules


_HOOKS = (align_embeddings, add_attention_bias, conditional_norm, conditional_bottleneck)


def detach_ca_mtl(model) -> None:
    """Removes what `attach_ca_mtl` added: the shared modules, the task-embedding layer and the hooks
    (done when the model's last CA-MTL adapter is deleted)."""
    base = model.base_model
    for module in base.modules():
        for hooks, extras in (
            (module._forward_hooks, (module._forward_hooks_with_kwargs, module._forward_hooks_always_called)),
            (module._forward_pre_hooks, (module._forward_pre_hooks_with_kwargs,)),
        ):
            for key in [k for k, hook in hooks.items() if getattr(hook, "func", None) in _HOOKS]:
                del hooks[key]
                for extra in extras:
                    extra.pop(key, None)
    for _, layer in base.iter_layers():
        if isinstance(getattr(layer, "ca_mtl_tasks", None), CAMTLTaskEmbeddings):
            del layer.ca_mtl_tasks
    if isinstance(getattr(base, "ca_mtl", None), CAMTLModules):
        del base.ca_mtl


def ca_mtl_config_differences(a: CAMTLConfig, b: CAMTLConfig) -> list[str]:
    """The settings of two CA-MTL configs that differ, as readable lines."""
    return differences(a.to_dict(), b.to_dict(), every_key=True)


def trainable_shared_parameters(model) -> list[tuple[str, nn.Parameter]]:
    """The shared weights CA-MTL trains (names relative to the base model): the conditional modules, the
    base layers above the frozen bottom ones, and the pooler (per the config). The embeddings, the bottom
    layers and every adapter module inside the layers are not among them; nor are the task embeddings."""
    base = model.base_model
    modules = ca_mtl_modules(model)
    config, sizes = modules.config, modules.sizes
    out = []
    for name, param in modules.named_parameters():
        index = int(name.split(".")[1]) if name.startswith("layers.") else None
        frozen_layer = index is not None and index < sizes.num_frozen_layers
        if (
            frozen_layer
            and not config.train_frozen_attention_film
            and name.startswith(f"layers.{index}.attention.film.")
        ):
            continue  # the reference code's quirk: left at its random initialisation in frozen layers
        out.append((f"ca_mtl.{name}", param))
    adapter_ids = _adapter_parameter_ids(base)
    for index, layer in base.iter_layers():
        if index < sizes.num_frozen_layers:
            continue
        prefix = _module_name(base, layer)
        out += [(f"{prefix}.{n}", p) for n, p in layer.named_parameters() if id(p) not in adapter_ids]
    pooler = getattr(base, "pooler", None)
    if config.train_pooler and pooler is not None:
        out += [(f"pooler.{n}", p) for n, p in pooler.named_parameters()]
    return out


def _adapter_parameter_ids(module: nn.Module) -> set:
    """Parameters of adapter modules inside ``module`` (PALs, bottleneck adapters, LoRA, CA-MTL task embeddings ...)."""
    ids = set()
    for sub in module.modules():
        if isinstance(sub, AdapterLayerBase):
            for owned in (getattr(sub, sub.adapter_modules_name, None), getattr(sub, "adapter_fusion_layer", None)):
                if isinstance(owned, nn.Module):
                    ids.update(id(p) for p in owned.parameters())
    return ids


def _module_name(root: nn.Module, target: nn.Module) -> str:
    for name, module in root.named_modules():
        if module is target:
            return name
    raise ValueError("module not found in the model")


def reinitialize_top_layer(model) -> None:
    """Re-initialises the top transformer layer as the reference code does (its top layer is renamed so
    that BERT's checkpoint does not load into it). Not done by default: the paper modulates the upper
    layers, it does not replace them. Call it once, before training."""
    base = model.base_model
    layers = [layer for _, layer in base.iter_layers()]
    adapter_ids = _adapter_parameter_ids(layers[-1])
    fresh = {id(p) for p in layers[-1].parameters()} - adapter_ids
    for module in layers[-1].modules():
        if any(id(p) in fresh for p in module.parameters(recurse=False)):
            base._init_weights(module)
