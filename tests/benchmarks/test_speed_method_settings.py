"""The speed suite's rows of a method with settings (e.g. the PAL attention without dropout), beside the
method's own row; bad settings refused before anything is timed."""

import json

import pytest

from benchmarks.speed import step


def import_speed_memory():
    return step


def test_a_method_with_settings_is_a_row_of_its_own(tmp_path, monkeypatch):
    module = import_speed_memory()
    built = {}
    method_model = module.build_benches.__globals__["method_model"]

    def recording(model_name, method):
        model, params = method_model(model_name, method)
        built[method] = model.adapters_config.get("task").attention_dropout
        return model, params

    monkeypatch.setitem(module.build_benches.__globals__, "method_model", recording)
    argv = ["--quick", "--model", "tiny", "--methods", "pals,pals[attention_dropout=0.0]", "--tasks", "a,b"]
    assert module.main([*argv, "--parallel-configs", "pals", "--no-memory", "--out-dir", str(tmp_path)]) == 0
    assert built == {"pals": 0.1, "pals[attention_dropout=0.0]": 0.0}
    rows = {row["method"]: row for row in json.loads((tmp_path / "speed_memory_tiny.json").read_text())["rows"]}
    assert rows["pals[attention_dropout=0.0]"]["forward_flops_ratio"] == rows["pals"]["forward_flops_ratio"]
    assert "| pals[attention_dropout=0.0] |" in (tmp_path / "speed_memory_tiny.md").read_text()


@pytest.mark.parametrize("methods", ["pals[attention_dropout=2]", "pals[no_such_setting=1]", "palz"])
def test_bad_method_settings_are_refused_before_anything_runs(methods, capsys):
    module = import_speed_memory()
    with pytest.raises(SystemExit):
        module.parse_args(["--methods", methods])
    assert "method" in capsys.readouterr().err
