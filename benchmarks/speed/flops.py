"""What speed.step counts: the analytic matmul FLOPs a method adds to the forward, the FLOPs a job does as
torch's counter sees them, and the data-sheet bf16 peaks that turn a FLOP rate into MFU."""

import adapters
import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from pals_adapters.harness.methods.peft_lora import DEFAULTS as PEFT_LORA_DEFAULTS
from pals_adapters.harness.methods.registry import get_method

from .jobs import PAL_METHODS

# --- analytic matmul FLOPs per token (forward) ----------------------------------------------------
# Base layer: Q/K/V, attention scores and context, output projection, feed-forward.
# A PAL: V_E, small Q/K/V, small scores and context, V_D. Softmax, LayerNorm, GELU, biases ignored.


def base_layer_flops(config, T):
    d = config.hidden_size
    return 2 * d * 3 * d + 2 * 2 * T * d + 2 * d * d + 2 * 2 * d * config.intermediate_size


def extra_flops(method, config, T):
    """Extra forward matmul FLOPs per token of ``method`` over the whole encoder."""
    d, L = config.hidden_size, config.num_hidden_layers
    name = method.partition("[")[0]  # a method with settings, e.g. "pals[hidden_size_aug=64]"
    if name in PAL_METHODS:
        pal = adapters.AdapterConfig.load(get_method(method).adapters_config())
        ds = pal.projected_size(d)
        per_layer = 2 * 2 * d * ds
        if pal.inner == "attention":
            per_layer += 2 * ds * 3 * ds + 2 * 2 * T * ds
        return len(pal.layer_indices(L)) * per_layer
    if name == "houlsby":
        bottleneck = d // adapters.AdapterConfig.load(get_method(method).adapters_config()).reduction_factor
        return L * 2 * (2 * 2 * d * bottleneck)  # two bottlenecks per layer, down and up each
    if name == "lora":
        lora = adapters.AdapterConfig.load(get_method(method).adapters_config())
        return L * len(lora.attn_matrices) * 2 * 2 * d * lora.r  # A then B, unmerged
    if name == "peft_lora":
        return L * len(PEFT_LORA_DEFAULTS["target_modules"]) * 2 * 2 * d * PEFT_LORA_DEFAULTS["r"]
    return 0


def flops_ratio(method, config, T):
    return 1 + extra_flops(method, config, T) / (config.num_hidden_layers * base_layer_flops(config, T))


def _cpu_sdpa_flops():
    """torch's FLOP counter knows SDPA's CUDA kernels, not the CPU's fused one: the same formulas for it."""
    aten = torch.ops.aten
    return {
        aten._scaled_dot_product_flash_attention_for_cpu: lambda q, k, v, *_, **__: sdpa_flop_count(q, k, v),
        aten._scaled_dot_product_flash_attention_for_cpu_backward: (
            lambda grad, q, k, v, *_, **__: sdpa_backward_flop_count(grad, q, k, v)
        ),
    }


def count_flops(job):
    """The matmul and attention FLOPs one call of ``job`` does, as torch.utils.flop_counter counts them
    (forward, backward and what autograd skips for frozen weights; not softmax, norms or the optimiser)."""
    counter = FlopCounterMode(display=False, custom_mapping=_cpu_sdpa_flops())
    with counter:
        job()
    return counter.get_total_flops()


# Dense bf16 tensor-core peaks from the vendors' data sheets (TFLOP/s), matched on the device's name.
BF16_PEAK_TFLOPS = (
    ("H200", 989.4),
    ("H100 PCIe", 756.5),
    ("H100", 989.4),  # SXM / HBM3
    ("A100", 312.0),
    ("L40S", 362.1),
    ("L4", 121.0),
    ("A10G", 70.0),
)


def bf16_peak_tflops(device_name):
    """The data-sheet bf16 peak of a GPU by its name, or None when this table does not know it."""
    for key, peak in BF16_PEAK_TFLOPS:
        if key in (device_name or ""):
            return peak
    return None
