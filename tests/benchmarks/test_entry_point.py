"""`python -m benchmarks`: one entry point that finds every suite; suites that import nothing of each other
and do nothing on import."""

import ast
import importlib
import subprocess
import sys

import pytest
from helpers import REPO

from benchmarks.__main__ import main as benchmarks
from benchmarks.__main__ import suite_names

BENCHMARKS = REPO / "benchmarks"
# the suites, common/ and the entry point (a script left at the top level is no suite: it is not run here)
CODE = sorted(
    p
    for p in BENCHMARKS.rglob("*.py")
    if "results" not in p.parts and (p.parent != BENCHMARKS or p.stem.startswith("__"))
)


def test_every_folder_with_a_suite_py_is_listed_with_its_description():
    done = subprocess.run([sys.executable, "-m", "benchmarks", "list"], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    listed = dict(line.split(None, 1) for line in done.stdout.splitlines())
    assert set(listed) == {p.parent.name for p in BENCHMARKS.glob("*/suite.py")}
    assert {"params", "speed", "serving", "scaling", "main_job"} <= set(listed)
    assert all(text.strip() for text in listed.values())


def test_an_unknown_suite_is_refused_with_the_names_to_choose_from(capsys):
    with pytest.raises(SystemExit, match="unknown suite 'sped'; choose one of .*speed"):
        benchmarks(["run", "sped"])


@pytest.mark.parametrize("name", suite_names())
def test_a_suite_imports_without_side_effects_and_has_description_and_main(name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    before = {p: p.stat().st_mtime_ns for p in (BENCHMARKS / "results").rglob("*") if p.is_file()}
    suite = importlib.import_module(f"benchmarks.{name}.suite")
    assert callable(suite.main) and isinstance(suite.DESCRIPTION, str) and suite.DESCRIPTION
    assert capsys.readouterr().out == ""
    assert not any(tmp_path.iterdir())
    assert {p: p.stat().st_mtime_ns for p in (BENCHMARKS / "results").rglob("*") if p.is_file()} == before


def _imported_modules(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            yield ("." * node.level) + (node.module or "")


@pytest.mark.parametrize("path", CODE, ids=lambda p: str(p.relative_to(BENCHMARKS)))
def test_suites_share_code_through_common_only_and_never_edit_sys_path(path):
    text = path.read_text()
    assert "sys.path" not in text and "noqa: E402" not in text
    folder = path.relative_to(BENCHMARKS).parts[0]
    for module in _imported_modules(path):
        if module.startswith("benchmarks."):
            other = module.split(".")[1]
            assert other in ("common", folder), f"{path.name} imports {module}: shared code goes to benchmarks.common"
