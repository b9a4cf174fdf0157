"""frozen_learning.py's ROC AUC of a run's export: the positive label's probability, the rows the run was
scored on, the cached figure reused, and the column in the report."""

import importlib.util
import json
import sys
from dataclasses import asdict

import pytest
from helpers import REPO, glue_dir

from pals_adapters.harness.serving.predictor import Prediction
from pals_adapters.harness.tasks.splits import load_split

GLUE = glue_dir()
pytestmark = pytest.mark.skipif(GLUE is None, reason="GLUE data not found: set GLUE_DIR or provide ../shared/glue")


def import_benchmark(name):
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakePredictor:
    """Answers each CoLA sentence with a probability of label 1 chosen by the test."""

    def __init__(self, probability_of_one):
        self.probability_of_one = probability_of_one
        self.asked = []

    def predict(self, requests):
        self.asked += [r["text"] for r in requests]
        return [Prediction("cola", "1", (0.0, 0.0), (1 - p, p)) for p in map(self.probability_of_one, requests)]


@pytest.fixture
def ranking(monkeypatch):
    monkeypatch.setattr(sys, "path", [str(REPO / "benchmarks"), *sys.path])
    return import_benchmark("_frozen_ranking")


def test_auc_ranks_the_first_dev_rows_by_the_probability_of_label_one_and_is_cached(ranking, tmp_path, monkeypatch):
    dev = load_split("cola", "validation", glue_dir=GLUE).select(range(40))
    labels = {row["text_a"]: row["label"] for row in dev}
    perfect = FakePredictor(lambda r: 0.9 if labels[r["text"]] == 1 else 0.2)
    monkeypatch.setattr(ranking.MultiTaskPredictor, "from_exports", lambda folder: perfect)
    assert ranking.dev_auc(tmp_path, "cola", str(GLUE), 40) == 1.0
    assert perfect.asked == list(dev["text_a"])  # the first 40 rows, in order
    backwards = FakePredictor(lambda r: 0.2 if labels[r["text"]] == 1 else 0.9)
    monkeypatch.setattr(ranking.MultiTaskPredictor, "from_exports", lambda folder: backwards)
    assert ranking.dev_auc(tmp_path, "cola", str(GLUE), 40) == 1.0  # cached: the export is not asked again
    assert backwards.asked == []
    (tmp_path / "auc.json").unlink()
    assert ranking.dev_auc(tmp_path, "cola", str(GLUE), 40) == 0.0


def test_auc_refuses_a_regression_task(ranking, tmp_path):
    with pytest.raises(ValueError, match="two-class"):
        ranking.dev_auc(tmp_path, "stsb", str(GLUE), 10)


def test_the_report_of_a_ranked_part_has_the_auc_column(ranking, tmp_path, monkeypatch):
    frozen = import_benchmark("frozen_learning")
    cache, out = tmp_path / "cache", tmp_path / "out"
    config = frozen.run_config("cola600", "pals", True, True, str(GLUE))
    assert config.export  # the AUC is computed from the run's export
    folder = cache / frozen.run_id("cola600", "pals")
    folder.mkdir(parents=True)
    metrics = {"cola_matthews": 0.0, "cola_score": 0.0, "average": 0.0}
    (folder / "results.json").write_text(
        json.dumps({"config": asdict(config), "metrics": metrics, "wall_seconds": 9.0})
    )
    (folder / "auc.json").write_text(json.dumps({"auc": 0.5625, "examples": 500}))
    frozen.main(
        ["--report-only", "--parts", "cola600", "--glue-dir", str(GLUE), "--cache", str(cache), "--out-dir", str(out)]
    )
    assert "| PALs | (no regression task) | lr / layers | 0.0 | 0.562 | 9 |" in (out / "frozen_learning.md").read_text()
    rows = json.loads((out / "frozen_learning.json").read_text())["parts"]["cola600"]["rows"]
    assert rows[0]["cola_auc"] == 0.5625
