"""The table of docs/compare.md is what `compare --report-only` makes of the committed runs it shows."""

import json
import shutil

import pytest
from helpers import REPO, glue_dir

from pals_adapters.harness import compare

GRID = REPO / "benchmarks" / "quality" / "grids" / "minilm_three_tasks.yaml"
RESULTS = REPO / "benchmarks" / "results" / "quality" / "minilm_three_tasks"


def test_the_committed_example_report_is_compares_report_of_its_runs(tmp_path):
    if glue_dir() is None:
        pytest.skip("needs the GLUE folder (the floor and the task checks read it)")
    out = tmp_path / "example"
    shutil.copytree(RESULTS, out)
    before = {p: p.read_bytes() for p in (out / "runs").rglob("*") if p.is_file()}
    now = compare(GRID, out, overrides={"glue_dir": str(glue_dir())}, report_only=True)
    committed = json.loads((RESULTS / "comparison.json").read_text())
    for key in ("tasks", "reference", "rows", "paired", "floor"):
        assert now[key] == committed[key], key
    assert not now["missing"] and {p: p.read_bytes() for p in (out / "runs").rglob("*") if p.is_file()} == before
    table = (RESULTS / "comparison.md").read_text()
    assert table.split("\n", 1)[1] == (out / "comparison.md").read_text().split("\n", 1)[1]  # all but the command
    page = (REPO / "docs" / "compare.md").read_text()
    assert '--8<-- "benchmarks/results/quality/minilm_three_tasks/comparison.md"' in page
