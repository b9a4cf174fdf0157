"""How well a classifier ranks the dev examples (ROC AUC), for frozen_learning.py's short CoLA runs.

Matthews correlation is 0.0 for every model that predicts one class, however much it has learnt; after a few
hundred frozen-base steps on CoLA most rows do. The area under the ROC curve of the positive class's
probability still tells a model that ranks the sentences better than chance (0.5) from one that does not.
"""

import json
from pathlib import Path

from sklearn.metrics import roc_auc_score

from pals_adapters.harness.serving.predictor import MultiTaskPredictor
from pals_adapters.harness.tasks.glue import get_task
from pals_adapters.harness.tasks.splits import load_split


def dev_auc(run_folder: Path, task: str, glue_dir: str, examples: int) -> float:
    """ROC AUC of the run's export on the first ``examples`` dev rows (the rows the run was scored on);
    cached in the run folder as ``auc.json``."""
    cached = run_folder / "auc.json"
    if cached.exists():
        return json.loads(cached.read_text())["auc"]
    spec = get_task(task)
    if spec.is_regression or spec.num_labels != 2:
        raise ValueError(f"dev_auc needs a two-class task, not {task!r}")
    dev = load_split(spec, "validation", glue_dir=glue_dir)
    dev = dev.select(range(min(examples, len(dev))))
    predictor = MultiTaskPredictor.from_exports(run_folder / "export")
    requests = [
        {"task": task, "text": row["text_a"], **({"text_b": row["text_b"]} if row["text_b"] else {})} for row in dev
    ]
    positive = [answer.probabilities[1] for answer in predictor.predict(requests)]
    auc = float(roc_auc_score(dev["label"], positive))
    cached.write_text(json.dumps({"auc": auc, "examples": len(dev)}))
    return auc
