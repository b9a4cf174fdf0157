"""Launching and reading small sharded runs (2 CPU ranks over gloo) for the sharded-training tests: every
launch is bounded (`launching.finish`): past its time it is killed with its ranks."""

import json
from pathlib import Path

import pytest
import safetensors.torch
import torch
from helpers import glue_dir
from launching import finish, start, torchrun

from pals_adapters.harness.cli import main as cli

GLUE = glue_dir()
needs_glue = pytest.mark.skipif(GLUE is None, reason="GLUE data not found: set GLUE_DIR or provide ../shared/glue")


def train_options(model_dir: Path, output_dir: Path, *extra: str) -> list[str]:
    return [
        *("-m", "pals_adapters.harness.cli", "train", "--model", str(model_dir), "--tasks", "rte", "stsb"),
        *("--glue-dir", str(GLUE), "--data-source", "local", "--max-steps", "8", "--steps-per-epoch", "2"),
        *("--batch-size", "4", "--max-length", "48", "--lr", "1e-3", "--max-train-examples", "32"),
        *("--max-eval-examples", "8", "--eval-batch-size", "8", "--logging-steps", "4", "--save-steps", "4"),
        *("--output-dir", str(output_dir), *extra),
    ]


def launch_train(model_dir: Path, output_dir: Path, *extra: str) -> dict:
    code, output = finish(start(torchrun(*train_options(model_dir, output_dir, *extra))))
    assert code == 0, output[-4000:]
    return json.loads((output_dir / "results.json").read_text())


def export_tensors(export_dir: Path) -> dict[str, torch.Tensor]:
    """Every tensor of every weight file of an export, keyed by file and name."""
    tensors = {}
    for path in sorted(export_dir.rglob("*.safetensors")):
        for name, value in safetensors.torch.load_file(path).items():
            tensors[f"{path.relative_to(export_dir)}:{name}"] = value
    return tensors


def dev_scores(results: dict) -> dict:
    return {k: v for k, v in results["metrics"].items() if not k.endswith(("runtime", "per_second"))}


def evaluate_export(export_dir: Path, tmp_path: Path) -> dict:
    """``pals-bench evaluate`` in this (single, non-distributed) process."""
    out = tmp_path / "eval.json"
    assert cli(["evaluate", str(export_dir), "--out", str(out)]) == 0
    return json.loads(out.read_text())


def dev_predictions(export_dir: Path, out: Path) -> dict[str, float]:
    """``pals-bench predict`` on every dev row of every task of the export, in this process: the
    regression value or the first class's probability, keyed by task and row."""
    assert cli(["predict", str(export_dir), "--split", "validation", "--format", "jsonl", "--out", str(out)]) == 0
    values = {}
    for path in sorted(out.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            value = row["prediction"] if row["probability"] is None else next(iter(row["probabilities"].values()))
            values[f"{path.stem}:{row['id']}"] = float(value)
    return values
