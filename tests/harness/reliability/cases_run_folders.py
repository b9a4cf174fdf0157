"""Bad-input rows of run folders: a folder in use, resuming only what it was, never replacing finished work.
Each row: (action taking the tmp folder, the error, fragments its message must hold)."""

import contextlib
import dataclasses
import json
import shutil
from pathlib import Path

import safetensors.torch
from filelock import FileLock
from helpers import fake_checkpoint
from reliability_cases import TINY, run_folder_with_checkpoint, served_export, unchanged, user_run, user_tasks

from pals_adapters.errors import ConfigError
from pals_adapters.harness.cli import main
from pals_adapters.harness.export.manifest import read_task_manifest
from pals_adapters.harness.methods.model import build_model
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.harness.training import checkpoints, runner
from pals_adapters.harness.training.run_folder import LOCK_FILE, prepare_run_folder, write_record


def resumed_with(edit=None, **change):
    """Resumes the interrupted run with other settings (or after ``edit(tmp)``); the record must stay as it was."""

    def action(tmp):
        config = run_folder_with_checkpoint(tmp)
        if edit is not None:
            edit(tmp)
        record = Path(config.output_dir) / "run_config.json"
        before = record.read_bytes()
        try:
            runner.run(dataclasses.replace(config, resume="last", **change))
        finally:
            assert record.read_bytes() == before, "the record of what the checkpoints are was overwritten"

    return action


def fresh_run_over_checkpoints(tmp):
    config = run_folder_with_checkpoint(tmp)
    runner.run(dataclasses.replace(config, seed=7))


def second_run_into_a_busy_folder(tmp):
    config = user_run(tmp)
    Path(config.output_dir).mkdir(parents=True)
    with FileLock(str(Path(config.output_dir) / LOCK_FILE)):  # the first run holds it
        runner.run(config)


def finished_run(tmp: Path) -> runner.RunConfig:
    """The folder of a run that ended: its record, results and export (no checkpoint: it saved none)."""
    config = user_run(tmp)
    write_record(Path(config.output_dir), config, config.validate())
    (Path(config.output_dir) / "results.json").write_text('{"metrics": {}}')
    return config


def second_run_into_a_finished_folder(tmp):
    config = finished_run(tmp)
    run = Path(config.output_dir)
    second = dataclasses.replace(config, seed=7)
    unchanged(run / "run_config.json", lambda: unchanged(run / "results.json", lambda: runner.run(second)))


def export_onto_another_runs_export(tmp):
    """``export RUN --out EXPORT`` where EXPORT holds another run's tasks (same names): refused, nothing read."""
    config = run_folder_with_checkpoint(tmp)
    other = served_export(tmp / "other", tasks=("rte",))
    return unchanged(other, lambda: main(["export", config.output_dir, "--out", str(other)]))


def export_a_checkpoint_of_another_run(tmp):
    (tmp / "a").mkdir()
    (tmp / "b").mkdir()
    mine, theirs = run_folder_with_checkpoint(tmp / "a"), run_folder_with_checkpoint(tmp / "b")
    checkpoint = str(Path(theirs.output_dir) / "checkpoint-4")
    try:
        return main(["export", mine.output_dir, "--checkpoint", checkpoint])
    finally:
        assert not (Path(mine.output_dir) / "export").exists()


def overwrite_a_finished_run(tmp):
    """--overwrite replaces a finished run knowingly: its results and checkpoints go, the record is the new run's."""
    config = finished_run(tmp)
    out = Path(config.output_dir)
    fake_checkpoint(out / "checkpoint-4")
    changed = dataclasses.replace(config, seed=7, overwrite=True)
    prepare_run_folder(changed, changed.validate())
    return sorted(p.name for p in out.iterdir()), json.loads((out / "run_config.json").read_text())["seed"]


def export_elsewhere_of_a_run_on_a_relative_model(tmp):
    """A run of ``--model tiny`` (a folder relative to where it started) exports from another directory; the
    export names the folder by its path from the export (the run's local record found the folder)."""
    shutil.copytree(TINY["model"], tmp / "tiny")
    with contextlib.chdir(tmp):
        config = user_run(Path("."), model="tiny")
        specs = config.validate()
        write_record(Path(config.output_dir), config, specs)
        checkpoint = fake_checkpoint(Path(config.output_dir) / "checkpoint-4")
        model = build_model("tiny", specs, get_method(config.method), config.base)
        safetensors.torch.save_model(model, str(checkpoint / "model.safetensors"))
    (tmp / "elsewhere").mkdir()
    with contextlib.chdir(tmp / "elsewhere"):
        main(["export", str(tmp / "run")])
    return {"base_model_name": read_task_manifest(tmp / "run" / "export" / "a").base_model_name}


RUN_FOLDERS = {
    "resume-without-checkpoint": (
        lambda tmp: checkpoints.last_complete_checkpoint(str(tmp)),
        ConfigError,
        ["resume='last'", "checkpoint"],
    ),
    # issue 9.2: one run per output folder
    "second-run-into-a-busy-folder": (
        second_run_into_a_busy_folder,
        ConfigError,
        ["in use by another run", ".pals-bench.lock", "choose another output_dir"],
    ),
    # issue 9.3: resume only what it was
    **{
        f"resume-with-other-{name}": (
            resumed_with(**change),
            ConfigError,
            ["resume:", "other settings", fragment, "start a new run"],
        )
        for name, change, fragment in [
            ("tasks", {"tasks": ["a"]}, "tasks: run ['a', 'a_b'], now ['a']"),
            ("seed", {"seed": 7}, "seed: run 42, now 7"),
            ("sampler", {"sampler": "proportional"}, "sampler: run 'round_robin', now 'proportional'"),
            ("method", {"method": "houlsby"}, "method: run 'pals', now 'houlsby'"),
            ("widths", {"method": "pals[hidden_size_aug=12]"}, "now 'pals[hidden_size_aug=12]'"),
            ("lr", {"lr": 1e-3}, "lr: run 2e-05, now 0.001"),
            ("adapter-lr", {"adapter_lr": 1e-3}, "adapter_lr: run None, now 0.001"),
            ("batch-size", {"batch_size": 8}, "batch_size: run 4, now 8"),
            ("steps", {"max_steps": 16}, "max_steps: run 8, now 16"),
            (
                "compile-mode",
                {"compile": True, "compile_mode": "reduce-overhead"},
                "compile_mode: run None, now 'reduce-overhead'",
            ),
        ]
    },
    "resume-with-reordered-task-labels": (
        resumed_with(edit=lambda tmp: user_tasks(tmp, labels="[pos, neg]")),
        ConfigError,
        ["task 'a' labels: run ['neg', 'pos'], now ['pos', 'neg']"],
    ),
    "fresh-run-over-checkpoints": (
        fresh_run_over_checkpoints,
        ConfigError,
        ["already holds checkpoints", "checkpoint-4", "resume='last'", "new output_dir"],
    ),
    # a finished run is never replaced by accident
    "second-run-into-a-finished-runs-folder": (
        second_run_into_a_finished_folder,
        ConfigError,
        ["holds a finished run (results.json, run_config.json)", "new output_dir", "--resume last", "--overwrite"],
    ),
    "overwrite-with-resume": (
        lambda tmp: user_run(tmp, overwrite=True, resume="last").validate(),
        ConfigError,
        ["overwrite with resume='last'", "give one of them"],
    ),
    "export-onto-another-runs-export": (
        export_onto_another_runs_export,
        SystemExit,
        ["--out", "holds an export already (base, rte)", "would replace it", "Give a new folder", "Nothing written"],
    ),
    "export-a-checkpoint-of-another-run": (
        export_a_checkpoint_of_another_run,
        SystemExit,
        ["b/run/checkpoint-4 is not a checkpoint of the run", "a/run", "pals-bench export", "b/run --checkpoint"],
    ),
}
