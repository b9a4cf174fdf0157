"""``precision: auto`` and the warning for bfloat16 on a CPU that only emulates it (harness/precision.py).

Whether this machine's CPU has native bfloat16 is pretended both ways (monkeypatched), so that each branch
runs on any CI machine."""

import json
import logging

import pytest
import torch
from helpers import tiny_run_config

from pals_adapters import ConfigError
from pals_adapters.harness import precision
from pals_adapters.harness.cli import main
from pals_adapters.harness.training.trainer import MultiTaskTrainer

cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU's choice: with a GPU, auto asks it")


def pretend_cpu(monkeypatch, native: bool) -> None:
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native)


@cpu_only
@pytest.mark.parametrize("native, chosen", [(True, "bf16"), (False, "fp32")])
def test_auto_takes_bf16_only_where_the_cpu_computes_it(monkeypatch, native, chosen):
    pretend_cpu(monkeypatch, native)
    assert precision.resolve_precision("auto") == chosen


@pytest.mark.parametrize("supported, chosen", [(True, "bf16"), (False, "fp32")])
def test_auto_asks_the_gpu_when_there_is_one(monkeypatch, supported, chosen):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)

    # emulated bf16 (a GPU before Ampere) is not native: auto must ask without emulation
    def is_bf16_supported(including_emulation=True):
        return supported or including_emulation

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a, **k: "a pretended GPU")
    pretend_cpu(monkeypatch, not supported)  # the CPU must not decide for the GPU
    assert precision.resolve_precision("auto") == chosen


@cpu_only
def test_bf16_on_a_cpu_that_emulates_it_is_kept_with_a_warning(monkeypatch, caplog):
    pretend_cpu(monkeypatch, False)
    with caplog.at_level(logging.WARNING, logger=precision.__name__):
        assert precision.resolve_precision("bf16") == "bf16"  # the user's choice stands
    assert "without native bfloat16" in caplog.text and "--precision fp32" in caplog.text
    caplog.clear()
    pretend_cpu(monkeypatch, True)
    with caplog.at_level(logging.WARNING, logger=precision.__name__):
        for asked in ("bf16", "fp32"):
            assert precision.resolve_precision(asked) == asked
    assert caplog.text == ""


def test_a_torch_without_the_cpu_helpers_counts_as_no_native_bf16(monkeypatch):
    for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        monkeypatch.delattr(torch.cpu, name, raising=False)
    assert precision.cpu_has_native_bf16() is False


def test_a_misspelt_precision_is_refused_naming_the_choices(tmp_path, tiny_model_dir):
    with pytest.raises(ConfigError, match="choose fp32, fp16, bf16, auto"):
        tiny_run_config(tiny_model_dir, tmp_path, precision="bfloat16").validate()


@cpu_only
@pytest.mark.parametrize("native, chosen", [(True, "bf16"), (False, "fp32")])
def test_a_run_with_auto_trains_records_and_prints_what_it_chose(
    tmp_path, tiny_model_dir, monkeypatch, capsys, native, chosen
):
    pretend_cpu(monkeypatch, native)
    autocast = []
    compute_loss = MultiTaskTrainer.compute_loss

    def recording(self, model, inputs, *args, **kwargs):
        autocast.append(torch.is_autocast_enabled("cpu"))
        return compute_loss(self, model, inputs, *args, **kwargs)

    monkeypatch.setattr(MultiTaskTrainer, "compute_loss", recording)
    config = tiny_run_config(tiny_model_dir, tmp_path / "run", tasks=["rte"], max_steps=2)
    argv = ["train", "--model", config.model, "--glue-dir", config.glue_dir, "--tasks", "rte", "--max-steps", "2"]
    argv += ["--batch-size", "8", "--max-length", "32", "--max-train-examples", "16", "--max-eval-examples", "8"]
    argv += ["--precision", "auto", "--output-dir", str(tmp_path / "run"), "--no-export"]
    assert main(argv) == 0
    assert autocast and all(enabled is native for enabled in autocast)
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["config"]["precision"] == chosen  # what it trained in, not "auto"
    assert f"torch threads, {chosen})" in capsys.readouterr().out


@cpu_only
def test_a_resume_where_auto_resolves_otherwise_is_refused(tmp_path, tiny_model_dir, monkeypatch):
    from pals_adapters.harness.training.runner import run

    pretend_cpu(monkeypatch, True)  # the machine the run started on
    settings = dict(tasks=["rte"], max_steps=2, save_steps=1, precision="auto", export=False)
    run(tiny_run_config(tiny_model_dir, tmp_path, **settings))
    pretend_cpu(monkeypatch, False)  # resumed on one without native bfloat16: auto now says fp32
    with pytest.raises(ConfigError, match="precision: run 'bf16', now 'fp32'"):
        run(tiny_run_config(tiny_model_dir, tmp_path, resume="last", **settings))
    pretend_cpu(monkeypatch, True)
    run(tiny_run_config(tiny_model_dir, tmp_path, resume="last", **settings))  # where it resolves alike
