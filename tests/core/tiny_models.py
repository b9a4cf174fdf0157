"""Tiny random encoders of every family PALs support, a plain re-statement of the PAL formula, and the
tiny BERT wrapped by `adapters` that the PAL and CA-MTL tests build on."""

import math

import adapters
import torch
import torch.nn.functional as F
from helpers import tiny_bert_config
from transformers import (
    AlbertConfig,
    AutoModel,
    BertConfig,
    BertModel,
    DebertaV2Config,
    DistilBertConfig,
    ElectraConfig,
    RobertaConfig,
    XLMRobertaConfig,
    XmodConfig,
)

VOCAB = 99
_COMMON = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)
_ROBERTA_LIKE = dict(_COMMON, max_position_embeddings=70, pad_token_id=1)

# name -> (config factory, the output LayerNorm of one layer: where the paper adds TS(h)).
# The LayerNorm names come from transformers' layer code; they are not the plugin's table, which
# names the module receiving the residual instead, so the formula check below is independent of it.
ARCHITECTURES = {
    "bert": (lambda **kw: BertConfig(**_COMMON, **kw), "output.LayerNorm"),
    "roberta": (lambda **kw: RobertaConfig(**_ROBERTA_LIKE, **kw), "output.LayerNorm"),
    "xlm-roberta": (lambda **kw: XLMRobertaConfig(**_ROBERTA_LIKE, **kw), "output.LayerNorm"),
    "electra": (lambda **kw: ElectraConfig(**_COMMON, embedding_size=16, **kw), "output.LayerNorm"),
    "deberta-v2": (
        lambda **kw: DebertaV2Config(**_COMMON, relative_attention=True, pos_att_type="p2c|c2p", **kw),
        "output.LayerNorm",
    ),
    "distilbert": (
        lambda **kw: DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=37, **kw),
        "output_layer_norm",
    ),
    # 3 layers in 2 groups: the first layer object runs twice, sharing its PAL.
    "albert": (
        lambda **kw: AlbertConfig(**dict(_COMMON, num_hidden_layers=3), embedding_size=16, num_hidden_groups=2, **kw),
        "full_layer_layer_norm",
    ),
    # post-norm X-MOD; adapters' X-MOD layer sends the residual sum through this LayerNorm.
    "xmod": (lambda **kw: XmodConfig(**_ROBERTA_LIKE, default_language="en_XX", **kw), "output.LayerNorm"),
}


def tiny_config(arch: str, **kw):
    config = ARCHITECTURES[arch][0](**kw)
    return config


def plain_model(arch: str, seed: int = 0, **kw):
    """An unadapted encoder wrapped with ``adapters.init`` (eval mode)."""
    torch.manual_seed(seed)
    model = AutoModel.from_config(tiny_config(arch, **kw))
    adapters.init(model)
    return model.eval()


def inputs(size=3, length=9, padded=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (size, length), generator=g)
    mask = torch.ones(size, length, dtype=torch.long)
    if padded:
        mask[1, 6:] = 0
        mask[-1, 3:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def encode(model, batch):
    return model(**batch).last_hidden_state


def output_norms(model, arch: str):
    """The output LayerNorm of every layer, with the layer."""
    path = ARCHITECTURES[arch][1].split(".")
    pairs = []
    for _, layer in model.base_model.iter_layers():
        norm = layer
        for part in path:
            norm = getattr(norm, part)
        pairs.append((layer, norm))
    return pairs


def reference_pal(h, mask, pal, shared, heads):
    """TS(h) = GELU(V_D · MH_small(V_E · h)), written out with matmuls and softmax."""
    p = pal.projections if pal.projections is not None else shared
    x = h @ p["down_weight"].T + p["down_bias"]
    if pal.inner is not None:
        batch_size, length, size = x.shape
        head = size // heads
        q, k, v = (x @ pal.inner.qkv.weight.T + pal.inner.qkv.bias).split(size, dim=-1)
        q, k, v = (t.reshape(batch_size, length, heads, head).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(head) + mask
        x = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch_size, length, size)
    return F.gelu(x @ p["up_weight"].T + p["up_bias"])


def reference_forward(model, arch, name, batch, heads):
    """The unadapted model's output with ``TS(h)`` of adapter ``name`` added to each output LayerNorm's input.

    Hooks of this function only: the layer's first argument is ``h``; the first LayerNorm call after it
    gets ``+ TS(h)``. The mask is the plain additive form of the 2-D padding mask.
    """
    attention_mask = batch["attention_mask"]
    mask = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
    shared = model.base_model.shared_parameters[name] if name in model.base_model.shared_parameters else None
    handles, pending = [], []
    for layer, norm in output_norms(model, arch):
        if name not in layer.pals.adapters:
            continue
        pal = layer.pals.adapters[name]

        def read(module, args, pal=pal):
            pending.append(reference_pal(args[0], mask, pal, shared, heads))

        def add(module, args):
            return (args[0] + pending.pop(),) if pending else None

        handles += [layer.register_forward_pre_hook(read), norm.register_forward_pre_hook(add)]
    active = model.active_adapters
    model.set_active_adapters(None)
    try:
        return encode(model, batch)
    finally:
        model.set_active_adapters(active)
        for handle in handles:
            handle.remove()


PRESETS = ["pals", "pals_no_share", "low_rank", "pals_top_layers", "pals_bottom_layers"]


def wrapped(model):
    """``model`` with `adapters` support, in eval mode."""
    adapters.init(model)
    return model.eval()


def bert(attn="eager", **kw):
    """A tiny random BERT (`helpers.tiny_bert_config`) wrapped by `adapters`."""
    return wrapped(BertModel(tiny_bert_config(attn, **kw)))
