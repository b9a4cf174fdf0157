"""The speed suite through the entry point: step time and memory per method (eager and compiled), the
harness's throughput report, fp32 against bf16 on the CPU (no timing is asserted)."""

import json
import warnings

import pytest
from helpers import REPO

from benchmarks.__main__ import main as benchmarks
from benchmarks.speed import precision, step


@pytest.mark.slow
def test_speed_quick_on_a_tiny_model(tmp_path, capsys):
    argv = ["--quick", "--model", "tiny", "--methods", "pals,houlsby,peft_lora", "--tasks", "a,b"]
    assert benchmarks(["run", "speed", *argv, "--out-dir", str(tmp_path)]) == 0
    assert "PALs forward / base forward" in capsys.readouterr().out  # a PASS or FAIL line; timings are not checked
    data = json.loads((tmp_path / "speed_memory_tiny.json").read_text())
    assert {"command", "machine", "settings", "flops", "rows", "multitask", "checks"} <= data.keys()
    assert data["command"].startswith("python -m benchmarks run speed --quick --model tiny")
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


def test_speed_takes_old_method_names_with_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = step.parse_args(["--methods", "pals,pals_top_layers", "--parallel-configs", "pals_top_layers"])
    with pytest.warns(DeprecationWarning, match="pals_top_layers"):
        old = step.parse_args(["--methods", "pals,pals_top", "--parallel-configs", "pals_top"])
    assert (old.methods, old.parallel_configs) == (new.methods, new.parallel_configs)
    assert new.methods == ["pals", "pals_top_layers"] and new.parallel_configs == ["pals_top_layers"]


@pytest.mark.compile
def test_speed_compiled_rows_sit_beside_the_eager_ones(tmp_path, monkeypatch):
    import torch

    compile_ = torch.compile
    modes = []

    def without_codegen(model, **options):  # aot_eager: the capture without C++ code generation (seconds)
        modes.append(options.pop("mode", None))  # inductor's modes; aot_eager takes none
        return compile_(model, backend="aot_eager", **options)

    monkeypatch.setattr(torch, "compile", without_codegen)
    torch._dynamo.reset()  # each compiled step must compile its own graph: none left by an earlier test to reuse
    argv = ["--quick", "--model", "tiny", "--methods", "pals", "--tasks", "a,b", "--parallel-configs", "pals"]
    argv += ["--compile", "--compile-mode", "reduce-overhead"]
    assert step.main([*argv, "--no-memory", "--out-dir", str(tmp_path)]) == 0
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


def test_speed_throughput_rebuilds_its_report_from_the_committed_result(tmp_path, capsys):
    committed = REPO / "benchmarks" / "results" / "speed" / "throughput.json"
    argv = ["throughput", "--resummarise", str(committed), "--out-dir", str(tmp_path)]
    assert benchmarks(["run", "speed", *argv]) == 0
    rebuilt = json.loads((tmp_path / "throughput.json").read_text())
    assert rebuilt["machine"] == json.loads(committed.read_text())["machine"]
    assert (tmp_path / "throughput.md").read_text().strip()


@pytest.mark.slow
def test_speed_precision_times_both_precisions_on_the_configs_batches(tmp_path, tiny_model_dir, capsys):
    from helpers import glue_dir

    if glue_dir() is None:
        pytest.skip("GLUE data not found")
    config = tmp_path / "job.yaml"
    config.write_text(
        f"model: {tiny_model_dir}\ntasks: [rte, stsb]\nmethod: pals\nbase: finetune\nsampler: annealed\n"
        "max_steps: 12\nsteps_per_epoch: 4\nbatch_size: 4\nmax_length: 32\nmax_train_examples: 24\n"
    )
    argv = ["precision", "--config", str(config), "--glue-dir", str(glue_dir()), "--rounds", "2", "--steps", "3"]
    assert benchmarks(["run", "speed", *argv, "--threads", "1", "--out-dir", str(tmp_path)]) == 0
    assert "bf16 / fp32 examples per second" in capsys.readouterr().out  # the ratio is printed, not checked
    data = json.loads((tmp_path / "cpu_precision.json").read_text())
    # Two stretches per precision (steps 0-2 and 6-8 of the run's 12), two timed steps each.
    assert {p: [len(r) for r in rounds] for p, rounds in data["step_seconds"].items()} == {
        "fp32": [2, 2],
        "bf16": [2, 2],
    }
    assert data["tasks"] == ["rte", "stsb"] and data["batch_size"] == 4 and data["total_steps"] == 12
    assert data["bf16_speedup"] > 0 and len(data["round_speedups"]) == 2


def test_speed_precision_refuses_stretches_that_do_not_fit():
    assert precision.stretches(12, 2, 3) == [[0, 1, 2], [6, 7, 8]]
    with pytest.raises(SystemExit, match="does not fit"):
        precision.stretches(12, 4, 4)
