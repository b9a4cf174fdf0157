"""The selection part a search scores its trials on: a run with ``selection`` trains on the training rows
left after a seeded split, is scored on the rows held out, never loads a dev split, records the split and
writes no export; its identity is not a final run's, and a final run keeps the identity it had before."""

import dataclasses
import json

from search_grids import ROWS, write_signal_task

from pals_adapters.harness import RunConfig
from pals_adapters.harness.comparison.naming import digest_settings, settings_digest
from pals_adapters.harness.data.selection import selection_rows
from pals_adapters.harness.training import run_data
from pals_adapters.harness.training.runner import run


def test_a_run_with_a_selection_part_never_reads_dev(tiny_model_dir, tmp_path, monkeypatch):
    task_file = write_signal_task(tmp_path / "tasks")
    read = []
    load_split = run_data.load_split
    monkeypatch.setattr(
        run_data, "load_split", lambda spec, split, **kw: read.append(split) or load_split(spec, split, **kw)
    )
    out = tmp_path / "run"
    config = RunConfig(
        model=str(tiny_model_dir), task_file=str(task_file), method="shared", max_steps=2, batch_size=8,
        max_length=16, threads=1, selection=0.25, selection_seed=3, output_dir=str(out),
    )  # fmt: skip
    results = run(config)
    assert set(read) == {"train"}  # the dev split is never loaded
    held_out = selection_rows("signal", ROWS[0], 0.25, 3)
    assert len(held_out) == 15 and held_out == selection_rows("signal", ROWS[0], 0.25, 3)
    assert held_out != selection_rows("signal", ROWS[0], 0.25, 4)  # another seed, other rows
    assert results["scored_on"] == "selection" and results["train_sizes"] == {"signal": ROWS[0] - 15}
    split = json.loads((out / "selection_split.json").read_text())["signal"]
    assert split["selection_rows"] == held_out and split["training_rows"] == ROWS[0] - 15 and split["seed"] == 3
    predictions = [json.loads(line) for line in (out / "dev_predictions.jsonl").read_text().splitlines()]
    assert len(predictions) == 15  # scored on the rows held out
    assert not (out / "export").exists()  # settings are chosen with it; it is no model to hand on


def test_a_trial_is_never_taken_for_a_final_run_and_a_final_run_keeps_its_identity():
    config = RunConfig(model="m", tasks=["rte"], method="pals", seed=1)
    assert "selection" not in digest_settings(config) and "selection_seed" not in digest_settings(config)
    assert settings_digest(dataclasses.replace(config, selection_seed=5)) == settings_digest(config)
    trial = dataclasses.replace(config, selection=0.1)
    assert settings_digest(trial) != settings_digest(config)
    assert settings_digest(dataclasses.replace(trial, selection_seed=1)) != settings_digest(trial)
    assert settings_digest(dataclasses.replace(trial, selection=0.2)) != settings_digest(trial)
