"""One run per output folder: a second `train` into a busy folder is refused at once, the lock goes
with its holder (even on kill -9), and the record of what the checkpoints are is never overwritten."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from helpers import REPO, fake_checkpoint
from reliability_cases import TINY, run_folder_with_checkpoint, user_run, user_tasks

from pals_adapters.errors import ConfigError
from pals_adapters.harness.cli import main
from pals_adapters.harness.training.export_checkpoint import recorded_run
from pals_adapters.harness.training.run_folder import LOCK_FILE, prepare_run_folder, run_lock, write_record

ENV = {
    **os.environ,
    "OMP_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
}


def wait_for(path, process, timeout=300):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_two_train_commands_into_one_folder_one_is_refused_at_once(tmp_path, tiny_model_dir, capsys):
    out = tmp_path / "run"
    argv = [
        "train",
        "--model",
        str(tiny_model_dir),
        "--task-file",
        str(user_tasks(tmp_path)),
        "--method",
        "pals",
        "--base",
        "frozen",
        "--sampler",
        "round_robin",
        "--max-steps",
        "40",
        "--save-steps",
        "20",
        "--batch-size",
        "4",
        "--max-length",
        "32",
        "--logging-steps",
        "20",
        "--eval-batch-size",
        "8",
        "--output-dir",
        str(out),
        "--no-export",
    ]
    first = subprocess.Popen(
        [sys.executable, "-m", "pals_adapters.harness.cli", *argv],
        cwd=REPO,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(out / "run_config.json", first)  # written while the first run holds the folder
        record = (out / "run_config.json").read_bytes()
        started = time.monotonic()
        with pytest.raises(SystemExit) as second:
            main(argv)  # the same command, at the same time
        assert time.monotonic() - started < 30, "refused before loading anything"
        assert first.poll() is None, "the first run must still be running for this test to mean anything"
        assert second.value.code == 2
        assert "in use by another run" in capsys.readouterr().err
        _, err = first.communicate(timeout=600)
        assert first.returncode == 0, err[-3000:]
    finally:
        if first.poll() is None:
            first.kill()
    assert (out / "run_config.json").read_bytes() == record
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-20", "checkpoint-40"]
    state = json.loads((out / "checkpoint-40" / "trainer_state.json").read_text())
    assert state["global_step"] == 40 and "results.json" in os.listdir(out)


def test_the_lock_goes_with_a_killed_run(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from filelock import FileLock; lock = FileLock({str(tmp_path / LOCK_FILE)!r}); "
            "lock.acquire(); print('held', flush=True); import time; time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match="in use by another run"), run_lock(tmp_path):
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with run_lock(tmp_path):  # kill -9 released it
        pass


def test_resume_checks_never_overwrite_the_record(tmp_path, tiny_model_dir):
    TINY["model"] = tiny_model_dir
    config = run_folder_with_checkpoint(tmp_path)
    record = (tmp_path / "run" / "run_config.json").read_bytes()
    same = dataclasses.replace(config, resume="last")
    assert prepare_run_folder(same, same.validate()).endswith("checkpoint-4")
    other = dataclasses.replace(config, resume="last", seed=1, lr=1e-3)
    with pytest.raises(ConfigError, match=r"lr: run 2e-05, now 0.001; seed: run 42, now 1"):
        prepare_run_folder(other, other.validate())
    assert (tmp_path / "run" / "run_config.json").read_bytes() == record


@pytest.mark.parametrize("old, new", [("top_pals", "attention_on_top"), ("pals_top", "pals_top_layers")])
def test_a_run_folder_recorded_with_an_old_method_name_still_resumes(tmp_path, tiny_model_dir, old, new):
    TINY["model"] = tiny_model_dir
    config = user_run(tmp_path, method=new)
    folder = Path(config.output_dir)
    write_record(folder, config, config.validate())
    recorded = json.loads((folder / "run_config.json").read_text())
    assert recorded["method"] == new  # what a run records now
    recorded["method"] = old  # ... and what it recorded before the rename
    (folder / "run_config.json").write_text(json.dumps(recorded))
    fake_checkpoint(folder / "checkpoint-4")
    record = (folder / "run_config.json").read_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # reading the old record is silent
        resumed = dataclasses.replace(config, resume="last")
        assert prepare_run_folder(resumed, resumed.validate()).endswith("checkpoint-4")
        assert recorded_run(folder)[0].method == new  # `pals-bench export` of the run
    with pytest.warns(DeprecationWarning, match=new):  # typed with the old name: the same run, with a warning
        typed_old = dataclasses.replace(config, resume="last", method=old)
        specs = typed_old.validate()
    assert prepare_run_folder(typed_old, specs).endswith("checkpoint-4")
    other = dataclasses.replace(config, resume="last", method="houlsby")
    with pytest.raises(ConfigError, match=f"method: run {new!r}, now 'houlsby'"):
        prepare_run_folder(other, other.validate())
    assert (folder / "run_config.json").read_bytes() == record
