"""The precision a run trains in: ``auto`` resolved for the hardware at hand, and a warning for bfloat16 on a
CPU that can only emulate it.

bfloat16 autocast pays on a CPU only where the CPU multiplies bfloat16 itself (AVX512-BF16 or AMX). Elsewhere,
e.g. on a CPU with AVX2 only, oneDNN has no bfloat16 kernels and torch falls back to generic code that is many
times slower than float32: 15-16x on the main job's steps on an AMD EPYC with AVX2 only, against 1.4x faster
on one with AVX512-BF16 (`python -m benchmarks run speed precision`, its results in benchmarks/results/speed/).
``auto`` therefore takes bf16 where the hardware computes it natively (such a CPU, a GPU from Ampere on) and fp32
elsewhere.
"""

from __future__ import annotations

import logging

import torch

logger = logging.getLogger(__name__)

PRECISIONS = ("fp32", "fp16", "bf16", "auto")


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bfloat16 matmuls in hardware (AVX512-BF16 or AMX tiles). torch exposes
    this only through private helpers, so a torch without them counts as no."""
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


def cpu_description() -> str:
    """The CPU's vector capability as torch names it (e.g. ``AVX2``, ``AVX512``), for messages."""
    return torch.backends.cpu.get_cpu_capability()


def resolve_precision(requested: str) -> str:
    """``requested`` with ``auto`` replaced by what this process's hardware runs fast: bf16 on a GPU that
    supports it or a CPU with native bfloat16, fp32 otherwise. A bf16 asked for on a CPU without native
    bfloat16 is kept (it is the user's choice) and warned about before any step is spent on it."""
    gpu = torch.cuda.is_available()
    if requested == "auto":
        # a GPU before Ampere "supports" bf16 by emulation only: not what auto is for
        native = torch.cuda.is_bf16_supported(including_emulation=False) if gpu else cpu_has_native_bf16()
        chosen = "bf16" if native else "fp32"
        where = torch.cuda.get_device_name() if gpu else f"this CPU ({cpu_description()})"
        logger.info(
            "precision auto: %s for %s (%s)",
            chosen,
            where,
            "native bfloat16" if native else "no native bfloat16, so bf16 autocast would be slower than fp32",
        )
        return chosen
    if requested == "bf16" and not gpu and not cpu_has_native_bf16():
        logger.warning(
            "precision bf16 on a CPU without native bfloat16 (no AVX512-BF16 or AMX; torch reports %s): autocast "
            "runs bfloat16 in generic code, many times slower than fp32. Use --precision fp32 (or auto), or time "
            "both with `python -m benchmarks run speed precision` (from a checkout of the repository)",
            cpu_description(),
        )
    return requested
