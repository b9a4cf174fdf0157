"""What the tests of a comparison run again share: a one-row grid of one seed and two steps on the user's
tasks, a file edit, the files of a folder with their times, and `pals-bench` in a fresh process."""

import os
import subprocess
import sys

from compare_grids import write_grid, write_user_tasks

ONE_ROW = "rows:\n  - name: PALs\n    method: pals\n"


def one_row_grid(folder, model_dir, rows=ONE_ROW, **shared):
    """``folder/tasks.yaml`` (mood, closeness) and ``folder/grid.yaml``: one row, one seed, two steps."""
    write_user_tasks(folder)
    return write_grid(folder, model_dir, rows=rows, **{"seeds": [1], "max_steps": 2, **shared})


def flip_first_label(path):
    """The first data row of a ``text,label`` CSV file with its label flipped (0 <-> 1)."""
    lines = path.read_text().splitlines()
    text, label = lines[1].rsplit(",", 1)
    lines[1] = f"{text},{1 - int(label)}"
    path.write_text("\n".join(lines) + "\n")


def files_and_times(folder):
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def run_folders(out):
    return sorted(p.name for p in (out / "runs").iterdir())


def pals_bench(*words, cwd=None, **kwargs):
    """``pals-bench WORDS`` in a fresh process (the package of this checkout), its output captured."""
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "pals_adapters.harness.cli", *map(str, words)]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=300, **kwargs)
