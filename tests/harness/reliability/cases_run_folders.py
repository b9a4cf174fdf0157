"""Bad-input rows of run folders: a folder in use, resuming only what it was, never replacing finished work.
Each row: (action taking the tmp folder, the error, fragments its message must hold)."""

import dataclasses
from pathlib import Path

from filelock import FileLock
from reliability_cases import run_folder_with_checkpoint, user_run, user_tasks

from pals_adapters.errors import ConfigError
from pals_adapters.harness.training import checkpoints, runner
from pals_adapters.harness.training.run_folder import LOCK_FILE


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
}
