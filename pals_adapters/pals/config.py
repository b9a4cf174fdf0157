"""`PALsConfig`: Projected Attention Layers as an `adapters` config type, and the paper's presets."""

import re
from dataclasses import dataclass, field

from adapters import AdapterConfig

from ..errors import ConfigError, warn_renamed
from ..presets import PALS_PRESET_SETTINGS, RENAMED_PRESETS
from .modeling import INIT_SCHEMES

# Widths in the paper are given for BERT-base; other widths scale in proportion.
REFERENCE_HIDDEN_SIZE = 768
ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "tanh", "identity")
INNER_FUNCTIONS = ("attention", "identity")
LAYER_SPANS = ("all", "top", "bottom")


@dataclass(eq=False)
class PALsConfig(AdapterConfig):
    """Projected Attention Layers (Stickland & Murray, ICML 2019), added in parallel to every chosen layer.

    For layer input ``h`` a PAL adds ``TS(h) = act(V_D · inner(V_E · h))`` before the layer's output
    LayerNorm: ``out = LN(FFN(a) + a + TS(h))``.

    Args:
        hidden_size_aug: Width ``d_s`` of the projected space. ``None`` scales
            ``reference_hidden_size_aug`` (a BERT-base width) to the model's hidden size.
        reference_hidden_size_aug: ``d_s`` at hidden size 768, used when ``hidden_size_aug`` is None.
        num_attention_heads: Heads of the small attention (the authors' code uses 6).
        shared_projections: Share ``V_E``/``V_D`` across all layers of one adapter ("PALs"),
            or give every layer its own pair ("PALs no sharing", low-rank layers).
        inner: ``"attention"`` (projected multi-head attention, no output matrix) or
            ``"identity"`` (the paper's low-rank layers).
        activation: Applied after ``V_D`` (GELU in the authors' code; ``"identity"`` follows the paper's equation).
        attention_dropout: Dropout on the small attention's probabilities.
        layers: ``"all"``, or ``"top"`` / ``"bottom"`` half of the encoder (the paper's top/bottom six of twelve).
        leave_out: Layer indices (from 0) that get no PAL, as in the other `adapters` configs.
        init_range: Standard deviation of the normal initialisation of all weights with ``init_weights="bert"``
            (biases start at 0).
        init_weights: ``"bert"``: every weight N(0, init_range), as in the authors' code. ``"zero_output"``:
            ``V_D`` starts at zero, so a new PAL changes nothing (as LoRA's B and adapters' ``mam_adapter``
            init), and ``V_E`` and the attention's q/k/v start at N(0, 1/fan_in); ``init_range`` is unused.
        init_weights_seed: If set, the initial weights come from private generators seeded with it, so the
            same seed gives the same weights whatever was created before (as in the built-in configs of
            `adapters`, without reseeding torch's global generator).
    """

    architecture: str | None = "pals"

    hidden_size_aug: int | None = None
    reference_hidden_size_aug: int = 204
    num_attention_heads: int = 6
    shared_projections: bool = True
    inner: str = "attention"
    activation: str = "gelu"
    attention_dropout: float = 0.1
    layers: str = "all"
    leave_out: list[int] = field(default_factory=list)
    init_range: float = 0.02
    init_weights: str = "bert"
    init_weights_seed: int | None = None

    def __post_init__(self):
        def fail(name, problem):
            raise ConfigError(f"PALsConfig.{name}={getattr(self, name)!r}: {problem}")

        if self.architecture != "pals":
            fail("architecture", "must be 'pals'")
        if self.hidden_size_aug is not None and (
            not isinstance(self.hidden_size_aug, int) or self.hidden_size_aug <= 0
        ):
            fail("hidden_size_aug", "must be a positive integer, or None to scale with the model")
        if not isinstance(self.reference_hidden_size_aug, int) or self.reference_hidden_size_aug <= 0:
            fail("reference_hidden_size_aug", "must be a positive integer")
        if self.inner not in INNER_FUNCTIONS:
            fail("inner", f"choose one of {INNER_FUNCTIONS}")
        if self.inner == "attention":
            if not isinstance(self.num_attention_heads, int) or self.num_attention_heads <= 0:
                fail("num_attention_heads", "must be a positive integer")
            if self.hidden_size_aug is not None and self.hidden_size_aug % self.num_attention_heads:
                fail(
                    "hidden_size_aug",
                    f"must be divisible by num_attention_heads={self.num_attention_heads}",
                )
        if self.activation not in ACTIVATIONS:
            fail("activation", f"choose one of {ACTIVATIONS}")
        if not 0.0 <= self.attention_dropout < 1.0:
            fail("attention_dropout", "must be in [0, 1)")
        if self.layers not in LAYER_SPANS:
            fail("layers", f"choose one of {LAYER_SPANS}")
        if not all(isinstance(i, int) and i >= 0 for i in self.leave_out):
            fail("leave_out", "must be a list of layer indices >= 0")
        if not self.init_range > 0:
            fail("init_range", "must be > 0")
        if self.init_weights not in INIT_SCHEMES:
            fail("init_weights", f"choose one of {INIT_SCHEMES}")
        if self.init_weights_seed is not None and (
            isinstance(self.init_weights_seed, bool) or not isinstance(self.init_weights_seed, int)
        ):
            fail("init_weights_seed", "must be an integer or None")

    def projected_size(self, hidden_size: int) -> int:
        """``d_s`` for a model of this hidden size (heads must divide it for the attention inner function)."""
        if self.hidden_size_aug is not None:
            return self.hidden_size_aug
        scaled = self.reference_hidden_size_aug * hidden_size / REFERENCE_HIDDEN_SIZE
        if self.inner == "attention":
            heads = self.num_attention_heads
            return heads * max(1, round(scaled / heads))
        return max(1, round(scaled))

    def layer_indices(self, num_layers: int) -> list[int]:
        """Indices of the layers that get a PAL in a model with ``num_layers`` layers."""
        out_of_range = [i for i in self.leave_out if i >= num_layers]
        if out_of_range:
            raise ConfigError(
                f"PALsConfig.leave_out={self.leave_out}: layers {out_of_range} do not exist; "
                f"the model has layers 0..{num_layers - 1}"
            )
        half = num_layers // 2
        span = {"all": range(num_layers), "bottom": range(half), "top": range(num_layers - half, num_layers)}
        return [i for i in span[self.layers] if i not in self.leave_out]


PALS_PRESETS = {name: PALsConfig(**settings) for name, settings in PALS_PRESET_SETTINGS.items()}

_CONFIG_NAME = re.compile(r"^\s*(\w+)")


def current_config_string(config: str) -> str:
    """An `adapters` config string (``"pals_top"``, ``"pals_top[hidden_size_aug=64]|lora"``) with each old
    preset name replaced by its new one, with a `RenamedWarning` each; any other string unchanged."""
    chunks = config.split("|")  # adapters' own union syntax
    for i, chunk in enumerate(chunks):
        match = _CONFIG_NAME.match(chunk)
        if match and match.group(1) in RENAMED_PRESETS:
            new = RENAMED_PRESETS[match.group(1)]
            warn_renamed("PAL preset", match.group(1), new)
            chunks[i] = chunk[: match.start(1)] + new + chunk[match.end(1) :]
    return "|".join(chunks)
