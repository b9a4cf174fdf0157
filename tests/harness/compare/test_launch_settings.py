"""Where a grid's runs train, as a user sets it (grid keys, `compare` options): bad settings are refused
before any folder is written, `--launcher ray` without Ray says how to install it, and nothing imports Ray
unless the launcher is Ray. No cluster needed: the cluster itself is tested in test_ray_launcher.py."""

import subprocess
import sys

import pytest
from compare_grids import write_grid
from helpers import REPO

from pals_adapters.errors import ConfigError
from pals_adapters.harness import compare

ROWS = "rows:\n  - name: PALs\n    method: pals\n"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"launcher": "slurm"}, "launcher='slurm': choose one of local, ray"),
        (
            {"launcher": "ray", "resources_per_run": {"gpu": 1}},
            "resources_per_run: unknown ['gpu']; give cpus and gpus",
        ),
        ({"launcher": "ray", "resources_per_run": {"cpus": 0}}, "cpus=0: expected a number above 0"),
        ({"launcher": "ray", "resources_per_run": {"gpus": -1}}, "gpus=-1: expected a number 0 or more"),
        ({"launcher": "ray", "resources_per_run": {"gpus": 1.5}}, "gpus=1.5: above 1, give whole GPUs"),
        ({"launcher": "ray", "resources_per_run": 4}, "resources_per_run=4: expected a mapping"),
        ({"launcher": "ray", "storage": "s3://bucket/runs"}, "object stores such as s3:// are not supported"),
        ({"launcher": "ray", "storage": "relative/folder"}, "give the absolute path of a folder every node"),
        ({"launcher": "ray", "max_retries": -1}, "max_retries=-1"),
        ({"launcher": "ray", "ray_address": ""}, "ray_address='': give the cluster's address"),
        ({"ray_adress": "auto"}, "did you mean 'ray_address'?"),
    ],
)
def test_bad_launch_settings_are_refused_before_anything_is_written(
    user_tasks, tiny_model_dir, tmp_path, settings, message
):
    grid = write_grid(user_tasks.parent, tiny_model_dir, rows=ROWS, **settings)
    with pytest.raises(ConfigError, match=None) as refused:
        compare(grid, tmp_path / "out")
    assert message in str(refused.value)
    assert not (tmp_path / "out").exists()


def test_options_that_go_with_the_ray_launcher_only(user_tasks, tiny_model_dir, tmp_path):
    grid = write_grid(user_tasks.parent, tiny_model_dir, rows=ROWS)
    with pytest.raises(ConfigError, match="ray_address goes with launcher ray"):
        compare(grid, tmp_path / "out", ray_address="auto")
    with pytest.raises(ConfigError, match="on Ray, resources_per_run decides how many runs train at a time"):
        compare(grid, tmp_path / "out", launcher="ray", jobs=2)
    assert not (tmp_path / "out").exists()


def run_without_ray(code: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh Python where ``import ray`` fails as if Ray were not installed."""
    blocker = "import sys; sys.modules['ray'] = None\n"
    return subprocess.run([sys.executable, "-c", blocker + code], capture_output=True, text=True, cwd=REPO)


def test_the_ray_launcher_without_ray_says_how_to_install_it_before_anything_runs(user_tasks, tiny_model_dir, tmp_path):
    grid = write_grid(user_tasks.parent, tiny_model_dir, rows=ROWS)
    out = tmp_path / "out"
    code = (
        "from pals_adapters.harness.cli import main\n"
        f"main(['compare', '--config', {str(grid)!r}, '--output-dir', {str(out)!r}, '--launcher', 'ray'])\n"
    )
    done = run_without_ray(code)
    assert done.returncode == 2, done.stderr[-2000:]
    assert 'install it with pip install "pals-adapters[ray]"' in done.stderr
    assert not out.exists()
    # a local comparison (its dry run here) and the help never import Ray
    local = run_without_ray(
        "import sys\nfrom pals_adapters.harness import compare\n"
        f"compare({str(grid)!r}, {str(out)!r}, dry_run=True)\nassert sys.modules['ray'] is None\n"
    )
    assert local.returncode == 0, local.stderr[-2000:]
    helped = subprocess.run(
        [sys.executable, "-c", "import sys\nfrom pals_adapters.harness.cli import main\ntry:\n"
         "    main(['compare', '--help'])\nexcept SystemExit:\n    pass\nassert 'ray' not in sys.modules\n"],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert helped.returncode == 0, helped.stderr[-2000:]
    assert "--launcher {local,ray}" in helped.stdout and "--ray-address" in helped.stdout
