"""The params suite through the entry point: the parameter budget of every method, and its check."""

import json
import warnings

import pytest

from benchmarks.__main__ import main as benchmarks
from pals_adapters.harness.methods.registry import get_method


def test_params_takes_its_options_and_records_its_command(tmp_path, capsys):
    argv = ["--models", "tiny", "--n-tasks", "3", "--out-dir", str(tmp_path)]
    assert benchmarks(["run", "params", *argv]) == 0
    data = json.loads((tmp_path / "param_budget.json").read_text())
    assert data["command"] == f"python -m benchmarks run params --models tiny --n-tasks 3 --out-dir {tmp_path}"
    assert data["n_tasks"] == 3 and data["check"] is None  # the check needs bert-base
    assert "wrote" in capsys.readouterr().out


@pytest.mark.slow
def test_params_writes_the_table_and_passes_its_check(tmp_path, capsys):
    assert benchmarks(["run", "params", "--models", "bert-base,tiny", "--out-dir", str(tmp_path)]) == 0
    assert "PASS" in capsys.readouterr().out
    data = json.loads((tmp_path / "param_budget.json").read_text())
    assert {"command", "machine", "n_tasks", "models", "check"} <= data.keys()
    assert {"cpu_model", "torch", "torch_threads", "date"} <= data["machine"].keys()
    assert data["check"]["passed"]
    rows = {row["method"]: row for row in data["models"]["bert-base"]["rows"]}
    # One naming scheme: every row is a harness method as `pals-bench train --method` takes it.
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an old spelling would warn
        for name in rows:
            get_method(name)
    assert {"shared", "pals", "pals_no_share", "low_rank", "houlsby", "lora", "peft_lora"} <= rows.keys()
    assert rows["shared"]["multiplier"] == pytest.approx(1.0, abs=0.01)
    assert rows["pals"]["multiplier"] == pytest.approx(1.13, abs=0.01)
    assert (tmp_path / "param_budget.md").read_text().startswith("# Parameter budget")
