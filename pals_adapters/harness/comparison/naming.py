"""Run folders named by a digest of a run's identity: the settings that change its numbers and its inputs
(tasks, data, base model; see `identity`). The same identity finds the same folder (read, or resumed)
whatever its readable part says, another identity a new folder, so nothing is ever overwritten; and a run
of the same settings on other inputs is found again to say what changed."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..methods.method import current_name
from ..run_config import RunConfig
from ..tasks.spec import TaskSpec
from ..training.run_folder import MAY_CHANGE_ON_RESUME, NOT_COMPARED
from .identity import data_file_names, input_differences, run_inputs

logger = logging.getLogger(__name__)

# Where a run is, what it logs or writes at the end, how fast it runs (what a resumed run may change), how
# often it checkpoints: none of them changes a score, so none of them retrains a finished run.
NOT_IN_DIGEST = (*NOT_COMPARED, *MAY_CHANGE_ON_RESUME, "save_steps", "save_total_limit")
# Where the tasks, their data and the model are: the inputs count by their content instead.
INPUT_SETTINGS = ("model", "tasks", "task_file", "glue_dir", "data_source")
IDENTITY_FILE = "run_identity.json"  # in a run folder: the identity it was trained for


def digest_settings(config: RunConfig) -> dict:
    """The settings the digest covers: none that only says where an input is (the same files in another
    folder, on another machine, are the same run); a renamed method counts by its current name."""
    settings = json.loads(json.dumps(dataclasses.asdict(config), default=str))
    for name in (*NOT_IN_DIGEST, *INPUT_SETTINGS):
        settings.pop(name, None)
    settings["method"] = current_name(settings["method"])
    return settings


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode("utf-8")).hexdigest()[:12]


def settings_digest(config: RunConfig) -> str:
    """12 hexadecimal digits of the sha256 of `digest_settings`."""
    return _digest(digest_settings(config))


@dataclass
class RunIdentity:
    """A run's settings (`digest_settings`, and the task of a separate model's run) and inputs (`run_inputs`);
    ``file_names`` only name the changed files in messages."""

    settings: dict
    inputs: dict
    file_names: dict = field(default_factory=dict)

    @property
    def settings_digest(self) -> str:
        return _digest(self.settings)

    @property
    def digest(self) -> str:
        return _digest({"settings": self.settings, "inputs": self.inputs})

    def record(self) -> dict:
        return {"digest": self.digest, "settings_digest": self.settings_digest, **dataclasses.asdict(self)}


def run_identity(config: RunConfig, specs: dict[str, TaskSpec], separate: bool) -> RunIdentity:
    settings = digest_settings(config)
    if separate:  # which task's model: runs of one row differ by it alone
        settings["separate_task"] = list(specs)[0]
    names = {name: data_file_names(spec, config) for name, spec in specs.items()}
    return RunIdentity(settings, run_inputs(config, specs), names)


def run_folder_name(config: RunConfig, separate: bool, digest: str) -> str:
    """``pals-finetune-s1-<digest>``; a separate model's run also names its task. The readable part is for
    people; the digest alone decides which folder is which run."""
    parts = [current_name(config.method), config.base]
    if separate:
        parts.append(config.tasks[0])
    parts.append(f"s{config.seed}")
    slug = "-".join(re.sub(r"[^A-Za-z0-9_.=]+", "_", str(p)).strip("_") for p in parts)
    return f"{slug}-{digest}"


@dataclass
class RunPlace:
    """Where a run of the grid is (``folder``), and the run of the same settings on other inputs that it
    replaces (``previous``, with what ``changed``), if there is one."""

    folder: Path
    identity: RunIdentity
    previous: Path | None = None
    changed: list[str] = field(default_factory=list)


def locate_run(runs_dir: Path, config: RunConfig, specs: dict[str, TaskSpec], separate: bool) -> RunPlace:
    """The folder of the run of ``config`` on ``specs``: the one whose name ends in its identity's digest,
    else one that recorded the same identity, else a new one; and a run of the same settings on other
    inputs that it replaces. Reads only."""
    identity = run_identity(config, specs, separate)
    named = sorted(p for p in runs_dir.glob(f"*-{identity.digest}") if p.is_dir()) if runs_dir.is_dir() else []
    if named:
        return RunPlace(named[0], identity)
    others = []
    for folder, record in _recorded_runs(runs_dir):
        if record.get("settings_digest") != identity.settings_digest:
            continue
        changed = input_differences(record.get("inputs", {}), identity.inputs, identity.file_names)
        if not changed:  # the same inputs (a Hub model's revision known now, unknown then)
            return RunPlace(folder, identity)
        others.append((folder, changed))
    place = RunPlace(runs_dir / run_folder_name(config, separate, identity.digest), identity)
    if others:  # the finished one first, else the latest
        place.previous, place.changed = max(others, key=lambda o: (_finished(o[0]), o[0].stat().st_mtime))
    return place


def _finished(folder: Path) -> bool:
    return (folder / "results.json").is_file()


def _recorded_runs(runs_dir: Path) -> list[tuple[Path, dict]]:
    found = []
    for path in sorted(runs_dir.glob(f"*/{IDENTITY_FILE}")) if runs_dir.is_dir() else []:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # a record cut short: that folder is no candidate
        if isinstance(record, dict):
            found.append((path.parent, record))
    return found


def write_identity(place: RunPlace) -> None:
    """``run_identity.json`` in the run's folder (temporary name, then renamed: never half a record)."""
    place.folder.mkdir(parents=True, exist_ok=True)
    temporary = place.folder / f".{IDENTITY_FILE}.tmp"
    temporary.write_text(json.dumps(place.identity.record(), indent=2), encoding="utf-8")
    temporary.replace(place.folder / IDENTITY_FILE)
