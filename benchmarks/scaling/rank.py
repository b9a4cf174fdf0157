"""One rank of the scaling suite's measured runs: `pals-bench train`'s run with memory readings around the
model's build and the training (Linux /proc figures), written to ``<report>-rank<R>.json``."""

import json
import os
import time
from pathlib import Path


def _status(field: str) -> int:
    """``VmRSS``/``VmHWM`` of this process in bytes (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak() -> None:
    """Sets VmHWM back to the current RSS (Linux: clear_refs 5)."""
    Path("/proc/self/clear_refs").write_text("5")


def _local_bytes(tensor) -> int:
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


def worker(settings_json: str) -> None:
    """One rank of a measured run: `runner.run` with memory readings around the model's build and the
    training; writes ``<report>-rank<R>.json``."""
    from transformers import TrainerCallback

    from pals_adapters.harness.training import runner

    settings = json.loads(settings_json)
    report = Path(settings.pop("report"))
    record: dict = {}
    build_model, build_trainer = runner.build_model, runner.build_trainer

    def measured_build_model(*args, **kwargs):
        if "before_model" not in record:  # the first build (rank 0 builds another for the export at the end)
            record["before_model"] = _status("VmRSS")
            _reset_peak()
        return build_model(*args, **kwargs)

    class Readings(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            record["build_peak"] = _status("VmHWM")  # the model built, sharded (FSDP), wrapped
            record["train_begin"] = _status("VmRSS")
            _reset_peak()

        def on_train_end(self, args, state, control, model=None, optimizer=None, **kwargs):
            record["train_peak"] = _status("VmHWM")
            record["weights_held"] = sum(_local_bytes(p) for p in model.parameters())
            inner = getattr(optimizer, "optimizer", optimizer)
            record["adamw_held"] = sum(
                _local_bytes(v) for s in inner.state.values() for k, v in s.items() if k in ("exp_avg", "exp_avg_sq")
            )

    def measured_build_trainer(*args, **kwargs):
        trainer = build_trainer(*args, **kwargs)
        trainer.add_callback(Readings())
        return trainer

    runner.build_model, runner.build_trainer = measured_build_model, measured_build_trainer
    started = time.monotonic()
    runner.run(runner.RunConfig(**settings))
    record["seconds"] = round(time.monotonic() - started, 1)
    rank = int(os.environ.get("RANK", "0"))
    report.with_name(f"{report.name}-rank{rank}.json").write_text(json.dumps(record))
