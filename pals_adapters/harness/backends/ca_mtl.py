"""Backend of CA-MTL: one task embedding per task (an `adapters` adapter of config ``ca_mtl``); the
conditional modules are shared by every task, like the fine-tuned base, and are exported with it."""

from __future__ import annotations

from ...ca_mtl import load_shared_state_dict, shared_state_dict, trainable_shared_parameters
from ...errors import AdapterLoadError
from .adapter_configs import AdapterConfigBackend
from .base import register_backend


@register_backend
class CAMTLBackend(AdapterConfigBackend):
    kind = "ca_mtl"
    supports_mixed_batches = True  # rows are routed to their task embedding by adapters' MultiTask block
    has_shared_modules = True

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
