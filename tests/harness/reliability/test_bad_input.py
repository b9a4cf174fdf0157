"""The bad-input tables: every refusal a user can meet, as (action, error, fragments of its message) rows,
one table per surface (tests/harness/reliability/cases_*.py); and what users write that must give the
right result."""

import dataclasses
from pathlib import Path

import pytest
import reliability_cases as cases
from cases_data import (
    BIG,
    DATA,
    eighteen_digit_labels_listed,
    predictions_of_eighteen_digit_labels,
    skipped_blank_texts,
    user_labels,
)
from cases_exports import EXPORTS, predict_elsewhere_on_a_base_named_as_a_relative_folder
from cases_options import OPTIONS, deepspeed_auto_values, distilbert_fed_token_type_ids
from cases_run_folders import RUN_FOLDERS, export_elsewhere_of_a_run_on_a_relative_model, overwrite_a_finished_run
from cases_serving import SERVING

import pals_adapters
from pals_adapters.errors import ConfigError
from pals_adapters.harness import RunConfig
from pals_adapters.harness.checks import POSITIVE, POSITIVE_OR_UNSET
from pals_adapters.harness.scoring.report import task_metrics
from pals_adapters.harness.training import runner as harness
from pals_adapters.harness.training.run_folder import prepare_run_folder
from pals_adapters.harness.training.trainer import MultiTaskTrainer

PACKAGE_DIR = Path(pals_adapters.__file__).resolve().parent
TABLES = {"data": DATA, "options": OPTIONS, "run folders": RUN_FOLDERS, "exports": EXPORTS, "serving": SERVING}
BAD_INPUT = {name: row for table in TABLES.values() for name, row in table.items()}
assert len(BAD_INPUT) == sum(len(t) for t in TABLES.values()), "a case name is in two tables"


@pytest.fixture
def training_steps(monkeypatch):
    """The training steps taken (none may run before a refusal)."""
    taken = []
    step = MultiTaskTrainer.training_step

    def counted(self, *args, **kwargs):
        taken.append(self.state.global_step)
        return step(self, *args, **kwargs)

    monkeypatch.setattr(MultiTaskTrainer, "training_step", counted)
    return taken


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_is_a_specific_error_that_says_what_to_fix(case, tmp_path, capsys, tiny_model_dir, training_steps):
    action, error, fragments = BAD_INPUT[case]
    cases.TINY["model"] = tiny_model_dir
    with pytest.raises(error) as info:
        action(tmp_path)
    assert training_steps == [], "a training step ran before the refusal"
    if error is SystemExit:
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err
        message = err
    else:
        message = str(info.value)
        tb = info.tb
        while tb.tb_next is not None:
            tb = tb.tb_next
        raised_at = Path(tb.tb_frame.f_code.co_filename).resolve()
        assert raised_at.is_relative_to(PACKAGE_DIR), f"raised deep inside {raised_at}, not by pals_adapters"
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in: {message}"


@pytest.mark.parametrize("name", [*POSITIVE, *POSITIVE_OR_UNSET, "warmup_ratio", "weight_decay", "seed"])
def test_every_bounded_setting_refuses_a_value_out_of_range_before_anything_is_loaded(name, tmp_path):
    # one case per bounded setting of RunConfig: a check that is dropped, or a setting added to the bounded
    # lists without its check, fails here (the model is a hub name: nothing may have been read to refuse it)
    config = RunConfig(model="no-such/model", tasks=["rte"], output_dir=str(tmp_path / "run"), **{name: -1})
    with pytest.raises(ConfigError, match=rf"^{name}=-1: must be"):
        config.validate()
    assert not (tmp_path / "run").exists()


def allowed_resume_change(tmp):
    """A resume that changes only how often it logs goes ahead, and says what changed."""
    config = cases.run_folder_with_checkpoint(tmp)
    changed = dataclasses.replace(config, resume="last", logging_steps=1, export=True)
    return prepare_run_folder(changed, changed.validate())


RIGHT_RESULT = {
    # what users write is what they mean: (action, expected result)
    "glue-names-as-users-write-them": (
        lambda tmp: list(harness.resolve_task_names(["SST-2", "sts-b", "MNLI", "qnli"])),
        ["sst2", "stsb", "mnli", "qnli"],
    ),
    "csv-labels-1-and-1.0-are-one-class": (
        user_labels("t.csv", "text,label\nx,1\ny,1.0\nz,0\nw, 01\n"),
        (("0", "1"), [1, 1, 0, 1]),
    ),
    "jsonl-labels-1-and-1.0-are-one-class": (
        user_labels(
            "t.jsonl", '{"text": "x", "label": 1}\n{"text": "y", "label": "1.0"}\n{"text": "z", "label": 0.0}\n'
        ),
        (("0", "1"), [1, 1, 0]),
    ),
    "numeric-labels-in-numeric-order": (
        user_labels("t.csv", "text,label\nx,10\ny,2\nz,2.5\n"),
        (("2", "2.5", "10"), [2, 0, 1]),
    ),
    "metrics-of-a-are-not-those-of-a_b": (
        lambda tmp: task_metrics(
            {"a_accuracy": 0.5, "a_b_accuracy": 0.9, "a_score": 0.5, "a_b_score": 0.9}, "a", ["a", "a_b"]
        ),
        {"accuracy": 0.5, "score": 0.5},
    ),
    "resume-may-change-logging": (allowed_resume_change, "checkpoint-4"),
    "overwrite-replaces-a-finished-run": (
        overwrite_a_finished_run,
        (["run_config.json", "run_tasks.json"], 7),  # results and checkpoint gone, the new run's record
    ),
    "export-elsewhere-of-a-run-on-a-relative-model": (
        export_elsewhere_of_a_run_on_a_relative_model,
        {"base_model_name": "../../../tiny"},  # found again through the run's record; named from the export
    ),
    "predict-elsewhere-on-a-relative-base": (predict_elsewhere_on_a_base_named_as_a_relative_folder, 0),
    "skip_bad_rows-counts-empty-and-blank-texts": (skipped_blank_texts, (2, [(2, [3, 4])])),
    "eighteen-digit-labels-are-two-classes": (
        user_labels("t.csv", f"text,label\nx,{BIG[0]}\ny,{BIG[1]}\nz,{BIG[0]}\n"),
        (BIG, [0, 1, 0]),
    ),
    "eighteen-digit-labels-listed-as-yaml-numbers": (eighteen_digit_labels_listed, (BIG, [0, 1])),
    "eighteen-digit-labels-predicted-exactly": (predictions_of_eighteen_digit_labels, True),
    "deepspeed-auto-values-agree-with-any-run": (
        deepspeed_auto_values,
        None,
    ),
    "distilbert-base-given-token-type-ids": (distilbert_fed_token_type_ids, (4, 2)),
}


@pytest.mark.parametrize("case", list(RIGHT_RESULT))
def test_what_users_write_gives_the_right_result(case, tmp_path, tiny_model_dir, caplog):
    action, expected = RIGHT_RESULT[case]
    cases.TINY["model"] = tiny_model_dir
    result = action(tmp_path)
    if isinstance(expected, str):
        assert result.endswith(expected)
        assert "logging_steps: run 4, now 1" in caplog.text and "export: run False, now True" in caplog.text
    else:
        assert result == expected
