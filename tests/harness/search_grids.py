"""A tiny task the tiny model learns in a few steps at a large learning rate and not at all at a small one
(``signal``: a sentence ending in yes or no, the label says which), and grid files that search over it: what
the search tests share."""

import random

import yaml

ROWS = 60, 20  # training and dev rows


def write_signal_task(folder, dev_labels=None):
    """``tasks.yaml`` and ``signal/{train,dev}.csv`` (each row with its own id); ``dev_labels``: the dev
    labels written instead of the true ones (e.g. scrambled)."""
    rng = random.Random(0)
    words = ["red", "blue", "green", "tall", "small", "old", "new", "warm"]
    (folder / "signal").mkdir(parents=True, exist_ok=True)
    for split, n in zip(("train", "dev"), ROWS):
        lines = ["id,text,label"]
        for i in range(n):
            label = i % 2
            text = " ".join(rng.choice(words) for _ in range(3)) + (" yes" if label else " no")
            if split == "dev" and dev_labels is not None:
                label = dev_labels[i]
            lines.append(f"{split}-{i},{text},{label}")
        (folder / "signal" / f"{split}.csv").write_text("\n".join(lines) + "\n")
    (folder / "tasks.yaml").write_text(
        "tasks:\n  - name: signal\n    train: signal/train.csv\n    validation: signal/dev.csv\n"
        "    text_columns: [text]\n    label_column: label\n    id_column: id\n"
    )
    return folder / "tasks.yaml"


def write_search_grid(folder, model_dir, rows: str, **shared):
    """A grid over ``signal`` whose default learning rate (1e-6) leaves the tiny model at the floor."""
    settings = dict(
        task_file="tasks.yaml",
        model=str(model_dir),
        max_steps=32,
        batch_size=8,
        max_length=16,
        lr=1e-6,
        logging_steps=8,
        threads=1,
        export=False,
        seeds=[1, 2],
    )
    settings.update(shared)
    path = folder / "grid.yaml"
    path.write_text(yaml.safe_dump(settings, default_flow_style=None, sort_keys=False) + rows)
    return path
