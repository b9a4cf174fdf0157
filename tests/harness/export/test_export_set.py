"""A whole export switches at once: a re-export killed at any point leaves the old or the new export,
whole; the next export removes what it left; files get the user's umask; a folder holding anything
but an export is not replaced."""

import json
import os
import subprocess
import sys

import pytest
import torch
from helpers import REPO, tiny_bert_config
from transformers import BertModel

from pals_adapters.errors import ConfigError
from pals_adapters.harness.export import (
    export_run,
    export_task,
    fingerprint_model,
    load_task,
    read_task_manifest,
    staging,
)
from pals_adapters.harness.methods.model import MultiTaskModel
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.harness.tasks.glue import GLUE_TASKS

TASKS = {name: GLUE_TASKS[name] for name in ("rte", "stsb", "cola")}


def tiny_model(seed=0, base="finetune"):
    torch.manual_seed(seed)
    return MultiTaskModel(BertModel(tiny_bert_config()), TASKS, get_method("pals"), base).eval()


def leftovers(folder):
    """What an export left beside or inside ``folder`` besides the export itself and its lock file."""
    beside = [p.name for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}.") and p.suffix != ".lock"]
    inside = [p.name for p in folder.iterdir() if p.name.startswith(".")] if folder.is_dir() else []
    return beside + inside


def test_a_killed_re_export_leaves_the_old_or_the_new_export_whole(tmp_path):
    trials = 4  # 2 kills after a random delay, 2 at a random line of the switch itself
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]),
    }
    worker = REPO / "tests" / "harness" / "export_worker.py"
    proc = subprocess.run(
        [sys.executable, str(worker), str(tmp_path), str(trials), "0"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    fresh = tiny_model(3)
    for trial in range(trials):
        folder = tmp_path / f"trial{trial}" / "export"
        assert sorted(p.name for p in folder.iterdir()) == ["base", "cola", "rte", "stsb"], report
        bases = set()
        for task in TASKS:
            load_task(folder / task)  # checks every file, the base's manifest, weights, config
            bases.add(read_task_manifest(folder / task).base_fingerprint)
        assert len(bases) == 1 and bases <= set(report["fingerprints"]), (trial, report)
        export_run(fresh, folder, base_model_name="tiny-bert")  # the next export cleans up after the killed one
        assert leftovers(folder) == []
        assert read_task_manifest(folder / "rte").base_fingerprint == fingerprint_model(fresh)


def test_export_task_replaces_one_task_and_keeps_the_others(tmp_path):
    model = tiny_model()
    out = tmp_path / "export"
    export_run(model, out, base_model_name="tiny-bert")
    stsb_before = (out / "stsb" / "head.safetensors").stat()
    with torch.no_grad():
        model.heads["rte"].bias.add_(1.0)
    export_task(model, "rte", out, base_model_name="tiny-bert")
    assert sorted(p.name for p in out.iterdir()) == ["base", "cola", "rte", "stsb"] and leftovers(out) == []
    assert (out / "stsb" / "head.safetensors").stat().st_ino == stsb_before.st_ino  # carried over, not rewritten
    ids = torch.randint(5, 99, (2, 7))
    with torch.no_grad():
        assert torch.equal(load_task(out / "rte")("rte", ids)["logits"], model("rte", ids)["logits"])
        load_task(out / "stsb")


def test_leftovers_of_interrupted_exports_go_with_the_next_export(tmp_path):
    out = tmp_path / "export"
    export_run(tiny_model(base="frozen"), out, base_model_name="tiny-bert")
    for stray in (
        tmp_path / ".export.new-abc123",
        tmp_path / ".export.old-def456",
        out / ".rte.tmp-x1y2",
        out / ".base.old-z9",
    ):
        stray.mkdir()
        (stray / "adapter.safetensors").write_bytes(b"half")
    export_run(tiny_model(base="frozen"), out, base_model_name="tiny-bert")
    assert leftovers(out) == []


def test_an_export_cut_between_two_renames_is_put_back(tmp_path, monkeypatch):
    """Where the system cannot exchange two folders at once, a kill between the two renames leaves the
    old export aside; the next export puts it back before anything else."""
    out = tmp_path / "export"
    export_run(tiny_model(1, base="frozen"), out, base_model_name="tiny-bert")
    old_print = read_task_manifest(out / "rte").base_fingerprint
    monkeypatch.setattr(staging, "_exchange", lambda a, b: False)
    renames = []

    def rename(src, dst):
        renames.append(dst)
        if len(renames) == 2:
            raise KeyboardInterrupt("killed between the renames")
        os.replace(src, dst)

    monkeypatch.setattr(staging.os, "rename", rename)
    with pytest.raises(KeyboardInterrupt):
        export_run(tiny_model(2, base="frozen"), out, base_model_name="tiny-bert")
    assert not out.exists()  # the old export is aside
    monkeypatch.undo()
    staging._put_back_aside(out)  # the first step of the next export
    assert read_task_manifest(out / "rte").base_fingerprint == old_print and leftovers(out) == []


def test_an_export_never_replaces_or_cleans_a_folder_with_other_files(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / ".cache.tmp-abc").mkdir()  # named like a leftover, but not in an export: left alone
    (tmp_path / ".cache.tmp-abc" / "keep").write_text("mine too")
    with pytest.raises(ConfigError, match=r"holds notes.txt, which are not part of an export.*empty or new folder"):
        export_run(tiny_model(base="frozen"), tmp_path, base_model_name="tiny-bert")
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert (tmp_path / ".cache.tmp-abc" / "keep").read_text() == "mine too"
    assert [p.name for p in tmp_path.parent.iterdir() if p.name.startswith(f".{tmp_path.name}.new")] == []


@pytest.mark.parametrize(
    "umask, file_mode, dir_mode", [(0o022, 0o644, 0o755), (0o002, 0o664, 0o775), (0o077, 0o600, 0o700)]
)
def test_export_files_follow_the_users_umask(tmp_path, umask, file_mode, dir_mode):
    previous = os.umask(umask)
    try:
        export_run(tiny_model(), tmp_path / "export", base_model_name="tiny-bert")
    finally:
        os.umask(previous)
    out = tmp_path / "export"
    assert (out.stat().st_mode & 0o777) == dir_mode
    for path in out.rglob("*"):
        expected = dir_mode if path.is_dir() else file_mode
        assert (path.stat().st_mode & 0o777) == expected, path  # weights too (safetensors writes 0600)
