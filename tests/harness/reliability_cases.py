"""Situations for the bad-input table of test_reliability (issue 9): a user's tasks, a run folder with
its record and checkpoints, exports of a tiny model, damaged in the ways users damage them. Each
builder returns an action that takes the test's tmp folder and must end in a refusal."""

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

import torch
from filelock import FileLock
from helpers import fake_checkpoint, tiny_bert_config
from transformers import AutoModel, AutoTokenizer, BertModel

from pals_adapters.errors import ConfigError
from pals_adapters.harness.cli import main
from pals_adapters.harness.export import export_run, export_task, load_task
from pals_adapters.harness.export.manifest import MANIFEST
from pals_adapters.harness.methods.model import MultiTaskModel
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.harness.tasks.glue import GLUE_TASKS
from pals_adapters.harness.tasks.user_tasks import load_task_specs
from pals_adapters.harness.training import runner
from pals_adapters.harness.training.run_folder import LOCK_FILE, write_record

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


def resumed_with(edit=None, **change):
    """Resumes the interrupted run with other settings (or after ``edit(tmp)``); the record must stay as it was."""

    def action(tmp):
        config = run_folder_with_checkpoint(tmp)
        if edit is not None:
            edit(tmp)
        record = Path(config.output_dir) / "run_config.json"
        before = record.read_bytes()
        try:
            runner.run(dataclasses.replace(config, resume="last", **change))
        finally:
            assert record.read_bytes() == before, "the record of what the checkpoints are was overwritten"

    return action


def fresh_run_over_checkpoints(tmp):
    config = run_folder_with_checkpoint(tmp)
    runner.run(dataclasses.replace(config, seed=7))


def second_run_into_a_busy_folder(tmp):
    config = user_run(tmp)
    Path(config.output_dir).mkdir(parents=True)
    with FileLock(str(Path(config.output_dir) / LOCK_FILE)):  # the first run holds it
        runner.run(config)


def cli_train(*argv, model=False):
    def action(tmp):
        extra = ["--model", str(TINY["model"])] if model else []
        return main(["train", "--output-dir", str(tmp / "run"), *extra, *argv])

    return action


def task_named(name):
    """``train --task-file`` with a task of that name (refused before anything trains)."""

    def action(tmp):
        path = user_tasks(tmp, names=[json.dumps(name)])
        return main(["train", "--output-dir", str(tmp / "run"), "--task-file", str(path)])

    return action


def config_file(text):
    def action(tmp):
        (tmp / "run.yaml").write_text(text)
        return main(["train", "--config", str(tmp / "run.yaml"), "--output-dir", str(tmp / "run")])

    return action


# --- exports ------------------------------------------------------------------------------------


def user_task_export(tmp: Path) -> Path:
    """Task "mine" (labels neg, pos) trained on a frozen tiny base, exported with its tokenizer."""
    spec = load_task_specs(user_tasks(tmp, names=["mine"]))[0]
    model = MultiTaskModel(AutoModel.from_pretrained(TINY["model"]), {"mine": spec}, get_method("pals"), "frozen")
    tokenizer = AutoTokenizer.from_pretrained(TINY["model"])
    return export_task(
        model, "mine", tmp / "export", base_model_name=str(TINY["model"]), tokenizer=tokenizer, max_length=32
    )


def evaluate_with_reordered_labels(tmp):
    folder = user_task_export(tmp)
    user_tasks(tmp, names=["mine"], labels="[pos, neg]")
    return main(["evaluate", str(folder), "--task-file", str(tmp / "tasks.yaml")])


def evaluate_on_a_base_with_another_tokenizer(tmp):
    folder = user_task_export(tmp)
    other = Path(shutil.copytree(TINY["model"], tmp / "other-base"))
    config = json.loads((other / "tokenizer_config.json").read_text())
    (other / "tokenizer_config.json").write_text(json.dumps({**config, "padding_side": "left"}))
    return main(["evaluate", str(folder), "--base-model", str(other)])


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


def base_damaged(how):
    def action(tmp):
        out = finetuned_export(tmp)
        base = out / "base"
        if how == "manifest deleted":
            (base / MANIFEST).unlink()
        elif how == "manifest corrupted":
            (base / MANIFEST).write_text('{"contents": "base", "fingerp')
        else:
            config = json.loads((base / "config.json").read_text())
            (base / "config.json").write_text(json.dumps({**config, "hidden_act": "relu"}))
            if how == "config changed, manifest updated":
                rehash(base, "config.json")
        return load_task(out / "rte")

    return action


def frozen_base_with_changed_config(tmp):
    pretrained = tmp / "pretrained"
    BertModel(tiny_bert_config()).save_pretrained(pretrained)
    tasks = {"rte": GLUE_TASKS["rte"]}
    model = MultiTaskModel(AutoModel.from_pretrained(pretrained), tasks, get_method("pals"), "frozen")
    export_task(model, "rte", tmp / "export", base_model_name=str(pretrained))
    config = json.loads((pretrained / "config.json").read_text())
    (pretrained / "config.json").write_text(json.dumps({**config, "hidden_act": "relu"}))
    return load_task(tmp / "export" / "rte")


def ca_mtl_train(*argv, positions=None):
    """``train --tasks rte`` on the tiny model, or on a copy whose config has ``positions`` positions (the
    refusals expected come from validating the run, which reads only the model's config)."""

    def action(tmp):
        model = Path(TINY["model"])
        if positions is not None:
            model = tmp / "model"
            shutil.copytree(TINY["model"], model)
            config = json.loads((model / "config.json").read_text())
            (model / "config.json").write_text(json.dumps({**config, "max_position_embeddings": positions}))
        return main(["train", "--output-dir", str(tmp / "run"), "--model", str(model), "--tasks", "rte", *argv])

    return action


# --- serving and adding a task (issue 25) ---------------------------------------------------------

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


def predict_requests(*records, argv=(), out="answers.tsv"):
    """``predict --input`` of a JSONL file written by hand (records: objects, or lines as text); an answers
    file already at ``--out`` must stay as it was."""

    def action(tmp):
        export = served_export(tmp)
        lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
        (tmp / "requests.jsonl").write_text("\n".join(lines) + "\n")
        (tmp / out).write_text("old answers\n")
        argv_ = ["predict", str(export), "--input", str(tmp / "requests.jsonl"), "--out", str(tmp / out), *argv]
        return unchanged(tmp / out, lambda: main(argv_))

    return action


RTE = {"task": "rte", "text": "A man sleeps.", "text_b": "Nobody sleeps."}
COLA = {"task": "cola", "text": "The book was read."}


def predict_export(*argv, export=served_export):
    def action(tmp):
        folder = export(tmp)
        return unchanged(tmp, lambda: main(["predict", str(folder), "--out", str(tmp / "pred"), *argv]))

    return action


def user_export_with_test_ids(ids):
    """An export of user task "mine" whose test file has the given id column."""

    def build(tmp):
        user_tasks(tmp, names=["mine"])
        rows = "".join(f"{i},text {n}\n" for n, i in enumerate(ids))
        (tmp / "test.csv").write_text("id,text\n" + rows)
        tasks = (tmp / "tasks.yaml").read_text()
        (tmp / "tasks.yaml").write_text(tasks.replace("validation: dev.csv", "validation: dev.csv\n    test: test.csv"))
        spec = load_task_specs(tmp / "tasks.yaml")[0]
        model = MultiTaskModel(AutoModel.from_pretrained(TINY["model"]), {"mine": spec}, get_method("pals"), "frozen")
        tokenizer = AutoTokenizer.from_pretrained(TINY["model"])
        export_run(model, tmp / "export", base_model_name=str(TINY["model"]), tokenizer=tokenizer, max_length=32)
        return tmp / "export"

    return build


def predictor_with_batch_size(batch_size):
    def action(tmp):
        from pals_adapters.harness.serving.predictor import MultiTaskPredictor

        return MultiTaskPredictor.from_exports(served_export(tmp), batch_size=batch_size)

    return action


def add_to(*argv, export=served_export, where=None):
    """``train --tasks mrpc --add-to EXPORT`` (``where``: a sub-folder of the export instead) with more options;
    nothing may be trained or written, the export included."""

    def action(tmp):
        folder = export(tmp)
        target = folder / where if where else folder
        args = ["train", "--output-dir", str(tmp / "run"), "--add-to", str(target), "--max-steps", "2", *argv]
        if "--tasks" not in argv:
            args += ["--tasks", "mrpc"]
        try:
            return unchanged(folder, lambda: main(args))
        finally:
            assert not (tmp / "run").exists(), "the run's folder was created before the refusal"

    return action


def full_export(tmp):
    return served_export(tmp, method="full", tasks=("rte",))


def frozen_export_of_a_base_whose_tokenizer_changed(tmp):
    pretrained = Path(shutil.copytree(TINY["model"], tmp / "pretrained"))
    export = served_export(tmp, base="frozen", model_dir=pretrained, tasks=("rte",))
    config = json.loads((pretrained / "tokenizer_config.json").read_text())
    (pretrained / "tokenizer_config.json").write_text(json.dumps({**config, "padding_side": "left"}))
    return export


def another_model(tmp):
    return Path(shutil.copytree(TINY["model"], tmp / "another-model"))


def add_to_with_another_model(tmp):
    return add_to("--model", str(another_model(tmp)))(tmp)


def export_over_tasks_of_another_base(tmp):
    export = served_export(tmp, tasks=("cola",))
    torch.manual_seed(1)
    model = MultiTaskModel(BertModel(tiny_bert_config()), {"rte": GLUE_TASKS["rte"]}, get_method("pals"), "finetune")
    return unchanged(export, lambda: export_run(model, export, base_model_name="tiny-bert"))


def export_add_to_run_elsewhere(tmp):
    """``pals-bench export RUN --out NEW`` of an add-to run: its tasks need the base of the export it added to."""
    export = served_export(tmp)
    config = runner.RunConfig(tasks=["mrpc"], add_to=str(export), output_dir=str(tmp / "run"), max_length=32)
    write_record(tmp / "run", config, config.validate())
    try:
        return unchanged(export, lambda: main(["export", str(tmp / "run"), "--out", str(tmp / "elsewhere")]))
    finally:
        assert not (tmp / "elsewhere").exists()


SERVING_AND_ADD_TO = {
    "export-add-to-run-into-a-new-folder": (
        export_add_to_run_elsewhere,
        SystemExit,
        ["run added its tasks to the export", "leave out --out", "elsewhere"],
    ),
    "predict-request-task-as-a-list": (
        predict_requests({**RTE, "task": ["rte"]}),
        SystemExit,
        ["requests.jsonl, line 1", "'task' must name a task (a string), found list ['rte']"],
    ),
    "predict-request-task-as-an-object": (
        predict_requests(COLA, {**RTE, "task": {"name": "rte"}}),
        SystemExit,
        ["requests.jsonl, line 2", "'task' must name a task (a string), found dict"],
    ),
    "predict-request-id-as-a-list": (
        predict_requests({**COLA, "id": [1, 2]}),
        SystemExit,
        ["requests.jsonl, line 1", "'id' must be a string or a whole number, found list [1, 2]"],
    ),
    "predict-request-id-as-a-float": (
        predict_requests(COLA, {**COLA, "id": 1.5}),
        SystemExit,
        ["line 2", "'id' must be a string or a whole number, found float 1.5"],
    ),
    "predict-request-id-given-twice": (
        predict_requests({**COLA, "id": "a"}, {**RTE, "id": "a"}),
        SystemExit,
        ["line 2: id 'a' is also the id of", "line 1", "ids join the answers back to the requests"],
    ),
    "predict-request-numbered-as-a-given-id": (
        predict_requests({**COLA, "id": 1}, RTE),
        SystemExit,
        ["line 2: it has no id and is numbered 1 (its position)", "line 1 gives as its id"],
    ),
    "predict-request-pair-task-without-text_b": (
        predict_requests(COLA, {"task": "rte", "text": "only one"}),
        SystemExit,
        ["line 2", "task 'rte' needs 'text' and 'text_b' as non-empty strings; 'text_b' is missing"],
    ),
    "predict-request-text_b-for-a-single-text-task": (
        predict_requests({**COLA, "text_b": "a second text"}),
        SystemExit,
        ["line 1", "task 'cola' takes one text", "check the task name"],
    ),
    "predict-request-broken-json-line": (
        predict_requests(COLA, '{"task": "cola", "text": '),
        SystemExit,
        ["requests.jsonl, line 2", "invalid JSON"],
    ),
    "predict-request-max-length-beyond-positions": (
        predict_requests(COLA, argv=["--max-length", "129"]),
        SystemExit,
        ["--max-length 129: give 1 to 128 (the base's positions)"],
    ),
    "predict-request-max-length-negative": (
        predict_requests(COLA, argv=["--max-length", "-5"]),
        SystemExit,
        ["--max-length -5: give 1 to 128"],
    ),
    "predict-request-max-length-zero": (
        predict_requests(COLA, argv=["--max-length", "0"]),
        SystemExit,
        ["--max-length 0: give"],
    ),
    "predict-answers-file-of-unknown-format": (
        predict_requests(COLA, out="answers.txt"),
        SystemExit,
        ["answers.txt: name the answers file .tsv, .csv or .jsonl"],
    ),
    "predict-answers-name-and-format-disagree": (
        predict_requests(COLA, out="answers.csv", argv=["--format", "jsonl"]),
        SystemExit,
        ["answers.csv: the name says csv, --format says jsonl"],
    ),
    "predict-split-with-input": (
        predict_requests(COLA, argv=["--split", "validation"]),
        SystemExit,
        ["--split chooses the tasks' own files", "leave it out"],
    ),
    "predict-export-max-length-beyond-positions": (
        predict_export("--max-length", "129"),
        SystemExit,
        ["--max-length 129: give 1 to 128"],
    ),
    "predict-export-without-a-test-file": (
        predict_export(export=lambda tmp: user_task_export(tmp).parent),
        SystemExit,
        ["no task has a test file to predict (tasks ['mine'])", "add 'test: FILE'", "--split"],
    ),
    "predict-export-test-file-with-an-id-twice": (
        predict_export(export=user_export_with_test_ids(["x", "y", "x"])),
        SystemExit,
        ["test.csv, line 4: id 'x' is also the id of", "test.csv, line 2", "back to the rows"],
    ),
    "predictor-batch-size-minus-one": (
        predictor_with_batch_size(-1),
        ConfigError,
        ["batch_size=-1: give a whole number >= 1"],
    ),
    "predictor-batch-size-a-fraction": (predictor_with_batch_size(2.5), ConfigError, ["batch_size=2.5"]),
    "add-to-a-task-folder": (
        add_to(where="rte"),
        SystemExit,
        ["export/rte is one task's folder, not an export", "give the run's export folder that holds it"],
    ),
    "add-to-the-base-folder": (
        add_to(where="base"),
        SystemExit,
        ["export/base is the base folder of an export", "give the run's export folder"],
    ),
    "add-to-a-full-export": (
        add_to(export=full_export),
        SystemExit,
        ["an export of method 'full' cannot take a new task", "Train the new task with the others in a new run"],
    ),
    "add-to-with-another-model": (
        add_to_with_another_model,
        SystemExit,
        ["model=", "another-model", "is not the export's base", "leave out the model"],
    ),
    "add-to-max-length-beyond-the-export-base": (
        add_to("--max-length", "200"),
        SystemExit,
        ["max_length=200", "export/base' has 128 positions"],
    ),
    "add-to-with-another-method": (
        add_to("--method", "houlsby"),
        SystemExit,
        ["its tasks use method 'pals'", "(got 'houlsby')", "leave out the method"],
    ),
    "add-to-with-a-fine-tuned-base": (
        add_to("--base", "finetune"),
        SystemExit,
        ["the shared base of an export stays as it is", "set base=frozen"],
    ),
    "add-to-a-task-the-export-has": (
        add_to("--tasks", "rte"),
        SystemExit,
        ["already has tasks ['rte']", "--replace"],
    ),
    "add-to-replace-a-task-the-export-lacks": (
        add_to("--tasks", "mrpc", "--replace"),
        SystemExit,
        ["has no tasks ['mrpc'] to replace", "leave out replace"],
    ),
    "replace-without-add-to": (
        cli_train("--tasks", "rte", "--replace", model=True),
        SystemExit,
        ["replace: only with add_to"],
    ),
    "add-to-a-base-whose-tokenizer-changed": (
        add_to(export=frozen_export_of_a_base_whose_tokenizer_changed),
        SystemExit,
        ["the tokenizer of", "pretrained differs from the one", "export/rte was trained with", "restore the base's"],
    ),
    "export-over-tasks-trained-on-another-base": (
        export_over_tasks_of_another_base,
        ConfigError,
        ["holds tasks ['cola']", "exporting here would delete them", "nothing was written"],
    ),
}


# --- issue 25.2: a user's own data ----------------------------------------------------------------------


def evaluate_after_the_data_folder_moved(tmp):
    """The data files moved away from the task file and the export: the error says how to give the new place."""
    folder = user_task_export(tmp)
    (tmp / "data-2024").mkdir()
    for name in ("train.csv", "dev.csv"):
        (tmp / name).rename(tmp / "data-2024" / name)
    return main(["evaluate", str(folder)])


def evaluate_with_a_task_file_of_other_labels_at_the_new_place(tmp):
    folder = user_task_export(tmp)
    (tmp / "new").mkdir()
    user_tasks(tmp / "new", names=["mine"], labels="[neg, pos, neutral]")
    return main(["evaluate", str(folder), "--task-file", str(tmp / "new" / "tasks.yaml")])


def train_with_task_file(extra: str, rows: str = ROWS, ids=None):
    """``train --task-file`` of one task "mine" with ``extra`` keys (YAML lines); the train file has these rows,
    each with an id (``ids``, default r0, r1, ...)."""

    def action(tmp):
        lines = rows.split("\n")
        names = ids or [f"r{i}" for i in range(len(lines))]
        (tmp / "train.csv").write_text("id,text,label\n" + "".join(f"{n},{row}\n" for n, row in zip(names, lines)))
        (tmp / "tasks.yaml").write_text("name: mine\ntrain: train.csv\ntext_columns: [text]\n" + extra)
        argv = ["train", "--task-file", str(tmp / "tasks.yaml"), "--model", str(TINY["model"])]
        return main([*argv, "--output-dir", str(tmp / "run"), "--max-steps", "2", "--batch-size", "2"])

    return action


def evaluate_with(*argv):
    def action(tmp):
        folder = user_task_export(tmp)
        (tmp / "report").mkdir(exist_ok=True)
        return main(["evaluate", str(folder), *[a.replace("TMP", str(tmp)) for a in argv]])

    return action


def schedule_with(*argv):
    def action(tmp):
        return main(["schedule", "--task-file", str(user_tasks(tmp)), "--steps", "10", *argv])

    return action


DUPLICATE_IDS = ["r0", "r1", "r1"] + [f"x{i}" for i in range(13)]

OWN_DATA = {
    "evaluate-after-the-data-folder-moved": (
        evaluate_after_the_data_folder_moved,
        SystemExit,
        ["dev.csv: missing file for split 'validation'", "if the data folder moved", "--task-file NEW.yaml"],
    ),
    "evaluate-task-file-at-the-new-place-with-other-labels": (
        evaluate_with_a_task_file_of_other_labels_at_the_new_place,
        SystemExit,
        ["task 'mine' differs", "labels: trained ('neg', 'pos'), task file ('neg', 'pos', 'neutral')"],
    ),
    "train-malformed-row-without-skip_bad_rows": (
        train_with_task_file("labels: [neg, pos]\n", ROWS + "\nno label here"),
        SystemExit,
        ["train.csv, line 18", "too few fields", "expected 3 (id, text, label)"],
    ),
    "train-skip_bad_rows-without-labels": (
        train_with_task_file("skip_bad_rows: true\n"),
        SystemExit,
        ["task 'mine'", "skip_bad_rows needs `labels`"],
    ),
    "train-skip_bad_rows-as-a-string": (
        train_with_task_file("skip_bad_rows: 'true'\nlabels: [neg, pos]\n"),
        SystemExit,
        ["skip_bad_rows must be true or false, got 'true'"],
    ),
    "train-duplicate-row-ids": (
        train_with_task_file("labels: [neg, pos]\nid_column: id\n", ids=DUPLICATE_IDS),
        SystemExit,
        ["train.csv, line 4: id 'r1'", "is also the id of line 3", "ids must be unique"],
    ),
    "train-id-column-missing-from-the-file": (
        train_with_task_file("labels: [neg, pos]\nid_column: code\n"),
        SystemExit,
        ["train.csv: missing column 'code'", "columns found: id, text, label"],
    ),
    "train-zero-threads": (
        lambda tmp: main(["train", "--threads", "0", "--output-dir", str(tmp / "run")]),
        SystemExit,
        ["threads=0", "must be > 0"],
    ),
    "evaluate-zero-threads": (evaluate_with("--threads", "0"), SystemExit, ["threads=0", "whole number >= 1"]),
    "train-compile-mode-without-compile": (
        lambda tmp: main(["train", "--compile-mode", "reduce-overhead", "--output-dir", str(tmp / "run")]),
        SystemExit,
        ["compile_mode='reduce-overhead' is a mode of torch.compile", "needs compile: true (--compile)"],
    ),
    "train-unknown-compile-mode": (
        lambda tmp: main(["train", "--compile", "--compile-mode", "fast", "--output-dir", str(tmp / "run")]),
        SystemExit,
        ["unknown compile mode 'fast'", "reduce-overhead", "max-autotune"],
    ),
    "evaluate-compile-mode-without-compile": (
        evaluate_with("--compile-mode", "max-autotune"),
        SystemExit,
        ["--compile-mode 'max-autotune' is a mode of torch.compile", "needs --compile as well"],
    ),
    "predict-unknown-compile-mode": (
        predict_export("--compile", "--compile-mode", "reduce_overhead"),
        SystemExit,
        ["unknown compile mode 'reduce_overhead'", "reduce-overhead"],
    ),
    "evaluate-out-is-a-folder": (
        evaluate_with("--out", "TMP/report"),
        SystemExit,
        ["--out", "is a folder", "eval.json"],
    ),
    "schedule-max-train-examples-zero": (
        schedule_with("--max-train-examples", "0"),
        SystemExit,
        ["--max-train-examples 0", "give a number >= 1"],
    ),
    "schedule-misspelt-option-shows-the-schedule-usage": (
        schedule_with("--max-train-exampels", "5"),
        SystemExit,
        ["usage: pals-bench schedule", "unrecognized arguments: --max-train-exampels 5"],
    ),
}
