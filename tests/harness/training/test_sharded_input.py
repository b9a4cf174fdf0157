"""Bad input to sharded training, refused before anything is launched or written; sharded checkpoints'
completeness; the encoder layers FSDP wraps."""

import adapters
import pytest
import torch
from helpers import tiny_bert_config
from sharded_runs import GLUE, needs_glue
from transformers import BertModel

from pals_adapters.errors import ConfigError
from pals_adapters.harness import RunConfig
from pals_adapters.harness.training import checkpoints
from pals_adapters.harness.training import runner as harness
from pals_adapters.harness.training.sharding import encoder_layers, parse_fsdp_options

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
