"""The targets the speed suite checks, on a CPU or a GPU, for the eager rows and the compiled ones."""

from .flops import flops_ratio
from .jobs import COMPILED
from .measure import paired_ratio

# (what, PALs job, base job, target, strict): "{w}" reads "compiled " for the compiled rows.
CPU_TARGETS = (
    ("{w}PALs forward / {w}base forward", "forward", "forward", 1.09, False),
    ("{w}PALs full fine-tuning step / {w}base full fine-tuning step", "train_full", "train_full", 1.12, False),
    (
        "{w}PALs training step with the base frozen / {w}full fine-tuning step (base, all weights)",
        "train_frozen",
        "train_full",
        0.72,
        False,
    ),
)
# On a GPU small kernels are launch-bound: looser, and a frozen-base step must cost less than a full one.
GPU_TARGETS = (
    ("{w}PALs forward / {w}base forward", "forward", "forward", 1.15, False),
    (
        "{w}PALs training step with the base frozen / {w}full fine-tuning step (base)",
        "train_frozen",
        "train_full",
        1.0,
        True,
    ),
)


def target_checks(times, work):
    """The targets of the device measured on, when PALs were measured."""
    targets = GPU_TARGETS if work.device.type == "cuda" else CPU_TARGETS
    checks = []
    for suffix in ("", COMPILED):
        pals, base = "pals" + suffix, "base" + suffix
        if (pals, "forward") not in times:
            continue
        which = "compiled " if suffix else ""
        for what, mode, reference, target, strict in targets:
            value = paired_ratio(times, (pals, mode), (base, reference))["median"]
            check = {
                "what": what.format(w=which),
                "value": value,
                "target": f"{'<' if strict else '<='} {target}",
                "passed": value < target if strict else value <= target,
            }
            if mode == "forward":
                check["flops_estimate"] = flops_ratio("pals", work.config, work.length)
            checks.append(check)
    return checks
