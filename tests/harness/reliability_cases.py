"""What the reliability tables (tests/harness/reliability/cases_*.py) build on: a user's tasks, a run and its
folder, exports of a tiny model, and a check that a refusal left a file or folder as it was."""

import hashlib
import json
from pathlib import Path

import adapters
import torch
from helpers import fake_checkpoint, tiny_bert_config
from transformers import AutoModel, AutoTokenizer, BertModel

from pals_adapters.harness.cli import main
from pals_adapters.harness.export import export_run, export_task
from pals_adapters.harness.export.manifest import MANIFEST
from pals_adapters.harness.methods.model import MultiTaskModel
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.harness.tasks.glue import GLUE_TASKS
from pals_adapters.harness.tasks.user_tasks import load_task_specs
from pals_adapters.harness.training import runner
from pals_adapters.harness.training.run_folder import write_record

# "model": a tiny BERT folder with a real tokenizer (128 positions); the table's test sets it.
TINY = {}

ROWS = "\n".join(f"review {i},{'pos' if i % 2 else 'neg'}" for i in range(16))


def user_tasks(tmp: Path, names=("a", "a_b"), labels="[neg, pos]") -> Path:
    """A task file with one CSV task per name (same files), in ``tmp``."""
    for split in ("train", "dev"):
        (tmp / f"{split}.csv").write_text("text,label\n" + ROWS + "\n")
    entries = "".join(
        f"  - name: {name}\n    train: train.csv\n    validation: dev.csv\n    text_columns: [text]\n"
        f"    labels: {labels}\n"
        for name in names
    )
    (tmp / "tasks.yaml").write_text("tasks:\n" + entries)
    return tmp / "tasks.yaml"


def user_run(tmp: Path, **changes) -> runner.RunConfig:
    settings = dict(
        model=str(TINY["model"]),
        task_file=str(user_tasks(tmp)),
        method="pals",
        base="frozen",
        sampler="round_robin",
        max_steps=8,
        save_steps=4,
        batch_size=4,
        max_length=32,
        logging_steps=4,
        eval_batch_size=8,
        output_dir=str(tmp / "run"),
        export=False,
    )
    return runner.RunConfig(**{**settings, **changes})


def run_folder_with_checkpoint(tmp: Path) -> runner.RunConfig:
    """The folder of a run interrupted after step 4: its record and a checkpoint that loads."""
    config = user_run(tmp)
    write_record(Path(config.output_dir), config, config.validate())
    fake_checkpoint(Path(config.output_dir) / "checkpoint-4")
    return config


def cli_train(*argv, model=False):
    def action(tmp):
        extra = ["--model", str(TINY["model"])] if model else []
        return main(["train", "--output-dir", str(tmp / "run"), *extra, *argv])

    return action


def user_task_export(tmp: Path) -> Path:
    """Task "mine" (labels neg, pos) trained on a frozen tiny base, exported with its tokenizer."""
    spec = load_task_specs(user_tasks(tmp, names=["mine"]))[0]
    model = MultiTaskModel(AutoModel.from_pretrained(TINY["model"]), {"mine": spec}, get_method("pals"), "frozen")
    tokenizer = AutoTokenizer.from_pretrained(TINY["model"])
    return export_task(
        model, "mine", tmp / "export", base_model_name=str(TINY["model"]), tokenizer=tokenizer, max_length=32
    )


def finetuned_export(tmp: Path) -> Path:
    torch.manual_seed(0)
    model = MultiTaskModel(BertModel(tiny_bert_config()), {"rte": GLUE_TASKS["rte"]}, get_method("pals"), "finetune")
    export_run(model, tmp / "export", base_model_name="tiny-bert")
    return tmp / "export"


def rehash(folder: Path, name: str) -> None:
    """Updates a manifest for an edited file, as a careless (or clever) user would."""
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["files"][name] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    (folder / MANIFEST).write_text(json.dumps(manifest))


SERVED = ("rte", "cola", "stsb")  # pair, single-text and regression tasks


def served_export(tmp: Path, method="pals", base="finetune", model_dir=None, tasks=SERVED) -> Path:
    """An export of an (untrained) tiny model, as a run writes it: base, tokenizer and max length 32."""
    model_dir = model_dir or TINY["model"]
    specs = {name: GLUE_TASKS[name] for name in tasks}
    model = MultiTaskModel(AutoModel.from_pretrained(model_dir), specs, get_method(method), base)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    export_run(model, tmp / "export", base_model_name=str(model_dir), tokenizer=tokenizer, max_length=32)
    return tmp / "export"


def unchanged(path: Path, action):
    """Runs ``action`` and checks that ``path`` (a file, or a folder's files) is as it was before."""

    def contents():
        if path.is_dir():
            return {p: p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}
        return path.read_bytes() if path.exists() else None

    before = contents()
    try:
        return action()
    finally:
        assert contents() == before, f"{path} was written over"


RTE = {"task": "rte", "text": "A man sleeps.", "text_b": "Nobody sleeps."}

COLA = {"task": "cola", "text": "The book was read."}


def predict_export(*argv, export=served_export):
    def action(tmp):
        folder = export(tmp)
        return unchanged(tmp, lambda: main(["predict", str(folder), "--out", str(tmp / "pred"), *argv]))

    return action


def evaluate_with(*argv):
    def action(tmp):
        folder = user_task_export(tmp)
        (tmp / "report").mkdir(exist_ok=True)
        return main(["evaluate", str(folder), *[a.replace("TMP", str(tmp)) for a in argv]])

    return action


def wrapped_bert(**kw):
    model = BertModel(tiny_bert_config(**kw))
    adapters.init(model)
    return model.eval()
