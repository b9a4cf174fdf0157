"""The code follows the project's ruff settings (pyproject.toml): lint rules and formatting."""

import shutil
import subprocess
import sys

import pytest
from helpers import REPO


@pytest.mark.parametrize("command", [["check", "."], ["format", "--check", "."]])
def test_ruff_is_clean(command):
    if (
        shutil.which("ruff") is None
        and subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True).returncode
    ):
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")
    out = subprocess.run([sys.executable, "-m", "ruff", *command], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
