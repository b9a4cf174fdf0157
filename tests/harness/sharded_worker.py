"""One rank of a sharded run that stops as if killed (launched by tests/harness/training/test_sharded_runs.py).

    python -m torch.distributed.run --nproc-per-node 2 --master-port PORT \\
        tests/harness/sharded_worker.py SETTINGS_JSON --hang-after-save STEP

It runs ``pals_adapters.harness.training.runner.run`` with the `RunConfig` settings of SETTINGS_JSON
(a JSON object). Once every rank has written its part of the checkpoint of step STEP (a barrier in
``on_save``, which the Trainer calls after the save), rank R writes its process id to
``<output_dir>/hanging-R`` and sleeps, so that the test can ``kill -9`` the launch at a known point of
the run. torchrun starts each rank in a session of its own: killing the launcher's process group
leaves the ranks running, so the test kills them by these ids.
"""

import argparse
import json
import os
import time
from pathlib import Path

import torch
from transformers import TrainerCallback

from pals_adapters.harness.training import runner


class HangAfterSave(TrainerCallback):
    def __init__(self, step: int, marker: Path):
        self.step, self.marker = step, marker

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            torch.distributed.barrier()  # every rank's files of the checkpoint are written
            rank = int(os.environ.get("RANK", "0"))
            marker = self.marker.with_name(f"{self.marker.name}-{rank}")
            partial = marker.with_name(f".{marker.name}.tmp")
            partial.write_text(str(os.getpid()))
            partial.replace(marker)  # whole, or not there
            time.sleep(600)  # until killed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("settings")
    parser.add_argument("--hang-after-save", type=int)
    args = parser.parse_args()
    config = runner.RunConfig(**json.loads(args.settings))
    if args.hang_after_save:
        build_trainer = runner.build_trainer

        def hanging_trainer(*a, **kw):
            trainer = build_trainer(*a, **kw)
            trainer.add_callback(HangAfterSave(args.hang_after_save, Path(config.output_dir) / "hanging"))
            return trainer

        runner.build_trainer = hanging_trainer
    runner.run(config)


if __name__ == "__main__":
    main()
