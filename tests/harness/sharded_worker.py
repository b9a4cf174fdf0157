"""One rank of a sharded run that stops as if killed (launched by tests/harness/training/test_sharded.py).

    python -m torch.distributed.run --nproc-per-node 2 --master-port PORT \\
        tests/harness/sharded_worker.py SETTINGS_JSON --hang-after-save STEP

It runs ``pals_adapters.harness.training.runner.run`` with the `RunConfig` settings of SETTINGS_JSON
(a JSON object). After the checkpoint of step STEP is written, rank 0 writes ``<output_dir>/hanging``
and every rank sleeps, so that the test can ``kill -9`` the launch at a known point of the run.
"""

import argparse
import json
import os
import time
from pathlib import Path

from transformers import TrainerCallback

from pals_adapters.harness.training import runner


class HangAfterSave(TrainerCallback):
    def __init__(self, step: int, marker: Path):
        self.step, self.marker = step, marker

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            if int(os.environ.get("RANK", "0")) == 0:
                self.marker.write_text(str(self.step))
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
