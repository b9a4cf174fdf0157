"""The benchmark scripts run end to end and write their results (no timing is asserted)."""

import json
import subprocess
import sys

import pytest

from helpers import REPO

BENCHMARKS = REPO / "benchmarks"


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
    expected = {"full", "shared", "pals", "pals_no_share", "low_rank", "pals_top", "pals_bottom", "houlsby",
                "lora", "peft_lora", "top_bert_layer", "top_proj_attn"}
    assert expected <= rows.keys()
    assert any(name.startswith("lora_r") for name in rows)
    assert rows["full"]["multiplier"] == pytest.approx(8.0, abs=0.01)
    assert rows["shared"]["multiplier"] == pytest.approx(1.0, abs=0.01)
    assert (tmp_path / "param_budget.md").read_text().startswith("# Parameter budget")


@pytest.mark.slow
def test_speed_memory_quick_on_a_tiny_model(tmp_path):
    out = run_script(
        "speed_memory.py", "--quick", "--model", "tiny", "--methods", "pals,houlsby,peft_lora",
        "--tasks", "a,b", tmp_path=tmp_path,
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
    for preset in ("pals", "pals_top"):  # the default --parallel-configs
        multi = data["multitask"][preset]
        assert multi["max_abs_difference"] < 1e-4
        assert {"parallel", "separate", "parallel_over_separate"} <= multi.keys()
    assert [c["what"] for c in data["checks"]] == [
        "PALs forward / base forward",
        "PALs training step with the base frozen / full fine-tuning step (base, all weights)",
    ]
    assert (tmp_path / "speed_memory_tiny.md").exists()
