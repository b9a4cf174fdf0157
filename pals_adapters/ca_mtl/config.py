"""`CAMTLConfig`: CA-MTL_BASE (Pilault et al., ICLR 2021) as an `adapters` config type.

Sizes that the reference code hard-codes for BERT-base (768 hidden, blocks of a 128-token layout,
a 256-wide bottleneck) are derived from the model here; `CAMTLSizes` holds what one model gets.
"""

import math
from dataclasses import dataclass
from typing import NamedTuple

from adapters import AdapterConfig

from ..errors import ConfigError


class CAMTLSizes(NamedTuple):
    """The sizes one model gets from a `CAMTLConfig` (see `CAMTLConfig.sizes`)."""

    hidden_size: int  # d, also the size of a task embedding z
    num_layers: int
    max_seq_length: int  # L: the block layout of the conditional attention covers L tokens
    num_blocks: int  # N blocks on the diagonal
    block_size: int  # ceil(L / N); the last block is smaller when N does not divide L
    num_frozen_layers: int  # layers 0 .. num_frozen_layers - 1 stay as pretrained
    first_conditional_norm_layer: int  # layers from here on get conditional LayerNorms
    bottleneck_size: int  # width of the conditional bottleneck in the top layer


@dataclass(eq=False)
class CAMTLConfig(AdapterConfig):
    """CA-MTL_BASE: a task embedding ``z`` per task; every other weight is shared by all tasks.

    ``model.add_adapter("cola", config="ca_mtl")`` adds the task embedding of ``cola``; the first
    CA-MTL adapter of a model also creates the shared conditional modules (every CA-MTL adapter of
    one model must have the same config, as they all use these modules):

    - conditional alignment after the embeddings: ``(1 + γ(z)) ⊙ E + β(z)``;
    - conditional attention in every layer: ``softmax(QKᵀ/√d_head + M(z) + mask) V`` with ``M(z)`` a
      block-diagonal matrix of ``N`` blocks ``A_n`` FiLM-modulated by ``z``;
    - conditional LayerNorms (both LayerNorms of each layer from ``first_conditional_norm_layer`` on),
      starting from BERT's own LayerNorm weights;
    - a conditional bottleneck (FiLM, down, up, conditional LayerNorm) in the top layer.

    Args:
        max_seq_length: ``L``, the number of token positions the block layout covers (the paper's
            and the reference code's sequence length, 128). Shorter sequences (dynamic padding) use
            the top-left ``T x T`` corner; longer ones are refused.
        num_blocks: ``N``, the number of diagonal blocks. ``None``: the paper's ``N = d / L``
            (rounded down, at least 1): 6 at BERT-base, 3 at MiniLM (d = 384).
        num_frozen_layers: Bottom layers that keep their pretrained weights (the embeddings are always
            frozen). ``None``: the bottom half, as in the paper (the reference code freezes 0-4 of 12).
        first_conditional_norm_layer: First layer with conditional LayerNorms. ``None``: the upper half
            (layers 6-11 of BERT-base, as in the reference code).
        bottleneck_size: Width of the top layer's conditional bottleneck. ``None``: ``d // 3`` (256 at
            BERT-base, as in the reference code).
        train_pooler: The shared pooler trains with the upper layers (as in the reference code).
        train_frozen_attention_film: The FiLM of the conditional attention trains in the frozen bottom
            layers too. The reference code leaves it at its random initialisation there (its name
            escapes the "keep trainable" filter); ``False`` reproduces that.
        init_range: Standard deviation of the normal initialisation of the new weight matrices and of
            the task embeddings (biases start at 0, the attention blocks ``A_n`` at 0, as in the code).
    """

    architecture: str | None = "ca_mtl"

    max_seq_length: int = 128
    num_blocks: int | None = None
    num_frozen_layers: int | None = None
    first_conditional_norm_layer: int | None = None
    bottleneck_size: int | None = None
    train_pooler: bool = True
    train_frozen_attention_film: bool = True
    init_range: float = 0.02

    def __post_init__(self):
        def fail(name, problem):
            raise ConfigError(f"CAMTLConfig.{name}={getattr(self, name)!r}: {problem}")

        def positive_int(name, optional=True):
            value = getattr(self, name)
            if value is None and optional:
                return
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                fail(name, "must be a positive integer" + (", or None to derive it from the model" if optional else ""))

        if self.architecture != "ca_mtl":
            fail("architecture", "must be 'ca_mtl'")
        positive_int("max_seq_length", optional=False)
        positive_int("num_blocks")
        positive_int("bottleneck_size")
        for name in ("num_frozen_layers", "first_conditional_norm_layer"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                fail(name, "must be an integer >= 0, or None for the paper's half of the layers")
        for name in ("train_pooler", "train_frozen_attention_film"):
            if not isinstance(getattr(self, name), bool):
                fail(name, "must be True or False")
        if not (isinstance(self.init_range, (int, float)) and self.init_range > 0):
            fail("init_range", "must be > 0")
        if self.num_blocks is not None:
            _block_layout(self.max_seq_length, self.num_blocks, fail)

    def sizes(self, hidden_size: int, num_layers: int) -> CAMTLSizes:
        """What a model with this hidden size and number of layers gets (refuses impossible layouts)."""

        def fail(name, problem):
            raise ConfigError(
                f"CAMTLConfig.{name}={getattr(self, name)!r} on a model with {num_layers} layers of width "
                f"{hidden_size}: {problem}"
            )

        blocks = self.num_blocks if self.num_blocks is not None else max(1, hidden_size // self.max_seq_length)
        block_size = _block_layout(self.max_seq_length, blocks, fail)
        half = num_layers // 2
        frozen = half if self.num_frozen_layers is None else self.num_frozen_layers
        first_norm = half if self.first_conditional_norm_layer is None else self.first_conditional_norm_layer
        if frozen > num_layers:
            fail("num_frozen_layers", f"the model has only {num_layers} layers")
        if first_norm > num_layers - 1:
            fail("first_conditional_norm_layer", f"the model's layers are 0..{num_layers - 1}")
        bottleneck = self.bottleneck_size if self.bottleneck_size is not None else max(1, hidden_size // 3)
        return CAMTLSizes(
            hidden_size, num_layers, self.max_seq_length, blocks, block_size, frozen, first_norm, bottleneck
        )


def _block_layout(length: int, blocks: int, fail) -> int:
    """Block size of ``blocks`` diagonal blocks over ``length`` positions, as the reference code lays
    them out: ``ceil(L / N)`` rows each, the last block taking what is left (it must not be empty)."""
    size = math.ceil(length / blocks)
    if blocks > length or (blocks - 1) * size >= length:
        fail(
            "num_blocks", f"{blocks} blocks of ceil({length}/{blocks}) = {size} positions do not fit {length} positions"
        )
    return size


CA_MTL_PRESETS = {"ca_mtl": CAMTLConfig()}
