"""File-level safety of an export folder: sha256 of every file, refusing pickle files and files that
name another task. (Swapping a whole export in at once is `staging`'s job.)"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

from ...errors import ConfigError, IntegrityError
from ..methods.weights import weights_task
from ..tasks.spec import check_task_name  # noqa: F401  (the export's rule for folder names)
from .manifest import MANIFEST, TaskManifest

BASE_DIR = "base"
ADAPTER_CONFIG = "adapter_config.json"  # same name in `adapters` and PEFT
CARD = "README.md"  # a task's model card: documentation, not hashed (editing it never stops a load)
# Extensions whose loading unpickles (arbitrary code execution on a malicious file).
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def hash_files(folder: Path) -> dict[str, str]:
    files = {}
    for path in sorted(folder.iterdir()):
        if path.name in (MANIFEST, CARD):
            continue
        if not path.is_file():
            raise ConfigError(f"unexpected non-file {path} in an export folder")
        files[path.name] = _sha256_file(path)
    return files


def refuse_links(folder: Path) -> None:
    """An export holds its own files: a symbolic link in it (which can point anywhere, outside the folder
    or at another export's files) is refused, never followed."""
    linked = sorted(p.name for p in folder.iterdir() if p.is_symlink())
    if linked:  # a link can point anywhere (outside the folder, at another export's files): never followed
        target = os.readlink(folder / linked[0])
        raise IntegrityError(
            f"{folder / linked[0]} is a symbolic link (to {target}); an export holds its own files, never links: "
            "copy the file in its place (cp -L) if you trust where it points"
        )


def refuse_pickle(folder: Path, files: Mapping[str, str], allow_pickle: bool) -> None:
    refuse_links(folder)  # first of the checks: nothing is read through a link
    if allow_pickle:
        return
    present = {p.name for p in folder.iterdir() if p.is_file()}
    pickled = sorted(n for n in present | set(files) if n.lower().endswith(PICKLE_SUFFIXES))
    if pickled:
        raise IntegrityError(
            f"{folder / pickled[0]}: pickle weight file refused (loading it can run arbitrary code); "
            "re-export with safetensors, or pass allow_pickle=True if you trust its source"
        )


def verify_files(folder: Path, files: Mapping[str, str]) -> None:
    refuse_links(folder)
    for name, expected in sorted(files.items()):
        path = folder / name
        if not path.is_file():
            raise IntegrityError(f"{path} is listed in {MANIFEST} but missing")
        actual = _sha256_file(path)
        if actual != expected:
            raise IntegrityError(
                f"{path} is corrupted or truncated ({path.stat().st_size} bytes): its sha256 is {actual}, "
                f"{MANIFEST} expects {expected}"
            )


def check_identity(folder: Path, manifest: TaskManifest) -> None:
    """Every file that names its task must name the manifest's task (catches files copied between tasks)."""
    task = manifest.task
    for name in manifest.files:
        path = folder / name
        if not path.is_file():
            continue
        found = None
        if name == ADAPTER_CONFIG:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                found = json.loads(path.read_text(encoding="utf-8")).get("name")
        elif name.endswith(".safetensors"):
            found = weights_task(path)
        if found is not None and found != task:
            raise IntegrityError(
                f"{path} belongs to task {found!r}, but {folder / MANIFEST} is for task {task!r}: "
                "the folder mixes files of two tasks; re-export it"
            )
