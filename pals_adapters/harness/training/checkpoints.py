"""The checkpoints of a run folder: which of them really load, newest first, and the record of the
settings that made them."""

from __future__ import annotations

import json
import logging
import re
import zipfile
from pathlib import Path

from safetensors import safe_open

from ...errors import ConfigError

logger = logging.getLogger(__name__)

# What a checkpoint needs to resume; the Trainer writes trainer_state.json last.
CHECKPOINT_FILES = ("model.safetensors", "optimizer.pt", "scheduler.pt", "trainer_state.json")
# The run's settings and its tasks as resolved, written before the first step: what the checkpoints are.
RUN_CONFIG = "run_config.json"
RUN_TASKS = "run_tasks.json"


def list_checkpoints(output_dir: str | Path) -> list[Path]:
    """The ``checkpoint-N`` folders of ``output_dir``, newest (highest N) first."""
    root = Path(output_dir)
    found = []
    if root.is_dir():
        for path in root.iterdir():
            match = re.fullmatch(r"checkpoint-(\d+)", path.name)
            if match and path.is_dir():
                found.append((int(match.group(1)), path))
    return [path for _, path in sorted(found, reverse=True)]


def _file_problem(path: Path) -> str | None:
    """Why the Trainer could not read ``path`` back (truncated, corrupted), or None. Reads no pickle."""
    try:
        if path.suffix == ".json":
            state = json.loads(path.read_text(encoding="utf-8"))
            if path.name == "trainer_state.json" and not isinstance(state.get("global_step"), int):
                return f"{path.name} has no global_step"
        elif path.suffix == ".safetensors":
            with safe_open(str(path), "pt"):  # checks that the header covers the whole file
                pass
        elif path.suffix in (".pt", ".pth"):
            with zipfile.ZipFile(path) as archive:  # torch.save writes a zip with CRCs
                bad = archive.testzip()
            if bad is not None:
                return f"{path.name} is corrupted (entry {bad})"
    except Exception as err:  # noqa: BLE001 (every reason means: this file does not load)
        return f"{path.name} does not load ({type(err).__name__}: {err})"
    return None


# A sharded (FSDP) checkpoint: torch.distributed.checkpoint folders, whose .metadata is written last.
SHARDED_MODEL = "pytorch_model_fsdp_0"
SHARDED_CHECKPOINT_FILES = (f"{SHARDED_MODEL}/.metadata", "optimizer_0/.metadata", "scheduler.pt", "trainer_state.json")


def is_sharded(path: str | Path) -> bool:
    """Whether ``path`` is a checkpoint of a sharded (FSDP) run."""
    return (Path(path) / SHARDED_MODEL).is_dir()


# A DeepSpeed checkpoint: the engine's own files in the step folder that ``latest`` names, one optimizer
# partition per rank, and the Trainer's model.safetensors (full weights, gathered under ZeRO-3) beside them.
DEEPSPEED_LATEST = "latest"
DEEPSPEED_CHECKPOINT_FILES = (DEEPSPEED_LATEST, "model.safetensors", "scheduler.pt", "trainer_state.json")


def is_deepspeed(path: str | Path) -> bool:
    """Whether ``path`` is a checkpoint of a DeepSpeed run."""
    return (Path(path) / DEEPSPEED_LATEST).is_file()


def _deepspeed_problem(path: Path) -> str | None:
    """What the DeepSpeed engine's part of checkpoint ``path`` lacks (its step folder, or a rank's
    optimizer partition: a save cut short), or None."""
    step = (path / DEEPSPEED_LATEST).read_text(encoding="utf-8").strip()
    if not step or not (path / step).is_dir():
        return f"{DEEPSPEED_LATEST} names {step!r}, which is not a folder of the checkpoint"
    partitions = len(list((path / step).glob("*optim_states.pt")))
    if partitions != saved_rank_count(path):
        return f"{step} holds {partitions} optimizer partitions for {saved_rank_count(path)} ranks"
    return None


def saved_rank_count(path: str | Path) -> int:
    """How many ranks wrote the checkpoint: the Trainer saves one RNG state per rank (rng_state_R.pth),
    a single process one rng_state.pth."""
    return max(1, len(list(Path(path).glob("rng_state_*.pth"))))


def check_rank_count(path: str | Path, world_size: int) -> None:
    """A sharded checkpoint resumes only on as many ranks as wrote it: each rank reads back its own data
    position and RNG state, and its share of the task batches depends on the rank count."""
    if (is_sharded(path) or is_deepspeed(path)) and saved_rank_count(path) != world_size:
        raise ConfigError(
            f"resume: {path} is a sharded (FSDP or DeepSpeed) checkpoint written by {saved_rank_count(path)} ranks, "
            f"and this launch has {world_size}; its per-rank RNG states and batch shares do not reshard. Launch "
            f"{saved_rank_count(path)} ranks (e.g. torchrun --nproc-per-node {saved_rank_count(path)}), "
            "or start a new run"
        )


def checkpoint_problem(path: str | Path) -> str | None:
    """Why the checkpoint folder cannot be resumed from (a file missing, truncated or corrupted), or None."""
    path = Path(path)
    needed = CHECKPOINT_FILES
    if is_sharded(path) or is_deepspeed(path):
        needed = SHARDED_CHECKPOINT_FILES if is_sharded(path) else DEEPSPEED_CHECKPOINT_FILES
    missing = [name for name in needed if not (path / name).is_file()]
    if missing:
        return f"{', '.join(missing)} missing"
    if is_deepspeed(path) and _deepspeed_problem(path):
        return _deepspeed_problem(path)
    for file in sorted(path.iterdir()):
        problem = _file_problem(file) if file.is_file() else None
        if problem:
            return problem
    return None


def last_complete_checkpoint(output_dir: str | Path) -> str:
    """The newest ``checkpoint-N`` folder of ``output_dir`` whose files all load. Newer ones that do not
    (a crash while saving, a damaged file) are skipped, and a warning says which and why."""
    root = Path(output_dir)
    found = list_checkpoints(root)
    skipped = []
    for path in found:
        problem = checkpoint_problem(path)
        if problem is None:
            if skipped:
                logger.warning("resume: skipped %s; resuming from %s instead", "; ".join(skipped), path.name)
            return str(path)
        skipped.append(f"{path.name} ({problem})")
    detail = f" (skipped: {'; '.join(skipped)})" if skipped else ""
    raise ConfigError(
        f"resume='last': no complete checkpoint-N folder in {root}{detail}; a complete one holds "
        f"{', '.join(CHECKPOINT_FILES)}. Set save_steps to write checkpoints, or drop resume to start afresh"
    )


def names_by_tensor(model) -> list[list[str]]:
    """The model's state-dict names, grouped by tensor: a tied tensor (one object under several names, as
    adapters' prompt-tuning alias of the word embeddings) is one group, its names in state-dict order."""
    groups: dict[int, list[str]] = {}
    for name, value in model.state_dict(keep_vars=True).items():
        groups.setdefault(id(value), []).append(name)
    return list(groups.values())


def loaded_under_another_name(model, missing_keys: list[str]) -> set[str]:
    """The ``missing_keys`` whose tensor the model also holds under a name that is not missing: what a
    weight file that stores each tied tensor once (safetensors' ``save_model``) leaves out without loss."""
    missing = set(missing_keys)
    return {name for names in names_by_tensor(model) if not missing.issuperset(names) for name in missing & set(names)}
