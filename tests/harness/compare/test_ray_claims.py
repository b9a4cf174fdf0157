"""A Ray driver holds the lock of every run it places until the run is written back: a second compare on the
folder leaves a run alone while a node trains it. A run another process holds is left to it (its files
untouched), waited for, and placed only if that process left it unfinished. No cluster is needed: the
placing itself is replaced by a record of what would be placed and what was locked then."""

import subprocess
import sys

import pytest
from compare_reruns import one_row_grid

from pals_adapters.harness.comparison.grid import plan_runs, read_grid
from pals_adapters.harness.comparison.launch import Launch
from pals_adapters.harness.comparison.runs import unique_runs
from pals_adapters.harness.training.run_folder import LOCK_FILE

ray_launcher = pytest.importorskip(
    "pals_adapters.harness.comparison.ray_launcher",
    reason='the Ray launcher needs Ray: pip install "pals-adapters[ray]"',
)

HOLD = (  # kept in a name: a lock object collected is a lock released
    "import sys; from filelock import FileLock; lock = FileLock(sys.argv[1]); lock.acquire(); "
    "print('held', flush=True); sys.stdin.read()"
)
TRY = "import sys; from filelock import FileLock; FileLock(sys.argv[1]).acquire(timeout=0)"


def locked_elsewhere(folder):
    """Whether another process would find the run's lock taken."""
    return subprocess.run([sys.executable, "-c", TRY, str(folder / LOCK_FILE)], capture_output=True).returncode != 0


def test_a_ray_driver_holds_its_runs_and_waits_for_those_another_process_holds(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    grid = one_row_grid(tmp_path, tiny_model_dir, seeds=[1, 2])
    planned = plan_runs(read_grid(grid), tmp_path / "out")
    first, second = unique_runs(planned)
    second.folder.mkdir(parents=True)
    leftover = second.folder.parent / f".{second.folder.name}.incoming-abc123"  # the other process writing it back
    leftover.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(second.folder / LOCK_FILE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout.readline() == b"held\n"
        placed = []

        def place(todo, keep, launch, progress):
            placed.append(
                {
                    "runs": [run.folder for run in todo],
                    "locked": [locked_elsewhere(run.folder) for run in todo],
                    "leftover": leftover.exists(),
                }
            )
            if len(placed) == 1:
                holder.stdin.close()  # the other process lets go, its run unfinished
                holder.wait(timeout=60)
            return []

        monkeypatch.setattr(ray_launcher.ray, "is_initialized", lambda: True)
        monkeypatch.setattr(ray_launcher, "check_resources", lambda launch: 1)
        monkeypatch.setattr(ray_launcher, "_train", place)
        assert ray_launcher.train_on_ray(planned, False, Launch(launcher="ray")) == []
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert placed == [
        {"runs": [first.folder], "locked": [True], "leftover": True},  # the held run's files untouched meanwhile
        {"runs": [second.folder], "locked": [True], "leftover": False},
    ]
    assert "another process is training" in capsys.readouterr().out
    assert not locked_elsewhere(first.folder) and not locked_elsewhere(second.folder)  # let go once written back
