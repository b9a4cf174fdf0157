"""How uncertain a trained model is on each task's training rows, as MT-Uncertainty sampling scores them.

MT-Uncertainty (CA-MTL; `pals_adapters.harness.data.uncertainty`) trains on the candidates whose
normalised entropy ``H(softmax(logits)) / log C``, weighted by their task's mean over the most
uncertain task's mean, is highest. When a run's task mix locks onto one task, this script says why:
it scores a seeded sample of every classification task's rows with an exported model (a run's export
folder, or the one `pals-bench export RUN --checkpoint RUN/checkpoint-N --out DIR` writes) and prints,
per task, the mean and least normalised entropy, the task weight ``m_t / max_k m_k``, the mean
probability of the predicted label and how often each label is predicted. A regression task has no
entropy and is left out, as the sampler leaves it out of the ranking.

    python benchmarks/task_uncertainty.py DIR --glue-dir ../shared/glue [--split train --rows 128 --seed 0]

With ``--name NAME`` it also writes benchmarks/results/NAME.{json,md} (``--out-dir`` elsewhere).
"""

import argparse
import sys
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import command_line, machine_info, markdown_table, write_results  # noqa: E402

from pals_adapters.harness.data.uncertainty import normalised_entropy  # noqa: E402
from pals_adapters.harness.serving.predictor import MultiTaskPredictor  # noqa: E402
from pals_adapters.harness.tasks.splits import load_split  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("export", help="an export folder: a run's, or one task's")
    parser.add_argument(
        "--glue-dir", default=None, help="GLUE folder (default: env GLUE_DIR; user tasks read their own files)"
    )
    parser.add_argument(
        "--split", default="train", help="the split whose rows are scored (the sampler draws from train)"
    )
    parser.add_argument("--rows", type=int, default=128, help="rows scored per task (a seeded sample; all when fewer)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--name", default=None, help="also write NAME.{json,md} into --out-dir")
    parser.add_argument("--out-dir", default=str(Path(__file__).resolve().parent / "results"))
    args = parser.parse_args(argv)
    if args.rows < 1:
        parser.error(f"--rows must be at least 1, not {args.rows}")
    return args


def score_task(predictor, spec, split, rows, seed, glue_dir):
    """Normalised entropies and predicted labels of a seeded sample of one task's rows."""
    data = load_split(spec, split, glue_dir=glue_dir)
    sample = data.shuffle(seed=seed).select(range(min(rows, len(data))))
    requests = [
        {"task": spec.name, "text": row["text_a"], **({"text_b": row["text_b"]} if spec.is_pair else {})}
        for row in sample
    ]
    answers = predictor.predict(requests)
    logits = torch.tensor([answer.logits for answer in answers])
    entropy = normalised_entropy(logits, len(spec.labels))
    return {
        "rows": len(answers),
        "mean_entropy": entropy.mean().item(),
        "min_entropy": entropy.min().item(),
        "mean_top_probability": sum(answer.probability for answer in answers) / len(answers),
        "predicted": dict(Counter(answer.label for answer in answers)),
    }


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    predictor = MultiTaskPredictor.from_exports(args.export)
    specs = [spec for spec in predictor.model.tasks.values() if not spec.is_regression]
    if not specs:
        raise SystemExit(f"{args.export}: no classification task (a regression task has no entropy to score)")
    for spec in specs:
        if args.split not in spec.splits:
            raise SystemExit(f"task {spec.name!r} has no split {args.split!r}; it has {sorted(spec.splits)}")
    tasks = {spec.name: score_task(predictor, spec, args.split, args.rows, args.seed, args.glue_dir) for spec in specs}
    top = max(task["mean_entropy"] for task in tasks.values())
    for task in tasks.values():
        task["weight"] = task["mean_entropy"] / top if top > 0 else 1.0
    rows = [
        [
            name,
            task["rows"],
            f"{task['mean_entropy']:.3f}",
            f"{task['min_entropy']:.3f}",
            f"{task['weight']:.3f}",
            f"{task['mean_top_probability']:.3f}",
            ", ".join(f"{label}: {count}" for label, count in sorted(task["predicted"].items())),
        ]
        for name, task in tasks.items()
    ]
    header = [
        "task",
        "rows",
        "mean entropy",
        "least entropy",
        "weight m_t / max m",
        "mean top probability",
        "predicted",
    ]
    markdown = "\n\n".join(
        [
            f"Normalised entropy on a seeded sample of each task's {args.split!r} rows (seed {args.seed}), "
            f"model {args.export}:",
            markdown_table(header, rows),
            f"`{command_line()}`",
        ]
    )
    print(markdown)
    if args.name:
        data = {"command": command_line(), "machine": machine_info(), "settings": vars(args), "tasks": tasks}
        for path in write_results(args.name, data, markdown, args.out_dir):
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
