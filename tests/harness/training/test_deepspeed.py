"""DeepSpeed ZeRO (``--deepspeed CONFIG.json``) on 2 CPU ranks over gloo: train -> export -> evaluate in
one process, with only the trainable parameters in the optimizer; and bad input, refused before any
step (these run without deepspeed installed).

The launched tests skip where deepspeed cannot be imported (it is the optional extra ``deepspeed``).
"""

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import safetensors.torch
import torch
from helpers import glue_dir
from launching import environment, finish, start, torchrun
from sharded_runs import export_tensors
from transformers import BertModel

from pals_adapters.errors import ConfigError
from pals_adapters.harness import RunConfig
from pals_adapters.harness.cli import main as cli
from pals_adapters.harness.training import runner as harness

GLUE = glue_dir()
needs_glue = pytest.mark.skipif(GLUE is None, reason="GLUE data not found: set GLUE_DIR or provide ../shared/glue")
needs_deepspeed = pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None,
    reason='deepspeed not installed: pip install "pals-adapters[deepspeed]"',
)


def zero_config(path, stage: int, **extra) -> str:
    """A DeepSpeed config as docs/scaling-out.md gives it: ZeRO stage, the rest "auto" (from the run)."""
    settings = {
        "zero_optimization": {"stage": stage},
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        **extra,
    }
    path.write_text(json.dumps(settings))
    return str(path)


def optimizer_elements(step_dir) -> int:
    """How many parameter elements DeepSpeed's optimizer holds, over all ranks: its fp32 partitions
    (ZeRO-2: single_partition_of_fp32_groups, ZeRO-3: fp32_flat_groups), padding included."""
    total = 0
    for path in sorted(step_dir.glob("*optim_states.pt")):
        state = torch.load(path, map_location="cpu", weights_only=False)["optimizer_state_dict"]
        groups = state.get("single_partition_of_fp32_groups") or state["fp32_flat_groups"]
        total += sum(group.numel() for group in groups)
    return total


def zero_options(model: str, out, base: str, config_path: str) -> list[str]:
    """A 2-rank PALs run's options: 4 steps, DeepSpeed checkpoints at steps 2 and 4, weight decay 0.1
    (a frozen parameter in the optimizer would move)."""
    return [
        *("-m", "pals_adapters.harness.cli", "train", "--model", model, "--tasks", "rte", "stsb"),
        *("--glue-dir", str(GLUE), "--data-source", "local", "--max-steps", "4", "--steps-per-epoch", "2"),
        *("--batch-size", "4", "--max-length", "48", "--lr", "1e-3", "--max-train-examples", "16"),
        *("--max-eval-examples", "8", "--eval-batch-size", "8", "--logging-steps", "1", "--save-steps", "2"),
        *("--weight-decay", "0.1", "--method", "pals", "--base", base, "--output-dir", str(out)),
        *("--deepspeed", config_path),
    ]


def launch(options: list[str]) -> dict:
    """torchrun, 2 ranks, bounded; the run's results."""
    code, output = finish(start(torchrun(*options)))
    assert code == 0, output[-4000:]
    return json.loads((Path(options[options.index("--output-dir") + 1]) / "results.json").read_text())


def build_shared_memory_op():
    """DeepSpeed compiles its CPU ranks' shared-memory op (C++, with ninja) on first use and caches it. A
    fresh machine builds it in the first launch, which took over the launch limit on 2 busy cores; built
    here once, in a process of its own and with time to spare, the launches only load it."""
    code = "from deepspeed.comm.torch import build_shm_op; build_shm_op()"
    done = subprocess.run([sys.executable, "-c", code], env=environment(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]


@pytest.fixture(scope="module")
def zero_runs(tmp_path_factory, tiny_model_dir):
    """The runs of this module, launched once each on first use: {(stage, base): (folder, results)}."""
    build_shared_memory_op()
    root = tmp_path_factory.mktemp("deepspeed")
    shutil.copytree(tiny_model_dir, root / "model")
    runs = {}

    def get(stage: int, base: str):
        if (stage, base) not in runs:
            folder = root / f"zero{stage}-{base}"
            folder.mkdir()
            config_path = zero_config(folder / "ds.json", stage)
            out = folder / "run"
            runs[stage, base] = out, launch(zero_options(str(root / "model"), out, base, config_path))
        return runs[stage, base]

    return get


@pytest.mark.slow
@needs_deepspeed
@needs_glue
@pytest.mark.parametrize("stage, base", [(2, "frozen"), (3, "finetune")])
def test_a_deepspeed_run_exports_what_one_process_evaluates_to_its_scores(stage, base, zero_runs, tmp_path):
    out, results = zero_runs(stage, base)
    assert results["config"]["deepspeed"].endswith("ds.json")
    checkpoint = out / "checkpoint-4"  # DeepSpeed's own, written by both ranks: a real 2-rank ZeRO run
    assert sorted(p.name for p in checkpoint.glob("rng_state_*.pth")) == ["rng_state_0.pth", "rng_state_1.pth"]
    assert len(list((checkpoint / "global_step4").glob("zero_pp_rank_*_optim_states.pt"))) == 2

    # The optimizer holds the trainable parameters (ranks' partitions, padded to the rank count), no more:
    # with a frozen base that is about 1.4k elements of the model's 1M.
    trainable = results["parameters"]["trainable"]
    assert trainable <= optimizer_elements(checkpoint / "global_step4") < trainable + 64
    if base == "frozen":  # with weight decay 0.1, a base parameter in the optimizer would have moved
        saved = safetensors.torch.load_file(checkpoint / "model.safetensors")
        start_weights = BertModel.from_pretrained(out.parent.parent / "model").state_dict()
        base_names = [name for name in saved if name.removeprefix("encoder.") in start_weights]
        assert len(base_names) > 20
        assert all(torch.equal(saved[n], start_weights[n.removeprefix("encoder.")]) for n in base_names)

    # rank 0 gathered full tensors (ZeRO-3: partitioned until then) and exported as one process would
    report = tmp_path / "eval.json"
    threads = torch.get_num_threads()
    # one thread, as each rank ran (launching.environment), for the same arithmetic: with two threads the
    # STS-B Pearson of this 4-step run (8 dev examples) came out 2e-5 away from the run's
    torch.set_num_threads(1)
    try:
        assert cli(["evaluate", str(out / "export"), "--out", str(report)]) == 0
    finally:
        torch.set_num_threads(threads)
    tasks = json.loads(report.read_text())["tasks"]
    for task in ("rte", "stsb"):
        for name, value in tasks[task]["metrics"].items():
            assert value == pytest.approx(results["metrics"][name], abs=1e-6), name


@pytest.mark.slow
@needs_deepspeed
@needs_glue
def test_a_zero2_run_resumed_from_its_step_2_checkpoint_ends_bit_for_bit_like_the_whole_run(zero_runs, tmp_path):
    whole_out, whole = zero_runs(2, "frozen")
    folder = tmp_path / "resumed"
    shutil.copytree(whole_out.parent, folder)  # the run folder as it was after step 2 (DeepSpeed's checkpoint-2)
    out = folder / "run"
    for name in ("checkpoint-4", "export", "results.json", "training.png"):
        shutil.rmtree(out / name) if (out / name).is_dir() else (out / name).unlink(missing_ok=True)
    saved_at_step_2 = (out / "checkpoint-2" / "trainer_state.json").stat().st_mtime_ns
    resumed = launch(
        [*zero_options(whole["config"]["model"], out, "frozen", whole["config"]["deepspeed"]), "--resume", "last"]
    )
    assert resumed["config"]["resume"] == "last"
    a, b = export_tensors(whole_out / "export"), export_tensors(out / "export")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "not bit-identical"
    losses = lambda r: [row["loss"] for row in r["log_history"] if "loss" in row]  # noqa: E731
    assert losses(resumed) == losses(whole)  # steps 1-2 as the checkpoint recorded them, 3-4 trained again
    # a run that started afresh would have trained steps 1-2 again and written checkpoint-2 anew
    assert (out / "checkpoint-2" / "trainer_state.json").stat().st_mtime_ns == saved_at_step_2
    assert resumed["metrics"]["stsb_pearson"] == whole["metrics"]["stsb_pearson"]


# --- bad input (no launch, no deepspeed needed) -----------------------------------------------------


@pytest.fixture
def settings(tiny_model_dir, tmp_path):
    if GLUE is None:
        pytest.skip("GLUE data not found")
    return dict(model=str(tiny_model_dir), tasks=["rte"], glue_dir=str(GLUE), output_dir=str(tmp_path / "o"))


def refused(config: RunConfig, message: str, tmp_path) -> None:
    with pytest.raises(ConfigError, match=message):
        harness.run(config)
    assert not (tmp_path / "o").exists(), "nothing written"


@pytest.mark.parametrize(
    "text, message",
    [
        (None, "is not a file; give the path of a DeepSpeed JSON config"),
        ("zero_optimization: {stage: 2}", "is not JSON"),
        ("[2]", "holds a JSON list, not an object"),
        ('{"optimizer": {"type": "Adam"}}', "remove the optimizer section.*--adapter-lr"),
        ('{"scheduler": {"type": "WarmupLR"}}', "remove the scheduler section.*--warmup-ratio"),
        ('{"zero_optimization": {"stage": 4}}', "stage=4.*give 0, 1, 2 or 3"),
        ('{"zero_optimization": 2}', "zero_optimization .*must be an object"),
        (
            '{"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": false}}',
            "export at the end gathers",
        ),
    ],
)
def test_a_bad_deepspeed_config_is_refused_before_anything_is_written(text, message, settings, tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")  # as under a launcher: the config is what is wrong
    path = tmp_path / "ds.json"
    if text is not None:
        path.write_text(text)
    refused(RunConfig(**settings, deepspeed=str(path)), message, tmp_path)


def test_deepspeed_with_fsdp_is_refused(settings, tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    config = RunConfig(**settings, deepspeed=zero_config(tmp_path / "ds.json", 2), fsdp=True)
    refused(config, "deepspeed and fsdp are two sharding engines.*drop --fsdp or --deepspeed", tmp_path)


def test_mixed_batches_with_deepspeed_are_refused(settings, tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    config = RunConfig(**settings, deepspeed=zero_config(tmp_path / "ds.json", 2))
    config.tasks, config.batching = ["rte", "mrpc"], "mixed"
    refused(config, "--batching mixed is not supported with DeepSpeed", tmp_path)


def test_deepspeed_not_installed_says_how_to_install_it(settings, tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # import deepspeed (and find_spec) now fail
    config = RunConfig(**settings, deepspeed=zero_config(tmp_path / "ds.json", 2))
    refused(config, r'not installed; install it with pip install "pals-adapters\[deepspeed\]"', tmp_path)


@needs_deepspeed
def test_deepspeed_without_a_distributed_launch_is_refused(settings, tmp_path, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    config = RunConfig(**settings, deepspeed=zero_config(tmp_path / "ds.json", 2))
    refused(config, "needs a distributed launch of 2 or more ranks.*torchrun", tmp_path)


def test_zero3_gathers_full_weights_for_the_export(tmp_path):
    from pals_adapters.harness.training.deepspeed_setup import read_deepspeed_config

    zero = read_deepspeed_config(zero_config(tmp_path / "ds.json", 3))["zero_optimization"]
    assert zero == {"stage": 3, "stage3_gather_16bit_weights_on_model_save": True}
    assert read_deepspeed_config(zero_config(tmp_path / "two.json", 2))["zero_optimization"] == {"stage": 2}


def test_deepspeed_is_a_yaml_key_and_a_train_option(tmp_path):
    from pals_adapters.harness.cli import build_parser
    from pals_adapters.harness.cli.options import config_file_defaults, config_from_args

    def parsed(argv):
        return config_from_args(build_parser(config_file_defaults(argv)).parse_args(argv))

    path = tmp_path / "run.yaml"
    path.write_text("deepspeed: ds.json\n")
    assert parsed(["train", "--config", str(path)]).deepspeed == "ds.json"
    assert parsed(["train", "--deepspeed", "other.json"]).deepspeed == "other.json"
    assert parsed(["train"]).deepspeed is None
