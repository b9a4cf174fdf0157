"""Bad-input rows of serving an export (predict, MultiTaskPredictor) and adding a task to it (--add-to).
Each row: (action taking the tmp folder, the error, fragments its message must hold)."""

import json
import shutil
from pathlib import Path

import torch
from helpers import tiny_bert_config
from reliability_cases import (
    COLA,
    RTE,
    TINY,
    cli_train,
    predict_export,
    served_export,
    unchanged,
    user_task_export,
    user_tasks,
)
from transformers import AutoModel, AutoTokenizer, BertModel

from pals_adapters.errors import ConfigError
from pals_adapters.harness.cli import main
from pals_adapters.harness.export import export_run
from pals_adapters.harness.methods.model import MultiTaskModel
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.harness.tasks.glue import GLUE_TASKS
from pals_adapters.harness.tasks.user_tasks import load_task_specs
from pals_adapters.harness.training import runner
from pals_adapters.harness.training.run_folder import write_record


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


SERVING = {
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
        ["no task has a test split to predict (mine: add 'test: FILE'", "--task-file", "--file FILE", "--split"],
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
