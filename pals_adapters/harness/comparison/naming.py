"""Run folders named by a digest of the settings that make a run's numbers: the same settings find the
same folder (read, or resumed), other settings a new one, so nothing is ever overwritten."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re

from ..methods.method import current_name
from ..run_config import RunConfig
from ..training.run_folder import MAY_CHANGE_ON_RESUME, NOT_COMPARED

# Where a run is, what it logs or writes at the end, how fast it runs (what a resumed run may change), how
# often it checkpoints: none of them changes a score, so none of them retrains a finished run.
NOT_IN_DIGEST = (*NOT_COMPARED, *MAY_CHANGE_ON_RESUME, "save_steps", "save_total_limit")


def digest_settings(config: RunConfig) -> dict:
    """The settings the digest covers. ``glue_dir`` counts only as set or not: the same GLUE files in
    another folder (another machine) are the same data; a renamed method counts by its current name."""
    settings = json.loads(json.dumps(dataclasses.asdict(config), default=str))
    for name in NOT_IN_DIGEST:
        settings.pop(name, None)
    settings["glue_dir"] = settings["glue_dir"] is not None
    settings["method"] = current_name(settings["method"])
    return settings


def settings_digest(config: RunConfig) -> str:
    """12 hexadecimal digits of the sha256 of `digest_settings`."""
    text = json.dumps(digest_settings(config), sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def run_folder_name(config: RunConfig, separate: bool, digest: str) -> str:
    """``pals-finetune-s1-<digest>``; a separate model's run also names its task. The readable part is for
    people; the digest alone decides which folder is which run."""
    parts = [config.method, config.base]
    if separate:
        parts.append(config.tasks[0])
    parts.append(f"s{config.seed}")
    slug = "-".join(re.sub(r"[^A-Za-z0-9_.=]+", "_", str(p)).strip("_") for p in parts)
    return f"{slug}-{digest}"
