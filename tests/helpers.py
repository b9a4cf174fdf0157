"""Small models and batches shared by the tests (import them with ``from helpers import ...``)."""

import os
from pathlib import Path

import torch
from transformers import BertConfig, RobertaConfig

REPO = Path(__file__).resolve().parents[1]


def tiny_bert_config(attn="eager", hidden=48, layers=4, **kw):
    return BertConfig(
        vocab_size=99,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        attn_implementation=attn,
        **kw,
    )


def tiny_roberta_config(attn="eager", hidden=48, layers=4):
    return RobertaConfig(
        vocab_size=99,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=70,
        pad_token_id=1,
        attn_implementation=attn,
    )


def batch(padded=True, size=4, length=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 99, (size, length), generator=g)
    mask = torch.ones(size, length, dtype=torch.long)
    if padded:
        mask[1, 6:] = 0
        mask[3, 3:] = 0
    return ids, mask


def glue_dir():
    """The shared GLUE folder, or None (tests that need it skip)."""
    path = Path(os.environ.get("GLUE_DIR", REPO.parent / "shared" / "glue"))
    return path if path.is_dir() else None
