"""Per-task exports of any complete checkpoint of a run (e.g. of a run that was interrupted)."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import safetensors.torch
from transformers import AutoTokenizer

from ..errors import ConfigError
from .checkpoints import RUN_CONFIG, RUN_TASKS, checkpoint_problem, last_complete_checkpoint
from .export import export_run
from .methods import get_method
from .model import build_model, resolve_model
from .run_config import RunConfig, resolve_tasks
from .runner import evaluation_record
from .tasks import spec_from_json


def _recorded_run(run_dir: Path) -> tuple[RunConfig, dict]:
    """The run's settings and its tasks as they were resolved when it started (labels in their order then,
    whatever the task file says now)."""
    config_path = run_dir / RUN_CONFIG
    if not config_path.is_file():
        raise ConfigError(f"{config_path}: missing; point to the output_dir of a `pals-bench train` run")
    try:
        data = json.loads(config_path.read_text(encoding="utf-8"))
        known = {f.name for f in fields(RunConfig)}
        config = RunConfig(**{k: v for k, v in data.items() if k in known})
    except (OSError, ValueError, TypeError) as err:
        raise ConfigError(f"{config_path}: not a record of run settings ({err})") from err
    tasks_path = run_dir / RUN_TASKS
    if tasks_path.is_file():  # runs since the record held the tasks
        try:
            specs = {name: spec_from_json(spec) for name, spec in json.loads(tasks_path.read_text()).items()}
        except (OSError, ValueError) as err:
            raise ConfigError(f"{tasks_path}: not a record of the run's tasks ({err})") from err
    else:
        specs = resolve_tasks(config)
    return config, specs


def export_checkpoint(run_dir: str, checkpoint: str | None = None, out: str | None = None) -> dict[str, str]:
    """Per-task exports of a run's checkpoint (default: its newest one that loads), e.g. of a run that was
    interrupted, or to re-export the best checkpoint. Returns {task or "base": folder}."""
    config, specs = _recorded_run(Path(run_dir))
    checkpoint = checkpoint or last_complete_checkpoint(run_dir)
    weights = Path(checkpoint) / "model.safetensors"
    if not weights.is_file():
        raise ConfigError(f"{weights}: missing; give a checkpoint-N folder of the run")
    problem = checkpoint_problem(checkpoint)
    if problem and "model.safetensors" in problem:
        raise ConfigError(f"{checkpoint}: {problem}; give another checkpoint")
    model = build_model(config.model, specs, get_method(config.method), config.base)
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
        evaluation=evaluation_record(config),
    )
    return {name: str(path) for name, path in exported.items()}
