"""A run's identity and its folder. The identity is everything that changes the run's scores: its settings
(those that change a number) and its inputs: each task's definition, the content of every data file or
dataset split it reads, and its base model. Two runs of the same identity give the same scores wherever
the files are. A run's folder is named by the digest of its identity: the same identity finds the same
folder (read, or resumed) whatever its readable part says, another identity a new folder, so nothing is
ever overwritten; and a run of the same settings on other inputs is found again to say what changed.

The data fingerprints are the ones an export records (the sha256 of a task's files, each dataset split's
digest and resolved revision); a local model folder counts by the sha256 of its files, a Hub model by the
commit the local cache resolves its name to (by its name where there is none)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..methods.method import current_name
from ..run_config import RunConfig
from ..tasks.dataset_source import local_folder
from ..tasks.spec import TaskSpec, spec_to_json
from ..tasks.splits import resolve_glue_dir
from ..tasks.user_tasks import split_files
from ..training.run_folder import MAY_CHANGE_ON_RESUME, NOT_COMPARED

# --------------------------------------------------------------------------- the inputs

TRAIN = "train"
_FILE_DIGESTS: dict[tuple, str] = {}  # (file, size, mtime): its sha256, so that a grid hashes each file once
_DATASET_DIGESTS: dict[tuple, dict] = {}


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes (as an export records a task's files), read again when it changed."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _FILE_DIGESTS:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        _FILE_DIGESTS[key] = digest.hexdigest()
    return _FILE_DIGESTS[key]


def read_splits(spec: TaskSpec, config: RunConfig | None = None) -> list[str]:
    """The splits a run reads: the training split and the dev splits it is scored on (not the test split); a
    run scored on its selection part reads the training split alone."""
    scored = () if config is not None and config.selection is not None else spec.dev_splits
    return [split for split in (TRAIN, *scored) if split in spec.splits]


def task_definition(spec: TaskSpec) -> dict:
    """The task as it changes the scores (labels, columns, metrics, split expressions ...), without where its
    files are: their content counts in `task_data`."""
    definition = spec_to_json(spec)
    definition.pop("data_dir", None)
    if spec.data_dir is not None and spec.dataset is None:  # a task of files: which splits, not their paths
        definition["splits"] = sorted(definition["splits"])
    if spec.dataset is not None and spec.dataset.get("local"):  # a local dataset: its rows count, not its folder
        definition["dataset"] = {k: v for k, v in spec.dataset.items() if k not in ("path", "from_disk")}
    return definition


def task_data(spec: TaskSpec, config: RunConfig) -> dict:
    """``{split: fingerprint}`` of the splits the run reads: ``{"sha256"}`` of a file, ``{"rows", "sha256"}``
    of a dataset split (with the dataset's resolved revision), ``{"hub"}`` of a GLUE split read from the Hub."""
    if spec.dataset is not None:
        return {split: data for split, data in _dataset_data(spec).items() if split in read_splits(spec, config)}
    if spec.data_dir is not None:
        files = split_files(spec)
        return {split: {"sha256": file_sha256(Path(files[split]))} for split in read_splits(spec, config)}
    base = resolve_glue_dir(config.glue_dir)
    out = {}
    for split in read_splits(spec, config):
        path = spec.split_path(split, base) if base is not None and config.data_source != "hub" else None
        if path is not None and path.is_file():
            out[split] = {"sha256": file_sha256(path)}
        else:  # what `load_split` reads then: the Hub's copy of GLUE
            out[split] = {"hub": "/".join(spec.hub or ())}
    return out


def data_file_names(spec: TaskSpec, config: RunConfig) -> dict[str, str]:
    """``{split: name}`` of the files of a task, as a person knows them (``train.csv``, ``RTE/dev.tsv``)."""
    if spec.dataset is not None:
        return {}
    if spec.data_dir is not None:
        return {split: Path(file).name for split, file in split_files(spec).items()}
    base = resolve_glue_dir(config.glue_dir) or Path(".")
    return {split: f"{spec.glue_folder}/{spec.split_path(split, base).name}" for split in spec.splits}


def _dataset_data(spec: TaskSpec) -> dict:
    from ..tasks.dataset_rows import dataset_record  # datasets: imported where a dataset task is planned

    folder = local_folder(spec)
    files = sorted(p for p in folder.rglob("*") if p.is_file()) if folder is not None and folder.is_dir() else []
    key = (json.dumps(spec_to_json(spec), sort_keys=True), tuple((str(p), p.stat().st_mtime_ns) for p in files))
    if key not in _DATASET_DIGESTS:
        record = dataset_record(spec, ".")
        revision = None if folder is not None else record["resolved_revision"]
        _DATASET_DIGESTS[key] = {
            split: {"rows": entry["rows"], "sha256": entry["sha256"], "revision": revision}
            for split, entry in record["splits"].items()
            if split in read_splits(spec)
        }
    return _DATASET_DIGESTS[key]


# --------------------------------------------------------------------------- the base model


def model_identity(model: str | None) -> dict:
    """``{"sha256"}`` of a local model folder (its config, weights and tokenizer files), or ``{"hub",
    "revision"}`` of a Hub id (the commit of the local cache, None where it has none)."""
    from ..methods.model import resolve_model  # the bundled model's name -> its folder

    where = resolve_model(model) if model else model
    if where and Path(where).is_dir():
        return {"sha256": _folder_sha256(Path(where))}
    return {"hub": model, "revision": _cached_revision(model)}


def _folder_sha256(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = path.relative_to(folder).as_posix()
        if any(part.startswith(".") for part in Path(relative).parts) or path.suffix == ".md":
            continue  # caches and notes: not what the model computes
        digest.update(f"{relative}\0{file_sha256(path)}\n".encode())
    return digest.hexdigest()


def _cached_revision(model: str | None) -> str | None:
    """The commit the Hub cache holds for ``model`` (its snapshot folder's name), or None."""
    if not model:
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(model, "config.json")
    except Exception:  # noqa: BLE001 (a name the Hub would refuse: the name alone identifies it)
        return None
    return Path(found).parent.name if isinstance(found, (str, os.PathLike)) else None


def run_inputs(config: RunConfig, specs: dict[str, TaskSpec]) -> dict:
    """Everything besides the settings that changes a run's scores: its tasks' definitions, their data and
    the base model."""
    return {
        "tasks": {name: task_definition(spec) for name, spec in specs.items()},
        "data": {name: task_data(spec, config) for name, spec in specs.items()},
        "model": model_identity(config.model),
    }


def input_differences(recorded: dict, now: dict, file_names: dict[str, dict[str, str]]) -> list[str]:
    """What changed between the inputs a run recorded and the inputs now, in words (``train.csv changed``,
    ``task 'senti2' added``); [] when they are the same. A Hub model's revision counts only where both
    are known (the cache may have been filled by the run itself)."""
    changes = []
    old_tasks, new_tasks = recorded.get("tasks", {}), now["tasks"]
    changes += [f"task {name!r} added" for name in new_tasks if name not in old_tasks]
    changes += [f"task {name!r} removed" for name in old_tasks if name not in new_tasks]
    if list(old_tasks) != list(new_tasks) and set(old_tasks) == set(new_tasks):
        changes.append("the order of the tasks changed")
    for name in (n for n in new_tasks if n in old_tasks):
        before, after = old_tasks[name], new_tasks[name]
        keys = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        changes += [f"task {name!r} {key} changed" for key in keys]
        old_data, new_data = recorded.get("data", {}).get(name, {}), now["data"][name]
        for split in sorted(set(old_data) | set(new_data)):
            if old_data.get(split) != new_data.get(split):
                changes.append(f"{file_names.get(name, {}).get(split) or f'task {name!r} split {split!r}'} changed")
    old_model, new_model = dict(recorded.get("model", {})), dict(now["model"])
    if old_model.get("revision") is None or new_model.get("revision") is None:
        old_model.pop("revision", None)
        new_model.pop("revision", None)
    if old_model != new_model:
        changes.append("the model changed")
    return changes


# --------------------------------------------------------------------------- the settings and the folder

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
    if settings.get("selection") is None:  # scored on dev: the digest of a run from before selection existed
        settings.pop("selection", None)
        settings.pop("selection_seed", None)
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
