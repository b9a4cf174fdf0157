"""The grid's progress line: runs done of all, the current run's step, the time left."""

import importlib
import io
from pathlib import Path
from types import SimpleNamespace

from pals_adapters.harness import RunConfig
from pals_adapters.harness.comparison.grid import PlannedRun
from pals_adapters.harness.comparison.runs import Progress


def test_the_line_names_the_runs_done_the_current_step_and_the_time_left(monkeypatch):
    out = io.StringIO()
    progress = Progress(total=4, already=1, jobs=1, stream=out)
    progress.EVERY = 0
    run = PlannedRun("PALs", 2, RunConfig(tasks=["rte"]), Path("runs/x"), {}, "0" * 12)
    clock = [1000.0]
    # the module by its name: `pals_adapters.harness.compare` as an attribute is the function
    monkeypatch.setattr(
        importlib.import_module("pals_adapters.harness.comparison.runs"), "time", SimpleNamespace(time=lambda: clock[0])
    )
    callback = progress.step_callback(run)  # the run starts at t=1000
    clock[0] = 1010.0  # 10 s for 50 of 200 steps: 30 s left of this run, then 2 more runs of about 40 s
    callback.on_step_end(None, SimpleNamespace(global_step=50, max_steps=200), None)
    assert out.getvalue().strip() == "compare: 1/4 runs done; PALs seed 2 at step 50/200; about 110 s left"
