"""Sharded training (``--fsdp``, FSDP2) on 2 CPU ranks over gloo: train -> export -> evaluate in one
process, FSDP against DDP, kill -9 and resume, two launchers as two nodes on loopback, and bad input.

Every launch is bounded (`finish`): past its time it is killed with its ranks (`kill_launch`).
"""

import json
import sys
import time
from pathlib import Path

import adapters
import datasets
import pytest
import safetensors.torch
import torch
import torch.distributed.checkpoint as dcp
from helpers import REPO, glue_dir, tiny_bert_config
from launching import LIMIT, ended, finish, free_port, kill_launch, start, torchrun
from transformers import AutoTokenizer, BertModel

from pals_adapters.errors import ConfigError
from pals_adapters.harness import RunConfig
from pals_adapters.harness.cli import main as cli
from pals_adapters.harness.data.batches import MultiTaskBatches
from pals_adapters.harness.data.sampling import make_sampler
from pals_adapters.harness.export import fingerprint_model
from pals_adapters.harness.methods.model import MultiTaskModel, build_model
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.harness.tasks.glue import get_task
from pals_adapters.harness.training import checkpoints
from pals_adapters.harness.training import runner as harness
from pals_adapters.harness.training.sharding import MixedBatchGradients, encoder_layers, parse_fsdp_options

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


@pytest.fixture(scope="module")
def fsdp_pals(tmp_path_factory, tiny_model_dir):
    """The reference sharded run: PALs, base fine-tuned, 8 steps, checkpoints at 4 and 8."""
    out = tmp_path_factory.mktemp("fsdp") / "pals"
    return out, launch_train(tiny_model_dir, out, "--method", "pals", "--base", "finetune", "--fsdp")


# --- train -> export -> evaluate ------------------------------------------------------------------


@pytest.mark.slow
@needs_glue
def test_a_sharded_run_exports_what_one_process_evaluates_to_its_scores(fsdp_pals, tmp_path):
    out, results = fsdp_pals
    assert results["config"]["fsdp"] is True
    sharded = out / "checkpoint-8"
    assert (sharded / "pytorch_model_fsdp_0" / ".metadata").is_file() and not (sharded / "model.safetensors").exists()
    assert sorted(p.name for p in sharded.glob("rng_state_*.pth")) == ["rng_state_0.pth", "rng_state_1.pth"]
    manifests = {p.parent.name for p in (out / "export").glob("*/manifest.json")}
    assert manifests == {"base", "rte", "stsb"}
    report = evaluate_export(out / "export", tmp_path)
    for task in ("rte", "stsb"):
        for name, value in report["tasks"][task]["metrics"].items():
            assert value == pytest.approx(results["metrics"][name], abs=1e-6), (task, name)
    # the sharded checkpoint exports in one process to the very weights rank 0 gathered
    assert cli(["export", str(out), "--checkpoint", str(sharded), "--out", str(tmp_path / "again")]) == 0
    first, again = export_tensors(out / "export"), export_tensors(tmp_path / "again")
    assert first.keys() == again.keys() and all(torch.equal(first[k], again[k]) for k in first)


@pytest.mark.slow
@needs_glue
def test_a_sharded_frozen_base_stays_frozen_and_out_of_the_optimizer(tiny_model_dir, tmp_path):
    out = tmp_path / "frozen"
    options = ("--method", "pals", "--base", "frozen", "--fsdp")
    results = launch_train(tiny_model_dir, out, *options)
    specs = {name: get_task(name) for name in ("rte", "stsb")}
    fresh = build_model(str(tiny_model_dir), specs, get_method("pals"), "frozen")
    pretrained = fingerprint_model(fresh)
    for task in specs:  # the export's base is the pretrained one, to the bit
        assert json.loads((out / "export" / task / "manifest.json").read_text())["base_fingerprint"] == pretrained
    # the sharded optimizer state (torch.distributed.checkpoint) holds exactly the tasks' parameters: the
    # PALs, their shared V_E/V_D and the heads, nothing of the base
    saved = dcp.FileSystemReader(str(out / "checkpoint-8" / "optimizer_0")).read_metadata().state_dict_metadata
    moments = {key.split(".", 2)[2].rsplit(".", 1)[0] for key in saved if key.endswith(".exp_avg")}
    trainable = {name for name, p in fresh.named_parameters() if p.requires_grad}
    assert moments == trainable, sorted(moments ^ trainable)
    report = evaluate_export(out / "export", tmp_path)
    assert report["tasks"]["rte"]["metrics"]["rte_accuracy"] == pytest.approx(results["metrics"]["rte_accuracy"])


# --- FSDP against DDP ------------------------------------------------------------------------------


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


@pytest.mark.slow
@needs_glue
def test_fsdp_and_ddp_end_with_the_same_weights_and_scores(fsdp_pals, tiny_model_dir, tmp_path):
    fsdp_out, fsdp_results = fsdp_pals
    ddp_results = launch_train(tiny_model_dir, tmp_path / "ddp", "--method", "pals", "--base", "finetune")
    fsdp, ddp = export_tensors(fsdp_out / "export"), export_tensors(tmp_path / "ddp" / "export")
    assert fsdp.keys() == ddp.keys()
    # Measured (8 steps, weights dumped after every step): the two runs see the same batches and their
    # reduced gradients are bit-identical at every step (2 ranks: a sum of two floats halved is exact in
    # any order), and so are the weights up to step 4. Gradient clipping (max_grad_norm 1.0) then makes
    # the difference: FSDP sums the squares of each parameter's shards across ranks (a DTensor norm)
    # where DDP takes one norm of the full gradient, so the total norm can differ by one float32 step
    # (step 5, the first to clip with differing norms: 8.701047 under FSDP, 8.701046 under DDP) and
    # every weight is scaled by a clip factor one step apart. Worst weight difference after 8 steps:
    # 1.1e-8. Without clipping the runs differ in one element by 2.9e-11 (the fused AdamW kernel, the
    # same in both runs, takes the last elements of a tensor, here of a shard, out of its 8-wide vector
    # loop). 1e-6 is about 100 times the measured difference; a real change of the training does far
    # more (the same FSDP run without clipping ends 2.5e-3 away).
    worst = max(float((fsdp[k] - ddp[k]).abs().max()) for k in fsdp)
    assert worst < 1e-6, worst
    # The models' outputs on every dev row (STS-B 1500, RTE 277), in one process: measured 2.2e-8 apart.
    a = dev_predictions(fsdp_out / "export", tmp_path / "p-fsdp")
    b = dev_predictions(tmp_path / "ddp" / "export", tmp_path / "p-ddp")
    assert a.keys() == b.keys() and len(a) == 1500 + 277
    assert max(abs(a[k] - b[k]) for k in a) < 1e-6
    # The run's dev scores: accuracy to the bit. The correlations are ill-conditioned after 8 steps: the
    # 8 STS-B predictions scored spread over 9e-5 around 0.0772, where a float32 step is 7.5e-9, so a change
    # of 2 float32 steps in 2 predictions moved Pearson by 1.7e-4 (measured). 1e-3 allows that and still
    # fails on a change of training: the same run without clipping moves Pearson by 2.5e-2.
    fsdp_scores, ddp_scores = dev_scores(fsdp_results), dev_scores(ddp_results)
    assert fsdp_scores["rte_accuracy"] == ddp_scores["rte_accuracy"]
    assert fsdp_scores == pytest.approx(ddp_scores, abs=1e-3)


# --- mixed batches -------------------------------------------------------------------------------

# The mixed runs' seed: with 2 ranks of 4 rows, rte and stsb drawn 1:1, its 8 steps hold both cases that
# matter (`test_the_mixed_runs_seed_holds_both_cases`): a task on one rank's rows only (steps 1 and 8), and a
# task on no rank's rows (step 4: no stsb).
MIXED_SEED = "19"


@pytest.fixture(scope="module")
def fsdp_mixed(tmp_path_factory, tiny_model_dir):
    """PALs, base fine-tuned, mixed batches, sharded."""
    out = tmp_path_factory.mktemp("fsdp-mixed") / "pals"
    options = ("--method", "pals", "--base", "finetune", "--batching", "mixed", "--seed", MIXED_SEED, "--fsdp")
    return out, launch_train(tiny_model_dir, out, *options)


def test_the_mixed_runs_seed_holds_both_cases(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    rows = datasets.Dataset.from_dict({"input_ids": [[5, 6]] * 32, "attention_mask": [[1, 1]] * 32, "label": [0] * 32})
    sets = {"rte": rows, "stsb": rows}  # 32 examples each, as --max-train-examples 32
    sampler = make_sampler("annealed", {n: 32 for n in sets}, seed=int(MIXED_SEED), total_steps=8, steps_per_epoch=2)
    batches = MultiTaskBatches(sets, sampler, tokenizer, 4, 8, world_size=2, seed=int(MIXED_SEED), mixed=True)
    counts = batches.mix_counts.reshape(8, 2, 2)  # step, rank, task
    assert counts[0].tolist() == [[3, 1], [4, 0]]  # step 1: stsb on rank 0's rows only
    assert counts[7].tolist() == [[0, 4], [1, 3]]  # step 8: rte on rank 1's rows only
    assert counts[3].sum(axis=0).tolist() == [8, 0]  # step 4: no stsb on any rank


@pytest.mark.slow
@needs_glue
def test_a_sharded_mixed_run_exports_what_one_process_evaluates_to_its_scores(fsdp_mixed, tmp_path):
    out, results = fsdp_mixed
    assert results["config"]["fsdp"] is True and results["config"]["batching"] == "mixed"
    mixes = [entry for entry in results["log_history"] if "mix_rte" in entry]
    assert mixes and all(0 < entry["mix_rte"] < 1 for entry in mixes)  # batches that mixed the tasks
    assert sorted(p.name for p in (out / "checkpoint-8").glob("rng_state_*.pth")) == [
        "rng_state_0.pth",
        "rng_state_1.pth",
    ]
    report = evaluate_export(out / "export", tmp_path)
    for task in ("rte", "stsb"):
        for name, value in report["tasks"][task]["metrics"].items():
            assert value == pytest.approx(results["metrics"][name], abs=1e-6), (task, name)


@pytest.mark.slow
@needs_glue
def test_fsdp_and_ddp_mixed_runs_end_with_the_same_weights_and_scores(fsdp_mixed, tiny_model_dir, tmp_path):
    fsdp_out, fsdp_results = fsdp_mixed
    options = ("--method", "pals", "--base", "finetune", "--batching", "mixed", "--seed", MIXED_SEED)
    ddp_results = launch_train(tiny_model_dir, tmp_path / "ddp", *options)
    fsdp, ddp = export_tensors(fsdp_out / "export"), export_tensors(tmp_path / "ddp" / "export")
    assert fsdp.keys() == ddp.keys()
    # The tolerances of `test_fsdp_and_ddp_end_with_the_same_weights_and_scores`, for the same reason. Measured:
    # weights at most 5.1e-8 apart; without clipping 1.9e-9; without clipping and with AdamW's per-tensor loop
    # instead of the fused kernel, bit-identical (weights and scores). So on every step the sharded run reduces
    # the same gradients as DDP and steps the same weights: the heads of a task missing from one rank's rows
    # get DDP's mean with that rank's zeros, and stsb's head, on no rank's rows at step 4, is not stepped (given
    # a zero gradient there instead, it moves and the weights end 9.4e-4 apart).
    # The outputs on every dev row (1777), measured once by hand: 3.0e-8 apart (left out here: 2 predictions
    # of every row would double the test's time).
    worst = max(float((fsdp[k] - ddp[k]).abs().max()) for k in fsdp)
    assert worst < 1e-6, worst
    fsdp_scores, ddp_scores = dev_scores(fsdp_results), dev_scores(ddp_results)
    assert fsdp_scores["rte_accuracy"] == ddp_scores["rte_accuracy"]
    assert fsdp_scores == pytest.approx(ddp_scores, abs=1e-3)  # measured: STS-B Pearson 1.1e-4 apart


MIXED_METHODS = ["pals", "pals_no_share", "houlsby", "lora", "shared", "full", "ca_mtl[max_seq_length=16,num_blocks=4]"]


@pytest.mark.parametrize("method", MIXED_METHODS)
def test_in_a_mixed_batch_only_the_heads_of_absent_tasks_get_no_gradient(method):
    """What `MixedBatchGradients` relies on: every trainable weight but the heads of the tasks missing from a
    mixed batch gets a gradient (adapters' MultiTask block runs an absent task's adapter on no rows), so those
    heads are exactly what DDP leaves untouched when no rank has the task."""
    tasks = {name: get_task(name) for name in ("rte", "stsb", "cola")}
    torch.manual_seed(0)
    model = MultiTaskModel(BertModel(tiny_bert_config()), tasks, get_method(method), "finetune")
    ids = torch.randint(5, 99, (4, 9), generator=torch.Generator().manual_seed(0))
    task_ids = torch.tensor([1, 1, 1, 1])  # stsb only
    labels = torch.tensor([1.0, 2.5, 3.0, 0.5])
    model(input_ids=ids, attention_mask=torch.ones_like(ids), task_ids=task_ids, labels=labels)["loss"].backward()
    no_gradient = {id(p) for p in model.parameters() if p.requires_grad and p.grad is None}
    absent_heads = {id(p) for task in ("rte", "cola") for p in model.task_head(task).parameters()}
    assert no_gradient == absent_heads


def test_after_the_backward_the_heads_of_tasks_on_no_rank_get_no_gradient_back():
    tasks = {name: get_task(name) for name in ("rte", "stsb", "cola")}
    model = MultiTaskModel(BertModel(tiny_bert_config()), tasks, get_method("pals"), "finetune")
    for param in model.parameters():  # as FSDP leaves them with set_reduce_scatter_unused_params
        param.grad = torch.zeros_like(param)
    gradients = MixedBatchGradients(len(tasks))
    gradients.present = torch.tensor([1, 0, 1], dtype=torch.int32)  # stsb on no rank's rows this step
    gradients.after_backward(model)
    stsb_head = {id(p) for p in model.task_head("stsb").parameters()}
    assert all((p.grad is None) == (id(p) in stsb_head) for p in model.parameters())
    assert gradients.present is None  # the next step gathers its own tasks


# --- CA-MTL ----------------------------------------------------------------------------------------


@pytest.mark.slow
@needs_glue
def test_ca_mtl_trains_sharded_exports_and_evaluates(tiny_model_dir, tmp_path):
    """CA-MTL reads its task embeddings (kept in layer 0) in a hook of the embeddings, before layer 0 runs:
    layer 0 stays in the root unit (as a unit of its own its weights were still sharded when read: "mixed
    torch.Tensor and DTensor"). Its default sampler, MT-Uncertainty, runs in one process only."""
    out = tmp_path / "ca_mtl"
    results = launch_train(
        tiny_model_dir, out, "--method", "ca_mtl", "--base", "finetune", "--sampler", "annealed", "--fsdp"
    )
    assert (out / "checkpoint-8" / "pytorch_model_fsdp_0" / ".metadata").is_file()
    assert (out / "export" / "base" / "shared_modules.safetensors").is_file()  # the conditional modules, once
    report = evaluate_export(out / "export", tmp_path)
    for task in ("rte", "stsb"):
        for name, value in report["tasks"][task]["metrics"].items():
            assert value == pytest.approx(results["metrics"][name], abs=1e-6), (task, name)


@needs_glue
def test_ca_mtl_s_default_sampler_is_refused_in_a_sharded_run_before_anything_is_written(
    tiny_model_dir, tmp_path, monkeypatch
):
    monkeypatch.setenv("WORLD_SIZE", "2")  # as under a launcher
    config = RunConfig(
        model=str(tiny_model_dir),
        tasks=["rte", "stsb"],
        glue_dir=str(GLUE),
        output_dir=str(tmp_path / "run"),
        method="ca_mtl",
        fsdp=True,
    )
    assert config.sampler == "mt_uncertainty"
    with pytest.raises(ConfigError, match="mt_uncertainty .CA-MTL's default. runs in one process.*--sampler annealed"):
        harness.run(config)
    assert not (tmp_path / "run").exists()


# --- kill -9 and resume ----------------------------------------------------------------------------


@pytest.mark.timeout(150)
@pytest.mark.slow
@needs_glue
def test_a_killed_sharded_run_resumes_bit_for_bit(fsdp_pals, tiny_model_dir, tmp_path):
    whole_out, whole = fsdp_pals
    out = tmp_path / "killed"
    settings = dict(
        model=str(tiny_model_dir),
        tasks=["rte", "stsb"],
        glue_dir=str(GLUE),
        data_source="local",
        method="pals",
        base="finetune",
        max_steps=8,
        steps_per_epoch=2,
        batch_size=4,
        max_length=48,
        lr=1e-3,
        max_train_examples=32,
        max_eval_examples=8,
        eval_batch_size=8,
        logging_steps=4,
        save_steps=4,
        output_dir=str(out),
        fsdp=True,
    )
    worker = str(REPO / "tests" / "harness" / "sharded_worker.py")
    proc = start(torchrun(worker, json.dumps(settings), "--hang-after-save", "4"))
    markers = [out / f"hanging-{rank}" for rank in (0, 1)]  # each rank's process id, once checkpoint-4 is whole
    deadline = time.monotonic() + LIMIT
    while not all(marker.exists() for marker in markers):
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the run did not reach its step-4 checkpoint:\n{kill_launch(proc)[-4000:]}")
        time.sleep(0.2)
    ranks = tuple(int(marker.read_text()) for marker in markers)
    kill_launch(proc, ranks)  # kill -9: the launcher and both ranks
    deadline = time.monotonic() + 30
    while not all(map(ended, ranks)) and time.monotonic() < deadline:  # gone before the resume starts
        time.sleep(0.05)
    assert [p.name for p in checkpoints.list_checkpoints(out)] == ["checkpoint-4"]

    resumed = launch_train(tiny_model_dir, out, "--method", "pals", "--base", "finetune", "--fsdp", "--resume", "last")
    a, b = export_tensors(whole_out / "export"), export_tensors(out / "export")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "not bit-identical"
    assert dev_scores(resumed) == dev_scores(whole)
    losses = lambda r: [row["loss"] for row in r["log_history"] if "loss" in row]  # noqa: E731
    assert losses(resumed) == losses(whole)


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


# --- bad input (no launch needed) ------------------------------------------------------------------


@needs_glue
def test_fsdp_without_a_distributed_launch_is_a_clear_error(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    config = RunConfig(model=str(tiny_model_dir), tasks=["rte"], glue_dir=str(GLUE), output_dir=str(tmp_path / "o"))
    config.fsdp = True
    with pytest.raises(ConfigError, match="needs a distributed launch.*torchrun"):
        harness.run(config)
    assert not (tmp_path / "o").exists(), "nothing written"


@pytest.mark.parametrize(
    "options, message",
    [
        (["reshard_after_forwad=true"], "unknown FSDP option 'reshard_after_forwad'"),
        (["cpu_offload=true"], "unknown FSDP option 'cpu_offload'.*known: reshard_after_forward"),
        (["reshard_after_forward=maybe"], "reshard_after_forward=true or reshard_after_forward=false"),
        (["reshard_after_forward"], "reshard_after_forward=true or"),
    ],
)
def test_an_unknown_fsdp_option_is_a_clear_error(options, message):
    with pytest.raises(ConfigError, match=message):
        parse_fsdp_options(options)


@needs_glue
def test_fsdp_options_are_checked_before_anything_is_written(tiny_model_dir, tmp_path):
    base = dict(model=str(tiny_model_dir), tasks=["rte"], glue_dir=str(GLUE), output_dir=str(tmp_path / "o"))
    with pytest.raises(ConfigError, match="fsdp_options are set but fsdp is off"):
        harness.run(RunConfig(**base, fsdp_options=["reshard_after_forward=false"]))
    with pytest.raises(ConfigError, match="unknown FSDP option"):
        harness.run(RunConfig(**base, fsdp=True, fsdp_options=["shard=all"]))
    assert not (tmp_path / "o").exists(), "nothing written"
    assert parse_fsdp_options(["reshard_after_forward=False"]) == {"reshard_after_forward": False}


def test_resuming_a_sharded_checkpoint_on_another_rank_count_is_a_clear_error(tmp_path):
    folder = tmp_path / "checkpoint-4"
    (folder / "pytorch_model_fsdp_0").mkdir(parents=True)
    for rank in (0, 1):
        (folder / f"rng_state_{rank}.pth").write_bytes(b"")
    checkpoints.check_rank_count(folder, 2)  # the same count: fine
    with pytest.raises(ConfigError, match="written by 2 ranks, and this launch has 3.*--nproc-per-node 2"):
        checkpoints.check_rank_count(folder, 3)
    with pytest.raises(ConfigError, match="written by 2 ranks, and this launch has 1"):
        checkpoints.check_rank_count(folder, 1)


def test_a_sharded_checkpoint_is_complete_only_with_its_metadata(tmp_path):
    folder = tmp_path / "checkpoint-4"
    for part in ("pytorch_model_fsdp_0", "optimizer_0"):
        (folder / part).mkdir(parents=True)
        (folder / part / "__0_0.distcp").write_bytes(b"x")
    torch.save({}, folder / "scheduler.pt")
    (folder / "trainer_state.json").write_text('{"global_step": 4}')
    # killed while torch.distributed.checkpoint wrote it (.metadata comes last): not a checkpoint to resume
    assert "pytorch_model_fsdp_0/.metadata, optimizer_0/.metadata missing" in checkpoints.checkpoint_problem(folder)
    for part in ("pytorch_model_fsdp_0", "optimizer_0"):
        (folder / part / ".metadata").write_bytes(b"m")
    assert checkpoints.checkpoint_problem(folder) is None  # no model.safetensors needed


def test_every_encoder_layer_is_found_though_adapters_gives_each_its_own_class():
    model = BertModel(tiny_bert_config(layers=3))
    adapters.init(model)
    model.add_adapter("a", config="double_seq_bn")
    layers = encoder_layers(model)
    assert len(layers) == 3 and layers is model.encoder.layer
    assert len({type(layer) for layer in layers}) == 3  # why accelerate's match by class name would miss two
