"""Where a PAL sits in one layer of each supported encoder family: one table, no per-model code.

A PAL reads the hidden states ``h`` entering a layer (and the layer's attention mask) and adds
``TS(h)`` to the residual that goes into the layer's output LayerNorm, i.e. before the LayerNorm of
a post-LN block. With `adapters` 1.3 every family below calls one module with that residual as an
argument (``BertOutput(hidden, input_tensor)`` or the library's ``output_adapters(hidden, residual,
layer_norm)``), so a row only names the layer's arguments and that module's argument.
"""

from typing import NamedTuple

from .errors import UnsupportedModelError


class Arg(NamedTuple):
    """A forward argument, found by position or by keyword."""

    position: int
    name: str


class PALSite(NamedTuple):
    """Where a PAL reads its input and adds its output, for one architecture."""

    hidden: Arg  # layer input h
    mask: Arg  # the layer's attention mask
    # "additive": float, added to the scores (None when there is no padding); "keep": 1 = attend, 0 = masked.
    # A 2-D (batch, length) mask is always a keep mask (DistilBERT's eager path).
    mask_kind: str
    residual_module: str  # attribute of the layer that is called with the residual
    residual: Arg  # that module's argument holding the residual (it reaches the output LayerNorm)


_BERT_LIKE = PALSite(Arg(0, "hidden_states"), Arg(1, "attention_mask"), "additive", "output", Arg(1, "input_tensor"))

# model_type -> site. Checked against each model's layer code in transformers 4.57 and its
# `adapters` 1.3 override (adapters/models/<family>/modeling_<family>.py).
ARCHITECTURES = {
    "bert": _BERT_LIKE,
    "roberta": _BERT_LIKE,
    "xlm-roberta": _BERT_LIKE,
    "electra": _BERT_LIKE,
    # DebertaV2Layer(hidden_states, attention_mask, ...); the encoder passes a (B, 1, T, T) 0/1 mask.
    "deberta-v2": PALSite(Arg(0, "hidden_states"), Arg(1, "attention_mask"), "keep", "output", Arg(1, "input_tensor")),
    # TransformerBlock(x, attn_mask, ...) -> output_adapters(ffn_output, sa_output, output_layer_norm).
    "distilbert": PALSite(Arg(0, "x"), Arg(1, "attn_mask"), "additive", "output_adapters", Arg(1, "residual_input")),
    # AlbertLayer -> output_adapters(ffn_output, attention_output, full_layer_layer_norm). One PAL per
    # distinct layer object, so a layer shared across depth shares its PAL too (as every adapters method does).
    "albert": PALSite(
        Arg(0, "hidden_states"), Arg(1, "attention_mask"), "additive", "output_adapters", Arg(1, "residual_input")
    ),
    # XmodLayer(hidden_states, lang_ids, attention_mask, ...) -> output(intermediate, residual, lang_ids);
    # the residual sum goes through the output LayerNorm (post-norm X-MOD only).
    "xmod": PALSite(Arg(0, "hidden_states"), Arg(2, "attention_mask"), "additive", "output", Arg(1, "input_tensor")),
}


def _config_problem(config) -> str | None:
    """Why a model of a supported family still cannot carry PALs, or None."""
    if getattr(config, "chunk_size_feed_forward", 0):
        return (
            "PAL adapters need chunk_size_feed_forward=0 (the PAL output is added to the whole sequence); "
            f"this model has {config.chunk_size_feed_forward}"
        )
    if getattr(config, "is_decoder", False):
        # A PAL attends over the tokens of the current call only; a decoder's key/value cache would hide the past.
        return "PAL adapters need a bidirectional encoder; this model is configured as a decoder (is_decoder=True)"
    if getattr(config, "pre_norm", False):
        return "PAL adapters need post-LayerNorm layers; this model has pre_norm=True"
    return None


def site_for(model) -> PALSite:
    """The `PALSite` of ``model``'s layers; `UnsupportedModelError` if PALs do not fit it (nothing is built)."""
    base = model.base_model
    config = base.config
    model_type = getattr(config, "model_type", None)
    site = ARCHITECTURES.get(model_type)
    if site is None or getattr(base, "adapter_interface", None) is not None:
        raise UnsupportedModelError(
            f"PAL adapters are not supported on {type(model).__name__} (model_type '{model_type}'); "
            f"supported model types: {', '.join(ARCHITECTURES)}"
        )
    problem = _config_problem(config)
    if problem:
        raise UnsupportedModelError(problem)
    return site


def supports_pals(model) -> bool:
    """True if PAL adapters can be added to ``model``."""
    try:
        site_for(model)
    except UnsupportedModelError:
        return False
    return True
