"""The start-up suite: every help of ``pals-bench`` leaves torch and the other heavy libraries to the verbs, and
the suite writes the times it measured."""

import json

from benchmarks.__main__ import main as benchmarks
from benchmarks.startup import suite


def test_a_verb_that_runs_imports_what_it_needs(tiny_model_dir):  # so the suite's check sees what a process imports
    imported = suite.heavy_imports(["params", "--model", str(tiny_model_dir), "--methods", "pals", "--n-tasks", "2"])
    assert {"torch", "adapters"} <= set(imported)


def test_no_help_imports_a_heavy_library_and_the_suite_writes_every_time(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(suite, "IMPORTS", {"import pals_adapters": "import pals_adapters"})  # the fast row only
    benchmarks(["run", "startup", "--repeats", "1", "--out-dir", str(tmp_path)])  # its verdict is a timing: not ours
    data = json.loads((tmp_path / "startup.json").read_text())
    assert set(data["median"]) == {*suite.help_arguments(), "import pals_adapters"}
    assert all(value > 0 for value in data["median"].values())
    assert data["heavy_imports"] == {name: [] for name in suite.help_arguments()}
    assert "pals-bench train --help" in (tmp_path / "startup.md").read_text()
    assert "pals-bench compare --help" in capsys.readouterr().out
