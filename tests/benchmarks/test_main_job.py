"""The main_job suite: `pals-bench train` with the committed main_job.yaml, whose options win over the file's."""

import json

import pytest
import yaml
from helpers import glue_dir

from benchmarks.__main__ import main as benchmarks
from benchmarks.main_job.suite import CONFIG
from pals_adapters.harness import RunConfig


def test_the_committed_settings_are_a_valid_run_of_the_five_tasks():
    settings = yaml.safe_load(CONFIG.read_text())
    config = RunConfig(**settings)
    config.validate()
    assert config.tasks == ["cola", "sst2", "mrpc", "stsb", "rte"] and config.method == "pals"


@pytest.mark.slow
@pytest.mark.skipif(glue_dir() is None, reason="needs the shared GLUE folder")
def test_main_job_trains_its_five_tasks_with_the_options_given(tmp_path, tiny_model_dir, capsys):
    out = tmp_path / "run"
    argv = ["--model", str(tiny_model_dir), "--glue-dir", str(glue_dir()), "--output-dir", str(out)]
    argv += ["--max-steps", "5", "--max-train-examples", "16", "--max-eval-examples", "8", "--max-length", "32"]
    assert benchmarks(["run", "main_job", *argv, "--no-export", "--threads", "1"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["config"]["max_steps"] == 5  # the option won over the file's 2,700
    assert results["config"]["standardise_targets"] is True  # the file's own setting
    assert {f"{task}_score" for task in ("cola", "sst2", "mrpc", "stsb", "rte")} <= results["metrics"].keys()
    assert "wall time to the table" in capsys.readouterr().out
