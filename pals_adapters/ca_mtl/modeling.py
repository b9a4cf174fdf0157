"""The math of CA-MTL_BASE's conditional modules, in plain torch (no adapters or transformers glue).

Every module takes the task condition per row: ``z`` of shape ``(B, d)``, so one batch may mix tasks.
FiLM (Perez et al., 2018) as the reference code computes it: ``γ, β = split(W z + b)`` and
``FiLM(x) = (1 + γ) ⊙ x + β``, so that ``γ = β = 0`` leaves ``x`` unchanged.
"""

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError


def _linear(in_features: int, out_features: int, init_range: float) -> nn.Linear:
    layer = nn.Linear(in_features, out_features)
    nn.init.normal_(layer.weight, std=init_range)
    nn.init.zeros_(layer.bias)
    return layer


def film(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """``(1 + γ) ⊙ x + β``, broadcasting ``γ``, ``β`` of shape ``(B, k)`` over the middle dims of ``x`` (B, ..., k)."""
    shape = (gamma.shape[0],) + (1,) * (x.dim() - 2) + (gamma.shape[-1],)
    return (1 + gamma.view(shape)) * x + beta.view(shape)


class FiLM(nn.Module):
    """``γ(z), β(z)``: one linear map from the condition (size ``condition_size``) to ``2 · size`` values."""

    def __init__(self, condition_size: int, size: int, init_range: float = 0.02):
        super().__init__()
        self.projection = _linear(condition_size, 2 * size, init_range)

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gamma, beta = self.projection(z).chunk(2, dim=-1)
        return gamma, beta


class ConditionalAlignment(nn.Module):
    """Conditional alignment of the embedding output ``E`` (B, T, d): ``(1 + γ(z)) ⊙ E + β(z)``."""

    def __init__(self, hidden_size: int, init_range: float = 0.02):
        super().__init__()
        self.film = FiLM(hidden_size, hidden_size, init_range)

    def forward(self, embeddings: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return film(embeddings, *self.film(z))


class ConditionalAttentionBias(nn.Module):
    """``M(z)``, the block-diagonal term added to the attention scores: ``softmax(QKᵀ/√d_h + M(z) + mask) V``.

    ``blocks`` (L x b, b = ceil(L / N)) stacks the blocks ``A_1 .. A_N``: rows ``n·b .. n·b + b - 1`` are
    ``A_n``; the last block keeps only the rows (and as many columns) that are left. FiLM modulates the
    ``b`` columns: ``A'_n = (1 + γ(z)) ⊙ A_n + β(z)`` with ``γ, β`` in ``R^b``, the same for every block
    and row. So ``M[i, j] = A'[i, j mod b]`` if ``i`` and ``j`` fall in the same block, else 0. The bias
    is the same for every head. A sequence of ``T <= L`` tokens uses the top-left ``T x T`` corner.
    """

    def __init__(self, condition_size: int, max_seq_length: int, block_size: int, init_range: float = 0.02):
        super().__init__()
        self.max_seq_length = max_seq_length
        self.block_size = block_size
        self.blocks = nn.Parameter(torch.zeros(max_seq_length, block_size))  # zeros, as in the reference code
        self.film = FiLM(condition_size, block_size, init_range)

    def forward(self, z: torch.Tensor, length: int) -> torch.Tensor:
        """``M(z)`` for ``length`` tokens: shape ``(B, 1, length, length)`` (broadcast over heads)."""
        if length > self.max_seq_length:
            raise ConfigError(
                f"a sequence of {length} tokens is longer than the conditional attention's block layout "
                f"(max_seq_length={self.max_seq_length}): truncate the inputs, or add the adapters with a "
                "larger max_seq_length"
            )
        gamma, beta = self.film(z)  # (B, b): one value per column of a block
        modulated = (1 + gamma[:, None, :]) * self.blocks[:length] + beta[:, None, :]  # (B, T, b)
        position = torch.arange(length, device=z.device)
        column = position % self.block_size
        same_block = (position[:, None] // self.block_size) == (position[None, :] // self.block_size)
        bias = modulated.index_select(-1, column) * same_block.to(modulated.dtype)  # (B, T, T)
        return bias.unsqueeze(1)


class ConditionalLayerNorm(nn.Module):
    """``CLN(x) = (x - μ) / σ ⊙ ((1 + γ(z)) ⊙ w + β(z)) + b`` (the reference code's form: the weight is
    modulated, the bias is not).

    With ``own_affine=False`` it modulates a LayerNorm that lives elsewhere (BERT's own, passed to
    `forward`), so it starts from BERT's LayerNorm weights; with ``True`` it has its own ``w = 1``, ``b = 0``.
    """

    def __init__(self, hidden_size: int, init_range: float = 0.02, own_affine: bool = False, eps: float = 1e-12):
        super().__init__()
        self.modulation = FiLM(hidden_size, hidden_size, init_range)
        self.eps = eps
        if own_affine:
            self.weight = nn.Parameter(torch.ones(hidden_size))
            self.bias = nn.Parameter(torch.zeros(hidden_size))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(
        self,
        x: torch.Tensor,
        z: torch.Tensor,
        weight: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
        eps: float | None = None,
    ) -> torch.Tensor:
        weight = self.weight if weight is None else weight
        bias = self.bias if bias is None else bias
        eps = self.eps if eps is None else eps
        size = x.shape[-1]
        if weight is None:
            weight = torch.ones(size, dtype=x.dtype, device=x.device)
        gamma, beta = self.modulation(z)
        scale = (1 + gamma) * weight + beta  # (B, d)
        normed = F.layer_norm(x, (size,), None, None, eps)
        out = normed * scale.view(scale.shape[0], *([1] * (x.dim() - 2)), size)
        return out if bias is None else out + bias


class ConditionalBottleneck(nn.Module):
    """The top layer's conditional bottleneck (reference code): with ``h`` the layer's feed-forward block
    output and ``a`` its input (the attention block output),
    ``out = CLN(W_up · W_down · FiLM_{c}(h) + a)`` where ``c = W_c z + b_c``; no non-linearity between
    the two projections, and the residual is ``a``, not ``h``."""

    def __init__(self, hidden_size: int, bottleneck_size: int, init_range: float = 0.02, eps: float = 1e-12):
        super().__init__()
        self.condition = _linear(hidden_size, hidden_size, init_range)
        self.film = FiLM(hidden_size, hidden_size, init_range)
        self.down = _linear(hidden_size, bottleneck_size, init_range)
        self.up = _linear(bottleneck_size, hidden_size, init_range)
        self.norm = ConditionalLayerNorm(hidden_size, init_range, own_affine=True, eps=eps)

    def forward(self, hidden_states: torch.Tensor, residual: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        modulated = film(hidden_states, *self.film(self.condition(z)))
        return self.norm(self.up(self.down(modulated)) + residual, z)


class ConditionalLayer(nn.Module):
    """The conditional modules of one transformer layer (all shared by every task)."""

    def __init__(
        self,
        hidden_size: int,
        max_seq_length: int,
        block_size: int,
        *,
        conditional_norms: bool,
        bottleneck_size: int | None,
        init_range: float = 0.02,
        eps: float = 1e-12,
    ):
        super().__init__()
        self.attention = ConditionalAttentionBias(hidden_size, max_seq_length, block_size, init_range)
        # modulations of the layer's two LayerNorms (after attention, after the feed-forward block)
        self.attention_norm = ConditionalLayerNorm(hidden_size, init_range) if conditional_norms else None
        self.output_norm = ConditionalLayerNorm(hidden_size, init_range) if conditional_norms else None
        self.bottleneck = (
            ConditionalBottleneck(hidden_size, bottleneck_size, init_range, eps) if bottleneck_size else None
        )


class CAMTLModules(nn.Module):
    """Every weight CA-MTL_BASE shares across tasks, for one model: the task transformation (the encoder
    layers read ``z' = W_t z + b_t``; the alignment reads ``z``), the alignment and one `ConditionalLayer`
    per transformer layer (conditional LayerNorms from ``first_conditional_norm_layer`` on, the
    bottleneck in the top layer).

    ``waiting`` names the tasks (with the folder each came from) whose trained embedding was loaded onto
    modules that this load created, as initialised: those tasks need the modules they were trained with.
    Loading the modules' weights (or training them) ends the wait."""

    def __init__(
        self,
        hidden_size: int,
        num_layers: int,
        max_seq_length: int,
        block_size: int,
        first_conditional_norm_layer: int,
        bottleneck_size: int,
        init_range: float = 0.02,
        eps: float = 1e-12,
    ):
        super().__init__()
        self.task_transform = _linear(hidden_size, hidden_size, init_range)
        self.alignment = ConditionalAlignment(hidden_size, init_range)
        self.layers = nn.ModuleList(
            ConditionalLayer(
                hidden_size,
                max_seq_length,
                block_size,
                conditional_norms=i >= first_conditional_norm_layer,
                bottleneck_size=bottleneck_size if i == num_layers - 1 else None,
                init_range=init_range,
                eps=eps,
            )
            for i in range(num_layers)
        )
        self.waiting: dict[str, str] = {}  # task -> the folder its embedding came from

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # a state dict holding these modules' weights (model.load_state_dict, a whole-model checkpoint)
        if any(key.startswith(prefix) for key in state_dict):
            self.waiting.clear()
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
