"""Switching a whole export folder at once.

A new export is written into a hidden folder beside the old one, then swapped in with one atomic
exchange of the two folders (Linux ``renameat2(RENAME_EXCHANGE)``), so a reader or a kill -9 finds
every file old or every file new, never a new base beside old tasks. Exports of one folder take
turns (a file lock), and each removes what an interrupted one left behind. Files get the user's
umask, as every other writer gives them (some libraries write weights with mode 0600).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from filelock import FileLock

from ...errors import ConfigError
from .manifest import MANIFEST

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Swaps two folders in one atomic step; False where the system cannot (then the caller renames twice)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # a C library without renameat2 (glibc < 2.28, musl)
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):  # a file system without exchange
        return False
    raise OSError(code, os.strerror(code), str(a), None, str(b))


def _swap_in(staging: Path, target: Path) -> Path | None:
    """Puts ``staging`` at ``target``; returns where the old export now is (to delete), or None."""
    if not target.exists():
        os.rename(staging, target)
        return None
    if _exchange(staging, target):
        return staging
    # Two renames: a kill between them leaves only the old export aside, which the next export puts back.
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
    os.rmdir(old)
    os.rename(target, old)
    os.rename(staging, target)
    return old


def _leftover(name: str, target_name: str) -> bool:
    return bool(re.fullmatch(rf"\.{re.escape(target_name)}\.(new|old)-\w+", name))


# The temporary folders that the per-folder swaps of earlier releases left inside an export.
_OLD_LEFTOVER = re.compile(r"\..+\.(tmp|old)-\w+")


def _put_back_aside(target: Path) -> None:
    """An export interrupted between the two renames of `_swap_in` left the old export aside: put it back."""
    old_name = re.compile(rf"\.{re.escape(target.name)}\.old-\w+")
    aside = sorted(p for p in target.parent.iterdir() if p.is_dir() and old_name.fullmatch(p.name))
    if aside and not target.exists():
        os.rename(aside[-1], target)


def _clean_leftovers(target: Path) -> None:
    """Removes the staging folders of interrupted exports (the lock guarantees none is being written)."""
    for path in target.parent.iterdir():
        if path.is_dir() and _leftover(path.name, target.name):
            shutil.rmtree(path, ignore_errors=True)
    if target.is_dir():
        for path in target.iterdir():
            if path.is_dir() and _OLD_LEFTOVER.fullmatch(path.name):
                shutil.rmtree(path, ignore_errors=True)


def check_replaceable(target: Path) -> None:
    """An export replaces its whole folder: refuse one that holds anything but export folders (and what
    interrupted exports left in it)."""
    if not target.exists():
        return
    if not target.is_dir():
        raise ConfigError(f"{target} is a file; give a folder for the export")
    foreign = sorted(
        p.name
        for p in target.iterdir()
        if not (p.is_dir() and ((p / MANIFEST).exists() or _OLD_LEFTOVER.fullmatch(p.name)))
    )
    if foreign:
        raise ConfigError(
            f"{target} holds {', '.join(foreign[:4])}, which are not part of an export; an export replaces the "
            "whole folder, so choose an empty or new folder (or move them away)"
        )


def _link_tree(source: Path, destination: Path) -> None:
    """A copy of ``source`` made of hard links (no bytes copied); plain copies where links fail."""

    def link(src, dst):
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, destination, copy_function=link)


def _umask() -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():  # Linux: read without changing it
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def share(folder: Path) -> None:
    """Gives ``folder`` and everything in it the modes the user's umask gives new files and folders."""
    mask = _umask()
    os.chmod(folder, 0o777 & ~mask)
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o777 & ~mask)
        for name in files:
            os.chmod(os.path.join(root, name), 0o666 & ~mask)


@contextlib.contextmanager
def staged_export(target: str | os.PathLike, only: Iterable[str] | None = None) -> Iterator[Path]:
    """Yields a hidden staging folder beside ``target``; when the block ends without error the staging
    folder replaces ``target`` whole, in one atomic step. With ``only``, the folders of the current export
    other than those named are carried over (as hard links) so the block writes just the named ones;
    without it the block writes the whole export. On error the current export stays as it was."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / f".{target.name}.lock")):  # exports of one folder take turns
        _put_back_aside(target)
        check_replaceable(target)  # before anything is removed: never clean up a folder that is not an export
        _clean_leftovers(target)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.new-", dir=target.parent))
        old = None
        try:
            if only is not None and target.is_dir():
                written = set(only)
                for path in target.iterdir():
                    if path.name not in written:
                        _link_tree(path, staging / path.name)
            yield staging
            share(staging)
            old = _swap_in(staging, target)
        finally:
            shutil.rmtree(old or staging, ignore_errors=True)
