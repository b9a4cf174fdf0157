"""Small models and batches shared by the tests (import them with ``from helpers import ...``)."""

import hashlib
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


def fake_checkpoint(folder, missing=(), step=4):
    """A checkpoint-N folder whose files load as the Trainer's do (without ``missing``)."""
    import json

    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True)
    writers = {
        "model.safetensors": lambda path: save_file({"w": torch.arange(1000.0)}, str(path)),
        "optimizer.pt": lambda path: torch.save({"state": {0: {"exp_avg": torch.ones(99)}}, "param_groups": []}, path),
        "scheduler.pt": lambda path: torch.save({"last_epoch": step}, path),
        "trainer_state.json": lambda path: path.write_text(json.dumps({"global_step": step, "log_history": []})),
    }
    for name, write in writers.items():
        if name not in missing:
            write(folder / name)
    return folder


def tiny_run_config(model_dir, out, method="pals", **changes):
    """A harness run of a few steps on a tiny model and a few GLUE examples; ``changes`` override."""
    # Imported here: the core tests use this module too, and the core must not need the harness.
    from pals_adapters.harness import RunConfig

    settings = dict(
        model=str(model_dir),
        glue_dir=str(glue_dir()),
        method=method,
        max_steps=4,
        batch_size=8,
        max_length=32,
        lr=1e-3,
        max_train_examples=32,
        max_eval_examples=16,
        logging_steps=2,
        output_dir=str(out),
    )
    return RunConfig(**{**settings, **changes})


def file_hashes(folder):
    """sha256 of every file under ``folder``, by relative path."""
    return {
        p.relative_to(folder): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }
