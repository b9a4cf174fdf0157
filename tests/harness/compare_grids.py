"""A user's own tasks (a CSV classification task, a JSONL regression task) and grid files for them:
what the compare tests share."""

import json
import random


def write_user_tasks(folder):
    """``tasks.yaml`` and its files: ``mood`` (CSV, two classes) and ``closeness`` (JSONL, a score 0-5)."""
    rng = random.Random(0)
    words = ["good", "bad", "fine", "awful", "great", "poor", "nice", "dull"]
    (folder / "mood").mkdir(parents=True)
    (folder / "closeness").mkdir()
    for split, n in (("train", 24), ("dev", 16)):
        lines = ["text,label"]
        for _ in range(n):
            text = " ".join(rng.choice(words) for _ in range(5))
            lines.append(f"{text},{int(text.count('good') + text.count('great') > 1)}")
        (folder / "mood" / f"{split}.csv").write_text("\n".join(lines) + "\n")
        with open(folder / "closeness" / f"{split}.jsonl", "w") as out:
            for _ in range(n):
                a, b = (" ".join(rng.choice(words) for _ in range(4)) for _ in range(2))
                score = round(5 * len(set(a.split()) & set(b.split())) / 4, 2)
                out.write(json.dumps({"first": a, "second": b, "score": min(score, 5.0)}) + "\n")
    (folder / "tasks.yaml").write_text(
        """tasks:
  - name: mood
    train: mood/train.csv
    validation: mood/dev.csv
    text_columns: [text]
    label_column: label
  - name: closeness
    type: regression
    train: closeness/train.jsonl
    validation: closeness/dev.jsonl
    text_columns: [first, second]
    label_column: score
    label_range: [0, 5]
"""
    )
    return folder / "tasks.yaml"


GRID_ROWS = """
rows:
  - name: PALs
    method: pals
  - name: PALs, frozen base
    method: pals
    base: frozen
  - name: Houlsby
    method: houlsby
  - name: LoRA, frozen base
    method: lora
    base: frozen
  - name: full fine-tuning
    method: shared
  - name: separate models
    method: separate
    seeds: [1]
"""


def write_grid(folder, model_dir, rows=GRID_ROWS, **shared):
    """A grid file beside the tasks: a tiny model, a few steps, one thread per run (the same scores in any
    number of processes)."""
    settings = dict(
        task_file="tasks.yaml",
        model=str(model_dir),
        max_steps=4,
        batch_size=8,
        max_length=24,
        lr=1e-3,
        logging_steps=2,
        threads=1,
        export=False,
        seeds=[1, 2],
        reference="PALs",
    )
    settings.update(shared)
    path = folder / "grid.yaml"
    path.write_text("\n".join(f"{k}: {json.dumps(v)}" for k, v in settings.items()) + "\n" + rows)
    return path
