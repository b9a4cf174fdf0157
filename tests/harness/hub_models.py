"""Tiny random encoders of every family PALs support, saved with tokenizer files shaped as the hub ships
them: no tokenizer.json at all (slow files only, converted on load) or one whose truncation and padding
are null; WordPiece vocab.txt, byte-level BPE vocab.json + merges.txt, SentencePiece model files.

The vocabularies are trained here, offline, on a few hundred GLUE sentences (`tokenizers` for WordPiece
and BPE, the `sentencepiece` trainer for the SentencePiece families; without that package those
families are skipped)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModel, AutoTokenizer

SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)
_ROBERTA_LIKE = dict(SIZES, max_position_embeddings=70, pad_token_id=1)
CONFIGS = {
    "bert": SIZES,
    "roberta": _ROBERTA_LIKE,
    "xlm-roberta": _ROBERTA_LIKE,
    "electra": dict(SIZES, embedding_size=16),
    "deberta-v2": dict(SIZES, relative_attention=True, pos_att_type=["p2c", "c2p"], max_position_embeddings=128),
    "distilbert": dict(dim=32, n_layers=2, n_heads=4, hidden_dim=37),
    "albert": dict(SIZES, embedding_size=16),
    "xmod": dict(_ROBERTA_LIKE, default_language="en_XX"),
}

# family -> how its hub models ship the tokenizer (a replica of one well-known model of the family)
SHAPES = {
    # bert-base-uncased: vocab.txt, tokenizer.json (truncation/padding null), and only these two settings
    "bert": ("wordpiece", "tokenizer.json", {"do_lower_case": True, "model_max_length": 512}),
    # the same without tokenizer.json: a slow tokenizer converted on load
    "bert-vocab-only": ("wordpiece", None, {"do_lower_case": True, "model_max_length": 512}),
    # google/electra-small-discriminator-like, slow files only
    "electra": ("wordpiece", None, {"do_lower_case": True}),
    # distilbert-base-uncased
    "distilbert": ("wordpiece", "tokenizer.json", {"do_lower_case": True}),
    # roberta-base: vocab.json + merges.txt, no tokenizer_config.json
    "roberta": ("bpe", None, None),
    # xlm-roberta-base: sentencepiece.bpe.model + tokenizer.json, no tokenizer_config.json
    "xlm-roberta": ("sentencepiece", "tokenizer.json", None),
    # facebook/xmod-base: the XLM-R tokenizer, model file only
    "xmod": ("sentencepiece", None, None),
    # albert-base-v2: spiece.model
    "albert": ("sentencepiece", None, None),
    # microsoft/deberta-v3-*: spm.model and two settings
    "deberta-v2": ("sentencepiece", None, {"do_lower_case": False, "vocab_type": "spm"}),
}
FAMILY = {"bert-vocab-only": "bert"}  # shape -> family, where they differ

_SP_FILE = {"xlm-roberta": "sentencepiece.bpe.model", "xmod": "sentencepiece.bpe.model", "albert": "spiece.model"}
_SP_FILE["deberta-v2"] = "spm.model"
# family -> the ids the family's SentencePiece files give their control pieces
_SP_IDS = {
    "xlm-roberta": dict(unk_id=0, bos_id=1, eos_id=2, pad_id=-1),
    "xmod": dict(unk_id=0, bos_id=1, eos_id=2, pad_id=-1),
    "albert": dict(pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"]),
    "deberta-v2": dict(
        pad_id=0,
        pad_piece="[PAD]",
        bos_id=1,
        bos_piece="[CLS]",
        eos_id=2,
        eos_piece="[SEP]",
        unk_id=3,
        unk_piece="[UNK]",
    ),
}


def sentences(glue: Path, count: int = 600) -> list[str]:
    lines = (glue / "CoLA" / "train.tsv").read_text(encoding="utf-8").splitlines()[:count]
    rows = (glue / "RTE" / "train.tsv").read_text(encoding="utf-8").splitlines()[1:count]
    return [line.split("\t")[-1] for line in lines] + [part for row in rows for part in row.split("\t")[1:3]]


def _wordpiece(folder: Path, text: list[str]) -> None:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer.train_from_iterator(text, trainers.WordPieceTrainer(vocab_size=400, special_tokens=special))
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    (folder / "vocab.txt").write_text("".join(token + "\n" for token, _ in vocab), encoding="utf-8")


def _bpe(folder: Path, text: list[str]) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    special = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(text, trainer)
    tokenizer.model.save(str(folder))  # vocab.json, merges.txt


def _sentencepiece(folder: Path, text: list[str], family: str) -> None:
    spm = pytest.importorskip("sentencepiece", reason="the SentencePiece families need the sentencepiece trainer")
    pytest.importorskip("google.protobuf", reason="transformers converts SentencePiece files with protobuf")
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text),
        model_writer=model,
        vocab_size=300,
        model_type="unigram",
        character_coverage=1.0,
        minloglevel=2,
        num_threads=1,
        **_SP_IDS[family],
    )
    (folder / _SP_FILE[family]).write_bytes(model.getvalue())


def build(shape: str, folder: Path, glue: Path, seed: int = 0) -> Path:
    """A tiny random model of ``shape``'s family in ``folder``, with the tokenizer files of ``SHAPES[shape]``."""
    family = FAMILY.get(shape, shape)
    kind, tokenizer_json, settings = SHAPES[shape]
    folder.mkdir(parents=True)
    text = sentences(glue)
    if kind == "wordpiece":
        _wordpiece(folder, text)
    elif kind == "bpe":
        _bpe(folder, text)
    else:
        _sentencepiece(folder, text, family)
    if settings is not None:
        (folder / "tokenizer_config.json").write_text(json.dumps(settings), encoding="utf-8")
    AutoConfig.for_model(family).save_pretrained(folder)  # AutoTokenizer reads the model type
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    if tokenizer_json:
        backend = json.loads(tokenizer.backend_tokenizer.to_str())
        backend["truncation"] = backend["padding"] = None  # as the hub has them
        (folder / tokenizer_json).write_text(json.dumps(backend, ensure_ascii=False), encoding="utf-8")
    config = AutoConfig.for_model(family, vocab_size=len(tokenizer), **CONFIGS[family])
    torch.manual_seed(seed)
    AutoModel.from_config(config).save_pretrained(folder)
    return folder
