"""Tiny CA-MTL models and a plain re-statement of CA-MTL's formulas, shared by the CA-MTL tests."""

import math

import torch
from helpers import tiny_bert_config
from tiny_models import bert
from transformers import BertModel

from pals_adapters.ca_mtl import (
    save_shared_modules,
)

# 16 positions in 4 blocks of 4, or 3 blocks of 6, 6 and 4 (the reference's uneven layout)
CONFIG = "ca_mtl[max_seq_length=16,num_blocks=4]"
UNEVEN = "ca_mtl[max_seq_length=16,num_blocks=3]"


def with_tasks(model, *names, config=CONFIG):
    for name in names:
        model.add_adapter(name, config=config)
    randomize(model)
    return model


def randomize(model):
    """Non-trivial shared modules: the attention blocks start at 0 and the biases at 0, as in the code."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in model.base_model.ca_mtl.parameters():
            param.add_(torch.randn(param.shape, generator=g) * 0.2)


def encoder(model, ids, mask, **kw):
    return model.base_model(ids, attention_mask=mask, **kw).last_hidden_state


# --- an independent, plain re-statement of the paper's / reference code's formulas -------------------


def split_film(z, projection):
    gamma, beta = (z @ projection.weight.T + projection.bias).chunk(2, dim=-1)
    return gamma, beta


def reference_block_bias(z, attention, length):
    """M(z) as the reference code builds it: modulate the columns of the stacked blocks, cut the rows
    into N chunks, ``torch.block_diag`` them, drop the columns beyond L, then take the T x T corner."""
    gamma, beta = split_film(z, attention.film.projection)
    out = []
    for row in range(z.shape[0]):
        modulated = (1 + gamma[row]) * attention.blocks + beta[row]  # (L, b)
        chunks = modulated.split(attention.block_size, dim=0)
        full = torch.block_diag(*chunks)[:, : attention.max_seq_length]
        out.append(full[:length, :length])
    return torch.stack(out)


def reference_layer_norm(x, layer_norm, cln, z, weight=None, bias=None, eps=None):
    weight = layer_norm.weight if weight is None else weight
    bias = layer_norm.bias if bias is None else bias
    eps = layer_norm.eps if eps is None else eps
    normed = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + eps)
    if cln is None:
        return normed * weight + bias
    gamma, beta = split_film(z, cln.modulation.projection)
    return normed * ((1 + gamma) * weight + beta)[:, None, :] + bias


def reference_forward(model, plain, ids, attention_mask, z):
    """CA-MTL_BASE written out with matmuls, for rows conditioned on ``z`` (B, d); ``plain`` is an
    unadapted BERT with the same base weights."""
    shared = model.base_model.ca_mtl
    batch_size, length = ids.shape
    mask = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
    embedded = plain.embeddings(input_ids=ids)
    gamma, beta = split_film(z, shared.alignment.film.projection)
    h = (1 + gamma[:, None, :]) * embedded + beta[:, None, :]  # conditional alignment
    zt = z @ shared.task_transform.weight.T + shared.task_transform.bias
    for layer, conditional in zip(plain.encoder.layer, shared.layers):
        sa = layer.attention.self
        heads, size = sa.num_attention_heads, sa.attention_head_size
        q, k, v = (
            (h @ lin.weight.T + lin.bias).reshape(batch_size, length, heads, size).transpose(1, 2)
            for lin in (sa.query, sa.key, sa.value)
        )
        bias = reference_block_bias(zt, conditional.attention, length)[:, None]
        scores = q @ k.transpose(-1, -2) / math.sqrt(size) + bias + mask
        context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch_size, length, heads * size)
        a = reference_layer_norm(
            layer.attention.output.dense(context) + h, layer.attention.output.LayerNorm, conditional.attention_norm, zt
        )
        ffn = layer.output.dense(layer.intermediate(a))
        out = reference_layer_norm(ffn + a, layer.output.LayerNorm, conditional.output_norm, zt)
        if conditional.bottleneck is not None:
            b = conditional.bottleneck
            c = zt @ b.condition.weight.T + b.condition.bias
            g, bt = split_film(c, b.film.projection)
            y = ((1 + g[:, None, :]) * out + bt[:, None, :]) @ b.down.weight.T + b.down.bias
            y = y @ b.up.weight.T + b.up.bias
            out = reference_layer_norm(y + a, None, b.norm, zt, b.norm.weight, b.norm.bias, b.norm.eps)
        h = out
    return h


def plain_copy(model, attn="eager", config=None):
    plain = BertModel(config or tiny_bert_config(attn)).eval()
    plain.load_state_dict(model.state_dict(), strict=False)
    return plain


def task_z(model, name, rows):
    return model.encoder.layer[0].ca_mtl_tasks.adapters[name].weight.expand(rows, -1)


# --- identity modulation ------------------------------------------------------------------------------


def identity_modulation(model):
    with torch.no_grad():
        for name, param in model.base_model.ca_mtl.named_parameters():
            if ".projection." in name or name.startswith("layers.") and name.endswith("attention.blocks"):
                param.zero_()


def shared_count(model):
    return sum(p.numel() for p in model.base_model.ca_mtl.parameters())


def plain_copy_of(model):
    fresh = bert()
    fresh.load_state_dict({k: v for k, v in model.state_dict().items() if "ca_mtl" not in k}, strict=False)
    return fresh


def saved_tasks(tmp_path, *names):
    """A model with trained-looking CA-MTL tasks, their folders and its shared modules' folder."""
    model = with_tasks(bert(), *names)
    for name in names:
        model.save_adapter(str(tmp_path / name), name)
    save_shared_modules(model, tmp_path / "shared")
    return model
