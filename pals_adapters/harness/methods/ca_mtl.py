"""Backend of CA-MTL: one task embedding per task (an `adapters` adapter of config ``ca_mtl``); the
conditional modules are shared by every task, like the fine-tuned base, and are exported with it."""

from __future__ import annotations

from adapters import AdapterConfig

from ...ca_mtl import SUPPORTED_MODEL_TYPES, load_shared_state_dict, shared_state_dict, trainable_shared_parameters
from ...ca_mtl.layer import CAMTLTaskEmbeddings
from ...errors import AdapterLoadError, ConfigError
from .adapter_configs import AdapterConfigBackend
from .backend import register_backend


@register_backend
class CAMTLBackend(AdapterConfigBackend):
    kind = "ca_mtl"
    supports_mixed_batches = True  # rows are routed to their task embedding by adapters' MultiTask block
    has_shared_modules = True

    @classmethod
    def check_run(cls, method, max_length, model_config):
        model_type = getattr(model_config, "model_type", None)
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ConfigError(
                f"method {method.spec!r} needs a BERT-like encoder ({', '.join(SUPPORTED_MODEL_TYPES)}); "
                f"the model is a {model_type!r}: choose another method or model"
            )
        config = AdapterConfig.load(method.adapters_config())
        # the block layout, frozen layers and bottleneck on this model (ConfigError naming the setting)
        config.sizes(model_config.hidden_size, model_config.num_hidden_layers)
        if max_length > config.max_seq_length:
            raise ConfigError(
                f"max_length={max_length}: method {method.spec!r} lays its conditional attention out over "
                f"max_seq_length={config.max_seq_length} tokens, and longer inputs cannot run through it: choose "
                f"max_length <= {config.max_seq_length}, or a layout that covers the inputs (the method setting "
                f"max_seq_length={max_length})"
            )

    def layers_read_early(self, model):
        # the task embeddings sit in layer 0 (adapters' per-layer machinery saves and loads them) and are read
        # by the embeddings' forward hook, before layer 0 runs
        layers = [layer for _, layer in model.backbone.base_model.iter_layers()]
        return [layer for layer in layers if isinstance(getattr(layer, "ca_mtl_tasks", None), CAMTLTaskEmbeddings)]

    def trainable_shared_parameters(self, model):
        # the conditional modules, the layers above the frozen bottom ones and the pooler (per the config);
        # the embeddings and the bottom layers stay as pretrained
        trained = {id(p) for _, p in trainable_shared_parameters(model.encoder)}
        return [(name, param) for name, param in model.shared_parameters() if id(param) in trained]

    def shared_state(self, model):
        return shared_state_dict(model.encoder)

    def load_shared_state(self, model, state, source):
        if not state:
            raise AdapterLoadError(
                f"{source}: no CA-MTL shared modules there; a CA-MTL task needs the conditional modules exported "
                "with its fine-tuned base (<export>/base/shared_modules.safetensors)"
            )
        load_shared_state_dict(model.encoder, state, source)
