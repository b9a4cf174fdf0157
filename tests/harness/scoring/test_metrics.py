"""Tests of the offline GLUE metrics (metrics.py)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import stats
from sklearn import metrics as skm

from pals_adapters.harness.scoring.metrics import compute_metrics, glue_average, task_score
from pals_adapters.harness.tasks.glue import GLUE_TASKS
from pals_adapters.harness.tasks.user_tasks import custom_task

CLASSIFICATION = ["cola", "sst2", "mrpc", "qqp", "mnli", "qnli", "rte", "wnli"]


def reference_metrics(name: str, preds: np.ndarray, refs: np.ndarray) -> dict[str, float]:
    """What sklearn / scipy say directly."""
    table = {
        "accuracy": lambda: skm.accuracy_score(refs, preds),
        "f1": lambda: skm.f1_score(refs, preds),
        "matthews": lambda: skm.matthews_corrcoef(refs, preds),
        "pearson": lambda: stats.pearsonr(preds, refs)[0],
        "spearman": lambda: stats.spearmanr(preds, refs)[0],
    }
    return {m: float(table[m]()) for m in GLUE_TASKS[name].metrics}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("name", CLASSIFICATION)
@pytest.mark.parametrize("as_logits", [False, True], ids=["indices", "logits"])
def test_classification_matches_sklearn(name, seed, as_logits):
    rng = np.random.default_rng(seed)
    k = GLUE_TASKS[name].num_labels
    refs = rng.integers(0, k, size=97)
    logits = rng.normal(size=(97, k))
    preds = logits.argmax(axis=1)
    got = compute_metrics(name, logits if as_logits else preds.tolist(), refs)
    assert set(got) == set(GLUE_TASKS[name].metrics)
    assert got == pytest.approx(reference_metrics(name, preds, refs), abs=1e-12)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("shape", ["flat", "column"])
def test_regression_matches_scipy(seed, shape):
    rng = np.random.default_rng(seed)
    refs = rng.uniform(0, 5, size=64)
    preds = refs + rng.normal(scale=1.5, size=64)
    got = compute_metrics("stsb", preds[:, None] if shape == "column" else preds, refs)
    assert got == pytest.approx(reference_metrics("stsb", preds, refs), abs=1e-12)


@pytest.mark.parametrize(
    "name, preds, refs, expected",
    [
        ("cola", [1, 1, 1, 1], [0, 1, 0, 1], {"matthews": 0.0}),
        ("cola", [0, 0, 0], [0, 0, 0], {"matthews": 0.0}),
        ("cola", [0, 1, 0, 1], [0, 1, 0, 1], {"matthews": 1.0}),
        ("cola", [1, 0, 1, 0], [0, 1, 0, 1], {"matthews": -1.0}),
        ("mrpc", [0, 0, 0, 0], [0, 1, 0, 1], {"accuracy": 0.5, "f1": 0.0}),
        ("mrpc", [1, 1, 0, 0], [1, 0, 0, 0], {"accuracy": 0.75, "f1": 2 / 3}),
        ("stsb", [2.0, 2.0, 2.0], [1.0, 2.0, 3.0], {"pearson": 0.0, "spearman": 0.0}),
        ("stsb", [1.0, 2.0, 3.0], [4.0, 4.0, 4.0], {"pearson": 0.0, "spearman": 0.0}),
        ("stsb", [1.0, 2.0, 3.0], [2.0, 4.0, 6.0], {"pearson": 1.0, "spearman": 1.0}),
        ("stsb", [1.0, 2.0, 30.0], [3.0, 2.0, 1.0], {"pearson": -0.880812271884641, "spearman": -1.0}),
    ],
)
def test_edge_cases_without_warnings(name, preds, refs, expected):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = compute_metrics(name, preds, refs)
    assert got == pytest.approx(expected, abs=1e-9)
    assert all(isinstance(v, float) for v in got.values())


def test_f1_uses_label_index_one():
    spec = custom_task("pn", train="unused.csv", labels=["neg", "pos"], metrics=["f1"])
    assert compute_metrics(spec, [1, 1, 1, 0], [1, 1, 0, 0]) == {"f1": pytest.approx(0.8)}


def test_accepts_torch_tensors():
    torch = pytest.importorskip("torch")
    logits = torch.tensor([[0.1, 0.9], [2.0, -1.0]])
    assert compute_metrics("sst2", logits, torch.tensor([1, 0])) == {"accuracy": 1.0}


@pytest.mark.parametrize(
    "name, preds, refs, fragment",
    [
        ("sst2", [0, 1, 1], [0, 1], "3 rows but references have 2"),
        ("sst2", np.zeros((3, 2)), [0, 1], "3 rows but references have 2"),
        ("stsb", [0.5, 1.0], [0.5, 1.0, 2.0], "2 rows but references have 3"),
        ("mnli", np.zeros((2, 2)), [0, 1], "2 columns but the task has 3 labels"),
        ("sst2", np.zeros((2, 2, 2)), [0, 1], "shape"),
        ("sst2", [0.5, 1.0], [0, 1], "integer class indices"),
        ("sst2", [0, 2], [0, 1], "0..1"),
        ("sst2", [0, 1], [-1, -1], "unlabelled"),
        ("sst2", [0, 1], [[0], [1]], "1-D"),
        ("sst2", [], [], "empty"),
        ("stsb", [0.5, float("nan")], [0.5, 1.0], "finite"),
        ("stsb", np.zeros((2, 2)), [0.5, 1.0], "(n, 1)"),
    ],
)
def test_bad_shapes_raise_value_error(name, preds, refs, fragment):
    with pytest.raises(ValueError) as info:
        compute_metrics(name, preds, refs)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    "name, values, expected",
    [
        ("cola", {"matthews": 0.5}, 0.5),
        ("mrpc", {"accuracy": 0.8, "f1": 0.9, "extra": 0.0}, 0.85),
        ("stsb", {"pearson": 0.8, "spearman": 0.7}, 0.75),
        ("mnli", {"accuracy": 0.6}, 0.6),
    ],
)
def test_task_score(name, values, expected):
    assert task_score(name, values) == pytest.approx(expected)


def test_task_score_missing_metric():
    with pytest.raises(ValueError, match="f1"):
        task_score("mrpc", {"accuracy": 0.8})


@pytest.mark.parametrize(
    "scores, expected",
    [
        ({"cola": 0.5, "sst2": 0.9}, 0.7),
        ({"rte": 0.6}, 0.6),
        ([0.1, 0.2, 0.3], 0.2),
    ],
)
def test_glue_average(scores, expected):
    assert glue_average(scores) == pytest.approx(expected)


@pytest.mark.parametrize("scores", [{}, {"cola": float("nan")}])
def test_glue_average_rejects(scores):
    with pytest.raises(ValueError):
        glue_average(scores)


def test_end_to_end_score():
    refs = [0, 1, 1, 0]
    metrics = compute_metrics("mrpc", np.array([[2.0, 0.0], [0.0, 1.0], [1.0, 0.0], [3.0, 1.0]]), refs)
    assert metrics == pytest.approx({"accuracy": 0.75, "f1": 2 / 3})
    assert glue_average({"mrpc": task_score("mrpc", metrics)}) == pytest.approx((0.75 + 2 / 3) / 2)


@pytest.mark.parametrize("task", ["cola", "sst2", "mrpc", "stsb", "rte"])
def test_the_evaluate_module_computes_the_same_metrics(task):
    from pals_adapters.harness.scoring.evaluate_metric import task_metric

    spec = GLUE_TASKS[task]
    rng = np.random.default_rng(0)
    if spec.is_regression:
        refs, preds = rng.uniform(0, 5, 50), rng.uniform(0, 5, 50)
    else:
        refs, preds = rng.integers(0, 2, 50), rng.integers(0, 2, 50)
    metric = task_metric(task.upper() if task != "stsb" else "STS-B")
    for start in range(0, 50, 20):  # evaluate's incremental API
        metric.add_batch(predictions=preds[start : start + 20], references=refs[start : start + 20])
    got = metric.compute()
    expected = compute_metrics(spec, preds, refs)
    assert got.keys() == expected.keys()
    for key in expected:
        assert got[key] == pytest.approx(expected[key], abs=1e-12)


def test_class_report_counts_by_hand_and_names_a_class_never_predicted():
    from pals_adapters.harness.scoring.metrics import class_report

    stars = custom_task("stars", train="t.csv", labels=["1", "2", "3"])
    refs = [0, 0, 1, 1, 2, 2]
    preds = [0, 0, 0, 1, 0, 1]  # class "3" is never predicted
    report = class_report(stars, np.eye(3)[preds], refs)  # logits: argmax is preds
    assert report["confusion"] == [[2, 0, 0], [1, 1, 0], [1, 1, 0]]
    assert report["support"] == [2, 2, 2] and report["predicted"] == [4, 2, 0]
    assert report["precision"] == [0.5, 0.5, 0.0] and report["recall"] == [1.0, 0.5, 0.0]
    assert report["f1"] == pytest.approx([2 / 3, 0.5, 0.0])
    assert report["never_predicted"] == ["3"] and report["labels"] == ["1", "2", "3"]
    with pytest.raises(ValueError, match="regression"):
        class_report("stsb", [0.5], [1.0])


def test_class_table_puts_the_confusion_matrix_beside_the_per_class_scores():
    from pals_adapters.harness.scoring.metrics import class_report
    from pals_adapters.harness.scoring.report import class_table, never_predicted

    report = class_report("rte", [0, 0, 0], [0, 1, 1])
    lines = class_table("rte", "validation", report).splitlines()
    assert lines[1] == "| class | precision | recall | F1 | rows | predicted | → entailment | → not_entailment |"
    assert lines[3:] == [
        "| entailment | 33.3 | 100.0 | 50.0 | 1 | 3 | 1 | 0 |",
        "| not_entailment | 0.0 | 0.0 | 0.0 | 2 | 0 | 2 | 0 |",
    ]
    assert never_predicted({"rte": {"validation": report}}) == [
        "rte validation: class 'not_entailment' is never predicted (0 of 3 predictions; 2 rows have it)"
    ]
