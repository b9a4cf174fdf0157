"""Bad-input rows of data files: GLUE and user files, their rows, labels and texts; task files.
Each row: (action taking the tmp folder, the error, fragments its message must hold)."""

import csv

from reliability_cases import ROWS, TINY, user_task_export, user_tasks
from transformers import AutoModel, AutoTokenizer

from pals_adapters.errors import ConfigError, DataError
from pals_adapters.harness.cli import main
from pals_adapters.harness.export import export_run
from pals_adapters.harness.methods.model import MultiTaskModel
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.harness.tasks.glue import GLUE_TASKS
from pals_adapters.harness.tasks.splits import load_split
from pals_adapters.harness.tasks.user_tasks import custom_task, load_task_specs

RTE_HEADER = "index\tsentence1\tsentence2\tlabel\n"


def glue_file(tmp, folder, text, name="train.tsv"):
    (tmp / folder).mkdir(parents=True, exist_ok=True)
    (tmp / folder / name).write_bytes(text.encode() if isinstance(text, str) else text)
    return tmp


def load_rte(text):
    return lambda tmp: load_split(GLUE_TASKS["rte"], "train", glue_dir=glue_file(tmp, "RTE", text), source="local")


def load_stsb(score):
    text = f"sentence1\tsentence2\tscore\na\tb\t1.0\nc\td\t{score}\n"
    return lambda tmp: load_split(GLUE_TASKS["stsb"], "train", glue_dir=glue_file(tmp, "STS-B", text), source="local")


def load_user(name, content, **kw):
    def load(tmp):
        path = tmp / name
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        spec = custom_task("mine", train=str(path), labels=["a", "b"], **kw)
        return load_split(spec, "train", source="local")

    return load


def user_task_file(tmp):
    path = tmp / "tasks.yaml"
    path.write_text("tasks:\n  - name: mine\n    train: train.csv\n    labelz: [a, b]\n")
    return load_task_specs(path)


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


DUPLICATE_IDS = ["r0", "r1", "r1"] + [f"x{i}" for i in range(13)]


def user_labels(name, content):
    """The inferred labels and the loaded label indices of a user file (labels not declared)."""

    def load(tmp):
        (tmp / name).write_text(content)
        spec = custom_task("mine", train=str(tmp / name), text_columns="text")
        return spec.labels, load_split(spec, "train", source="local")["label"]

    return load


def skipped_blank_texts(tmp):
    """With skip_bad_rows, rows whose text is empty or blank are left out and counted (and their lines named)."""
    (tmp / "t.csv").write_text('text,label\nx,a\n,b\n"   ",a\ny,b\n')
    spec = custom_task("mine", train=str(tmp / "t.csv"), labels=["a", "b"], skip_bad_rows=True)
    skipped = []
    data = load_split(spec, "train", source="local", skipped=skipped)
    return len(data), [(report.count, [line for line, _ in report.first]) for report in skipped]


BIG = ("100000000000000001", "100000000000000002")  # one apart: a float makes them one number


def eighteen_digit_labels_listed(tmp):
    """The two 18-digit labels listed in the task file as YAML numbers: two classes, written exactly."""
    (tmp / "t.csv").write_text(f"text,label\nx,{BIG[0]}\ny,{BIG[1]}\n")
    (tmp / "tasks.yaml").write_text(f"name: ids\ntrain: t.csv\ntext_columns: [text]\nlabels: [{BIG[0]}, {BIG[1]}]\n")
    spec = load_task_specs(tmp / "tasks.yaml")[0]
    return spec.labels, load_split(spec, "train", source="local")["label"]


def predictions_of_eighteen_digit_labels(tmp):
    """``predict`` of an (untrained) export of that task writes labels that are in the file, exactly."""
    eighteen_digit_labels_listed(tmp)
    (tmp / "test.csv").write_text("text\n" + "".join(f"text {i}\n" for i in range(6)))
    (tmp / "tasks.yaml").write_text((tmp / "tasks.yaml").read_text() + "test: test.csv\n")
    spec = load_task_specs(tmp / "tasks.yaml")[0]
    model = MultiTaskModel(AutoModel.from_pretrained(TINY["model"]), {"ids": spec}, get_method("pals"), "frozen")
    tokenizer = AutoTokenizer.from_pretrained(TINY["model"])
    export_run(model, tmp / "export", base_model_name=str(TINY["model"]), tokenizer=tokenizer, max_length=32)
    main(["predict", str(tmp / "export"), "--out", str(tmp / "pred")])
    (written,) = (tmp / "pred").glob("*.tsv")
    predictions = {row["prediction"] for row in csv.DictReader(written.open(), delimiter="\t")}
    return predictions <= set(BIG) and bool(predictions)


DATA = {
    # malformed rows and files
    "tsv-too-few-fields": (
        load_rte(RTE_HEADER + "0\ta\tb\tentailment\n1\tonly one\tentailment\n"),
        DataError,
        ["train.tsv, line 3", "too few fields"],
    ),
    "tsv-too-many-fields": (
        load_rte(RTE_HEADER + "0\ta\tb\tentailment\textra\n"),
        DataError,
        ["train.tsv, line 2", "too many fields"],
    ),
    "tsv-blank-line": (
        load_rte(RTE_HEADER + "0\ta\tb\tentailment\n\n1\tc\td\tentailment\n"),
        DataError,
        ["train.tsv, line 3", "blank line"],
    ),
    "tsv-duplicate-header": (
        load_rte("index\tsentence1\tsentence1\tlabel\n0\ta\tb\tentailment\n"),
        DataError,
        ["train.tsv, line 1", "duplicate column name 'sentence1'"],
    ),
    "csv-unterminated-quote": (
        load_user("train.csv", 'text,label\nfine,a\n"open quote,b\n', text_columns="text"),
        DataError,
        ["train.csv, line", "too few fields"],
    ),
    "csv-not-utf8": (
        load_user("train.csv", b"text,label\n\xff\xfe\xfa,a\n", text_columns="text"),
        DataError,
        ["train.csv, line", "UTF-8"],
    ),
    "jsonl-broken-line": (
        load_user("train.jsonl", '{"text": "x", "label": "a"}\n{"text": \n', text_columns="text"),
        DataError,
        ["train.jsonl, line 2", "invalid JSON"],
    ),
    "tsv-missing-column": (
        load_rte("index\tsentence1\tsentence2\tgold\n0\ta\tb\tentailment\n"),
        DataError,
        ["train.tsv", "missing column 'label'", "gold"],
    ),
    "jsonl-missing-key": (
        load_user("train.jsonl", '{"text": "x", "label": "a"}\n{"text": "y"}\n', text_columns="text"),
        DataError,
        ["train.jsonl, line 2", "missing key 'label'"],
    ),
    # labels
    "label-outside-label-set": (
        load_rte(RTE_HEADER + "0\ta\tb\tmaybe\n"),
        DataError,
        ["train.tsv, line 2", "'maybe'", "column 'label'", "entailment"],
    ),
    "user-label-outside-set": (
        load_user("train.csv", "text,label\nx,a\ny,c\n", text_columns="text"),
        DataError,
        ["train.csv, line 3", "'c'"],
    ),
    "regression-nan": (load_stsb("nan"), DataError, ["train.tsv, line 3", "column 'score'", "not finite"]),
    "regression-out-of-range": (load_stsb("7.5"), DataError, ["train.tsv, line 3", "outside", "[0.0, 5.0]"]),
    "regression-not-a-number": (load_stsb("high"), DataError, ["train.tsv, line 3", "'high'", "not a number"]),
    # empty or missing files
    "empty-file": (load_rte(""), DataError, ["RTE/train.tsv", "file is empty"]),
    "header-only": (load_rte(RTE_HEADER), DataError, ["RTE/train.tsv", "no data rows"]),
    "missing-file": (
        lambda tmp: load_split("rte", "train", glue_dir=tmp, source="local"),
        DataError,
        ["RTE/train.tsv", "missing file", "--glue-dir"],
    ),
    "task-file-unknown-key": (user_task_file, ConfigError, ["tasks.yaml", "task #1", "'labelz'"]),
    # issue 9.8: data that means what it says
    "jsonl-nan-text": (
        load_user("train.jsonl", '{"text": NaN, "label": "a"}\n', text_columns="text"),
        DataError,
        ["train.jsonl, line 1", "column 'text' is NaN"],
    ),
    "jsonl-nan-label": (
        load_user("train.jsonl", '{"text": "x", "label": "a"}\n{"text": "y", "label": NaN}\n', text_columns="text"),
        DataError,
        ["train.jsonl, line 2", "label nan names no class"],
    ),
    "jsonl-list-as-text": (
        load_user("train.jsonl", '{"text": ["x", "y"], "label": "a"}\n', text_columns="text"),
        DataError,
        ["train.jsonl, line 1", "column 'text' must be a string, found list"],
    ),
    "csv-nan-label": (
        load_user("train.csv", "text,label\nx,a\ny,NaN\n", text_columns="text"),
        DataError,
        ["train.csv, line 3", "label 'NaN' names no class"],
    ),
    "label-column-is-a-text-column": (
        load_user("train.csv", "text,label\nx,a\n", text_columns=["text", "label"]),
        ConfigError,
        ["label_column 'label' is also a text column"],
    ),
    "csv-field-over-131072-characters": (
        load_user("train.csv", "text,label\nx,a\n" + "y" * 140_000 + ",b\n", text_columns="text"),
        DataError,
        ["train.csv, line 3", "longer than 131,072 characters", "unbalanced quote"],
    ),
    "task-labels-1-and-1.0": (
        lambda tmp: custom_task("mine", train="t.csv", labels=[1, 1.0]),
        ConfigError,
        ["task 'mine'", "labels [1, 1.0] names the label '1' twice", "list each class once"],
    ),
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
    # a text lost from its row is a mistake in the file, named with its line
    "train-empty-text": (
        train_with_task_file("labels: [neg, pos]\n", ROWS + "\n,pos"),
        SystemExit,
        ["train.csv, line 18", "text in column 'text' is empty", "skip_bad_rows: true"],
    ),
    "train-blank-text": (
        train_with_task_file("labels: [neg, pos]\n", ROWS + '\n"   ",pos'),
        SystemExit,
        ["train.csv, line 18", "text in column 'text' is blank"],
    ),
    "task-file-labels-yes-no-read-as-booleans": (
        lambda tmp: load_task_specs(user_tasks(tmp, names=["mine"], labels="[yes, no]")),
        ConfigError,
        ["labels: [True, False] are booleans", "YAML reads unquoted yes/no", "quote the labels"],
    ),
}
