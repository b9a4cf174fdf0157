"""Finding the checkpoints of a run folder, and the record of the settings that made them."""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import ConfigError

# What a checkpoint needs to resume; the Trainer writes trainer_state.json last.
CHECKPOINT_FILES = ("model.safetensors", "optimizer.pt", "scheduler.pt", "trainer_state.json")
# The run's settings, written before the first step so that an interrupted run can still be exported.
RUN_CONFIG = "run_config.json"


def last_complete_checkpoint(output_dir: str | Path) -> str:
    """The newest ``checkpoint-N`` folder of ``output_dir`` holding every file of `CHECKPOINT_FILES`
    (a crash while saving leaves an incomplete one, which is skipped)."""
    root = Path(output_dir)
    found = []
    if root.is_dir():
        for path in root.iterdir():
            match = re.fullmatch(r"checkpoint-(\d+)", path.name)
            if match and path.is_dir():
                found.append((int(match.group(1)), path))
    for _, path in sorted(found, reverse=True):
        if all((path / name).is_file() for name in CHECKPOINT_FILES):
            return str(path)
    incomplete = f" ({len(found)} incomplete ones skipped)" if found else ""
    raise ConfigError(
        f"resume='last': no complete checkpoint-N folder in {root}{incomplete}; a complete one holds "
        f"{', '.join(CHECKPOINT_FILES)}. Set save_steps to write checkpoints, or drop resume to start afresh"
    )
