"""Re-exports killed with SIGKILL at random points (launched by tests/harness/test_export_set.py).

    python tests/harness/export_worker.py OUT_DIR TRIALS SEED

Builds two tiny multi-task models A and B (fine-tuned bases that differ). For each trial it exports
A to ``OUT_DIR/trial<i>/export`` and forks a child that re-exports B, A, B ... into that folder
without end. Even trials kill the child with SIGKILL after a random delay (mostly while files are
written); odd trials make it kill itself at a random line of `staging` (the switch itself, a few
lines among the writes). It prints one JSON line: ``{"fingerprints": [A's base, B's base],
"kills": [...], "exports_started": [...]}``.

One process forks every child, so the trials pay for importing torch once. The process runs one
thread (set before any tensor work), which keeps fork safe.
"""

import json
import os
import random
import signal
import sys
import time
from pathlib import Path

import torch

torch.set_num_threads(1)

from helpers import tiny_bert_config  # noqa: E402
from transformers import BertModel  # noqa: E402

from pals_adapters.harness.export import export_run, fingerprint_model  # noqa: E402
from pals_adapters.harness.methods.model import MultiTaskModel  # noqa: E402
from pals_adapters.harness.methods.registry import get_method  # noqa: E402
from pals_adapters.harness.tasks.glue import GLUE_TASKS  # noqa: E402

TASKS = {name: GLUE_TASKS[name] for name in ("rte", "stsb", "cola")}


def model(seed: int) -> MultiTaskModel:
    torch.manual_seed(seed)
    return MultiTaskModel(BertModel(tiny_bert_config()), TASKS, get_method("pals"), "finetune").eval()


def staging_lines(kill_at: int | None = None) -> list[int]:
    """Counts the lines of `staging` run from now on (a list of one count); at ``kill_at`` the process
    kills itself with SIGKILL."""
    count = [0]

    def trace(frame, event, arg):
        if not frame.f_code.co_filename.endswith(STAGING):
            return None
        if event == "line":
            count[0] += 1
            if count[0] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
        return trace

    sys.settrace(trace)
    return count


STAGING = os.path.join("export", "staging.py")


def main() -> None:
    out, trials, seed = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    models = [model(1), model(2)]
    rng = random.Random(seed)
    export_run(models[0], out / "timing", base_model_name="tiny-bert")
    started = time.perf_counter()
    lines = staging_lines()
    export_run(models[1], out / "timing", base_model_name="tiny-bert")  # a re-export, as in the trials
    sys.settrace(None)
    one_export, lines_per_export = time.perf_counter() - started, lines[0]
    kills, counts = [], []
    for trial in range(trials):
        folder = out / f"trial{trial}" / "export"
        export_run(models[0], folder, base_model_name="tiny-bert")  # the old export
        by_line = trial % 2 == 1
        kill_at = rng.randint(1, lines_per_export) if by_line else None
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # re-export without end until killed
            os.close(read)
            if by_line:
                staging_lines(kill_at)
            i = 0
            while True:
                i += 1
                os.write(write, b".")
                export_run(models[i % 2], folder, base_model_name="tiny-bert")
        os.close(write)
        os.read(read, 1)  # the child has begun its first re-export
        if by_line:
            kills.append(f"staging line {kill_at} of {lines_per_export}")
        else:
            delay = rng.uniform(0, 3 * one_export)
            time.sleep(delay)
            os.kill(child, signal.SIGKILL)
            kills.append(f"after {delay:.3f} s")
        os.waitpid(child, 0)
        started_exports = 1
        while chunk := os.read(read, 4096):
            started_exports += len(chunk)
        os.close(read)
        counts.append(started_exports)
    print(
        json.dumps(
            {
                "fingerprints": [fingerprint_model(m) for m in models],
                "kills": kills,
                "exports_started": counts,
                "one_export_s": round(one_export, 4),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
