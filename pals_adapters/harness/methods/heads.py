"""Backend of the methods whose only task-specific weights are the heads: ``shared``
(one shared encoder, a head per task) and ``separate`` (one task per run: a model of its own)."""

from __future__ import annotations

from .backend import MethodBackend, register_backend


@register_backend
class HeadsOnlyBackend(MethodBackend):
    kind = "heads"
    supports_mixed_batches = True  # nothing to route inside the encoder

    def encode_mixed(self, model, task_ids, **inputs):
        return model.encoder(**inputs).last_hidden_state  # the encoder is the same for every task
