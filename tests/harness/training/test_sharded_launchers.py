"""Sharded runs started by `accelerate launch`, and by two launchers as two nodes on loopback."""

import json
import sys
import time

import pytest
from launching import finish, free_port, start
from sharded_runs import evaluate_export, needs_glue, train_options

# --- accelerate launch ----------------------------------------------------------------------------


def accelerate_launch(*args: str, ranks: int = 2) -> list[str]:
    """`accelerate launch` as docs/scaling-out.md gives it: ``--multi_gpu`` is what asks accelerate for N
    processes on a machine without GPUs too (without it, it starts one process); the ranks use gloo.
    Port 0: accelerate picks a free one."""
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(ranks)]
    return [*launch, "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
            "--main_process_port", "0", *args]  # fmt: skip


@pytest.mark.slow
@needs_glue
def test_accelerate_launch_trains_sharded_and_exports(tiny_model_dir, tmp_path):
    out = tmp_path / "accelerate"
    options = train_options(tiny_model_dir, out, "--method", "lora", "--base", "frozen", "--fsdp")
    # HF_HOME: a folder of its own, so that no default accelerate config of this machine's user steers the launch
    code, output = finish(start(accelerate_launch(*options), HF_HOME=str(tmp_path / "hf-home")))
    assert code == 0, output[-4000:]
    results = json.loads((out / "results.json").read_text())
    assert results["config"]["fsdp"] is True and results["config"]["max_steps"] == 8
    checkpoint = out / "checkpoint-8"  # sharded, by both ranks: a real 2-rank FSDP run, not two solo runs
    assert (checkpoint / "pytorch_model_fsdp_0" / ".metadata").is_file()
    assert sorted(p.name for p in checkpoint.glob("rng_state_*.pth")) == ["rng_state_0.pth", "rng_state_1.pth"]
    assert {p.parent.name for p in (out / "export").glob("*/manifest.json")} == {"rte", "stsb"}
    report = evaluate_export(out / "export", tmp_path)
    assert report["tasks"]["rte"]["metrics"]["rte_accuracy"] == pytest.approx(results["metrics"]["rte_accuracy"])


# --- two nodes on loopback -------------------------------------------------------------------------


def node(rank: int, port: int, *args: str, join_timeout: int = 60) -> list[str]:
    """One launcher as one node of 2 (one rank each), meeting the other through c10d on 127.0.0.1."""
    return [
        *(sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1"),
        *("--node-rank", str(rank), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}"),
        *("--rdzv-id", "pals-two-nodes", "--rdzv-conf", f"join_timeout={join_timeout}", "--max-restarts", "0"),
        *args,
    ]


@pytest.mark.slow
@needs_glue
def test_two_launchers_as_two_nodes_train_export_and_evaluate(tiny_model_dir, tmp_path):
    port, out = free_port(), tmp_path / "nodes"
    options = train_options(tiny_model_dir, out, "--method", "houlsby", "--base", "finetune", "--fsdp")
    nodes = [start(node(rank, port, *options)) for rank in (0, 1)]
    finished = [finish(proc) for proc in nodes]
    for code, output in finished:
        assert code == 0, output[-4000:]
    results = json.loads((out / "results.json").read_text())
    assert sorted(p.name for p in (out / "checkpoint-8").glob("rng_state_*.pth")) == [
        "rng_state_0.pth",
        "rng_state_1.pth",
    ]
    report = evaluate_export(out / "export", tmp_path)
    assert report["tasks"]["stsb"]["metrics"]["stsb_pearson"] == pytest.approx(results["metrics"]["stsb_pearson"])


@pytest.mark.slow
@needs_glue
def test_a_missing_rendezvous_peer_times_out_with_a_clear_message(tiny_model_dir, tmp_path):
    out = tmp_path / "alone"
    options = train_options(tiny_model_dir, out, "--fsdp")
    started = time.monotonic()
    code, output = finish(start(node(0, free_port(), *options, join_timeout=5)), limit=120)
    assert code != 0 and time.monotonic() - started < 120
    assert "RendezvousTimeoutError" in output or "timed out" in output.lower(), output[-3000:]
    assert not out.exists(), "nothing is written before the ranks meet"
