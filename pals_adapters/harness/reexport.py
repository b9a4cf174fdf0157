"""Per-task exports of any complete checkpoint of a run (e.g. of a run that was interrupted)."""

from __future__ import annotations

import json
from pathlib import Path

import safetensors.torch
from transformers import AutoTokenizer

from ..errors import ConfigError
from .checkpoints import RUN_CONFIG, last_complete_checkpoint
from .export import export_run
from .methods import get_method
from .model import build_model, resolve_model
from .runner import RunConfig, resolve_tasks


def export_checkpoint(run_dir: str, checkpoint: str | None = None, out: str | None = None) -> dict[str, str]:
    """Per-task exports of a run's checkpoint (default: its newest complete one), e.g. of a run that was
    interrupted, or to re-export the best checkpoint. Returns {task or "base": folder}."""
    config_path = Path(run_dir) / RUN_CONFIG
    if not config_path.is_file():
        raise ConfigError(f"{config_path}: missing; point to the output_dir of a `pals-bench train` run")
    config = RunConfig(**json.loads(config_path.read_text()))
    checkpoint = checkpoint or last_complete_checkpoint(run_dir)
    weights = Path(checkpoint) / "model.safetensors"
    if not weights.is_file():
        raise ConfigError(f"{weights}: missing; give a checkpoint-N folder of the run")
    model = build_model(config.model, resolve_tasks(config), get_method(config.method), config.base)
    missing, unexpected = safetensors.torch.load_model(model, str(weights), strict=False)
    # save_model stores tensors shared with another name once: only those may be absent.
    shared = {n for n in missing if n.startswith("encoder.prompt_tuning.")}
    if set(missing) - shared or unexpected:
        raise ConfigError(
            f"{weights} does not match the run's model: missing {sorted(set(missing) - shared)[:4]}, "
            f"unexpected {sorted(unexpected)[:4]}"
        )
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(config.model))
    exported = export_run(
        model,
        Path(out or Path(run_dir) / "export"),
        base_model_name=config.model,
        tokenizer=tokenizer,
        max_length=config.max_length,
    )
    return {name: str(path) for name, path in exported.items()}
