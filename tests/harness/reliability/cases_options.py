"""Bad-input rows of settings: names, options, config files, PAL settings and launchers, refused before anything
trains or is written.
Each row: (action taking the tmp folder, the error, fragments its message must hold)."""

import json
import shutil
from pathlib import Path

import adapters
import torch
from helpers import batch, tiny_bert_config
from reliability_cases import TINY, cli_train, evaluate_with, predict_export, user_run, user_tasks, wrapped_bert
from transformers import BertModel, DistilBertConfig, DistilBertModel, GPT2Config, GPT2Model

from pals_adapters.errors import ConfigError, UnknownNameError, UnsupportedModelError
from pals_adapters.harness.cli import main
from pals_adapters.harness.data.sampling import make_sampler
from pals_adapters.harness.methods.method import check_base_mode
from pals_adapters.harness.methods.model import MultiTaskModel
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.harness.tasks.glue import GLUE_TASKS, get_task
from pals_adapters.harness.training import runner
from pals_adapters.pals.config import PALsConfig


def cli(*argv):
    def call(tmp):

        return main(["train", "--output-dir", str(tmp / "run"), *argv])

    return call


def cli_config_file(tmp):

    (tmp / "run.yaml").write_text("metod: pals\n")
    return main(["train", "--config", str(tmp / "run.yaml")])


def add_pal(config, model=None):
    return lambda tmp: (model or wrapped_bert)().add_adapter("t", config=config)


def gpt2():
    model = GPT2Model(GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=99))
    adapters.init(model)
    return model


def forward_unknown_task(tmp):
    model = MultiTaskModel(BertModel(tiny_bert_config()), {"rte": GLUE_TASKS["rte"]}, get_method("pals"), "frozen")
    ids, mask = batch()
    return model("cola", ids, mask)


def task_named(name):
    """``train --task-file`` with a task of that name (refused before anything trains)."""

    def action(tmp):
        path = user_tasks(tmp, names=[json.dumps(name)])
        return main(["train", "--output-dir", str(tmp / "run"), "--task-file", str(path)])

    return action


def config_file(text):
    def action(tmp):
        (tmp / "run.yaml").write_text(text)
        return main(["train", "--config", str(tmp / "run.yaml"), "--output-dir", str(tmp / "run")])

    return action


def ca_mtl_train(*argv, positions=None):
    """``train --tasks rte`` on the tiny model, or on a copy whose config has ``positions`` positions (the
    refusals expected come from validating the run, which reads only the model's config)."""

    def action(tmp):
        model = Path(TINY["model"])
        if positions is not None:
            model = tmp / "model"
            shutil.copytree(TINY["model"], model)
            config = json.loads((model / "config.json").read_text())
            (model / "config.json").write_text(json.dumps({**config, "max_position_embeddings": positions}))
        return main(["train", "--output-dir", str(tmp / "run"), "--model", str(model), "--tasks", "rte", *argv])

    return action


def schedule_with(*argv):
    def action(tmp):
        return main(["schedule", "--task-file", str(user_tasks(tmp)), "--steps", "10", *argv])

    return action


def deepspeed_config(**settings):
    """A run of the tiny model with a DeepSpeed config holding ``settings`` (dotted keys): refused with the
    other option checks, before the run's folder (and its run_config.json) exists."""

    def action(tmp):
        config = {"zero_optimization": {"stage": 2}}
        for key, value in settings.items():
            *parents, last = key.split("__")
            node = config
            for part in parents:
                node = node.setdefault(part, {})
            node[last] = value
        (tmp / "ds.json").write_text(json.dumps(config))
        try:
            return runner.run(user_run(tmp, deepspeed=str(tmp / "ds.json")))
        finally:
            assert not (tmp / "run").exists(), "the run's folder was written before the refusal"

    return action


def distilbert_fed_token_type_ids(tmp):
    """A DistilBERT base whose (BERT) tokenizer returns token_type_ids: its forward takes none, so it gets none."""
    config = DistilBertConfig(vocab_size=99, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=64)
    model = MultiTaskModel(DistilBertModel(config), {"rte": GLUE_TASKS["rte"]}, get_method("pals"), "frozen")
    ids, mask = batch()
    return tuple(model("rte", ids, mask, token_type_ids=torch.zeros_like(ids))["logits"].shape)


def deepspeed_auto_values(tmp):
    """ "auto" takes the run's value: no contradiction whatever the run's batch size and precision."""
    from pals_adapters.harness.training.deepspeed_setup import check_against_run

    settings = {"bf16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto"}
    return check_against_run(settings, user_run(tmp, batch_size=7), "ds.json")


OPTIONS = {
    # unknown names
    "unknown-task": (lambda tmp: get_task("rtee"), UnknownNameError, ["task 'rtee'", "choose one of", "rte"]),
    "unknown-method": (lambda tmp: get_method("palz"), UnknownNameError, ["method 'palz'", "houlsby"]),
    "unknown-preset": (
        lambda tmp: get_method("pals_xl[hidden_size_aug=12]"),
        UnknownNameError,
        ["method 'pals_xl'", "pals_no_share", "low_rank"],
    ),
    "unknown-sampler": (
        lambda tmp: make_sampler("anealed", {"rte": 5, "stsb": 5}, total_steps=10),
        UnknownNameError,
        ["sampling strategy 'anealed'", "annealed"],
    ),
    "unknown-base-mode": (
        lambda tmp: check_base_mode(get_method("pals"), "half"),
        UnknownNameError,
        ["base mode 'half'", "frozen", "finetune"],
    ),
    "temperature-without-alpha": (
        lambda tmp: make_sampler("temperature", {"rte": 5}, total_steps=10),
        ConfigError,
        ["alpha"],
    ),
    "unknown-task-in-model": (forward_unknown_task, ConfigError, ["task 'cola'", "['rte']"]),
    # PAL settings
    "d_s-zero": (lambda tmp: PALsConfig(hidden_size_aug=0), ConfigError, ["PALsConfig.hidden_size_aug=0", "positive"]),
    "d_s-negative": (lambda tmp: PALsConfig(hidden_size_aug=-12), ConfigError, ["hidden_size_aug=-12"]),
    "heads-do-not-divide-d_s": (
        lambda tmp: PALsConfig(hidden_size_aug=10, num_attention_heads=4),
        ConfigError,
        ["hidden_size_aug=10", "num_attention_heads=4"],
    ),
    "zero-heads": (lambda tmp: PALsConfig(num_attention_heads=0), ConfigError, ["num_attention_heads=0"]),
    "layer-span-unknown": (lambda tmp: PALsConfig(layers="middle"), ConfigError, ["PALsConfig.layers='middle'", "top"]),
    "layer-out-of-range": (
        add_pal(PALsConfig(leave_out=[1, 7])),
        ConfigError,
        ["PALsConfig.leave_out", "[7] do not exist", "0..3"],
    ),
    "method-override-invalid": (
        lambda tmp: MultiTaskModel(
            BertModel(tiny_bert_config()), {"rte": GLUE_TASKS["rte"]}, get_method("pals[hidden_size_aug=-4]"), "frozen"
        ),
        ConfigError,
        ["hidden_size_aug=-4"],
    ),
    # models and weights
    "unsupported-architecture": (add_pal("pals", gpt2), UnsupportedModelError, ["model_type 'gpt2'", "bert"]),
    # contradictory or invalid CLI options (exit code 2, message on stderr)
    "cli-separate-with-frozen-base": (
        cli("--method", "separate", "--base", "frozen"),
        SystemExit,
        ["method 'separate'", "--base frozen", "--base finetune"],
    ),
    "cli-select-best-without-eval-steps": (cli("--select-best"), SystemExit, ["select_best needs eval_steps"]),
    "cli-zero-steps": (cli("--max-steps", "0"), SystemExit, ["max_steps=0"]),
    "cli-unknown-precision": (cli("--precision", "fp8"), SystemExit, ["precision='fp8'", "bf16"]),
    "cli-malformed-method": (cli("--method", "pals[hidden_size_aug="), SystemExit, ["pals[hidden_size_aug="]),
    "cli-config-file-unknown-key": (cli_config_file, SystemExit, ["run.yaml", "metod"]),
    # issue 9.4: names and settings checked before training
    "tasks-listed-twice-in-two-spellings": (cli("--tasks", "rte", "RTE"), SystemExit, ["'rte' is listed twice"]),
    **{
        f"task-name-{label}": (task_named(name), SystemExit, [f"task name {name!r}", "letters, digits"])
        for label, name in [
            ("base", "base"),
            ("slash", "a/b"),
            ("dotted", "a.b"),
            ("300-characters", "x" * 300),
            ("leading-dot", ".hidden"),
        ]
    },
    "negative-adapter-lr": (cli("--adapter-lr=-1e-3"), SystemExit, ["adapter_lr=-0.001", "must be > 0"]),
    "max-eval-examples-minus-one": (cli("--max-eval-examples", "-1"), SystemExit, ["max_eval_examples=-1", "> 0"]),
    "eval-steps-zero": (cli("--eval-steps", "0"), SystemExit, ["eval_steps=0", "> 0"]),
    "warmup-ratio-above-one": (cli("--warmup-ratio", "1.5"), SystemExit, ["warmup_ratio=1.5", "< 1"]),
    "max-length-beyond-positions": (
        cli_train("--max-length", "4096", "--tasks", "rte", model=True),
        SystemExit,
        ["max_length=4096", "has 128 positions", "max_length <= 128"],
    ),
    "ca-mtl-layout-shorter-than-max-length": (
        ca_mtl_train("--method", "ca_mtl[max_seq_length=16]", "--max-length", "32"),
        SystemExit,
        ["max_length=32", "max_seq_length=16 tokens", "choose max_length <= 16", "max_seq_length=32"],
    ),
    "ca-mtl-default-layout-under-max-length-200-on-a-512-position-base": (
        ca_mtl_train("--method", "ca_mtl", "--max-length", "200", positions=512),
        SystemExit,
        ["max_length=200", "max_seq_length=128 tokens", "choose max_length <= 128"],
    ),
    "ca-mtl-more-frozen-layers-than-the-model-has": (
        ca_mtl_train("--method", "ca_mtl[num_frozen_layers=5]", "--max-length", "32"),
        SystemExit,
        ["num_frozen_layers=5", "the model has only 2 layers"],
    ),
    "model-that-does-not-exist": (
        cli("--model", "/no/such/model", "--tasks", "rte"),
        SystemExit,
        ["model '/no/such/model'", "cannot read its config"],
    ),
    "config-file-yaml-syntax-error": (
        config_file("method: pals\ntasks: [rte, \n  sst2: x\n"),
        SystemExit,
        ["run.yaml, line", "not valid YAML"],
    ),
    "config-file-select-best-as-string": (
        config_file("select_best: 'false'\n"),
        SystemExit,
        ["select_best='false' (str)", "true or false"],
    ),
    "config-file-tasks-as-string": (
        config_file("tasks: rte\n"),
        SystemExit,
        ["tasks='rte' (str)", "a list of str values"],
    ),
    "config-file-steps-as-float": (config_file("max_steps: 10.5\n"), SystemExit, ["max_steps=10.5", "whole"]),
    "train-zero-threads": (
        lambda tmp: main(["train", "--threads", "0", "--output-dir", str(tmp / "run")]),
        SystemExit,
        ["threads=0", "must be > 0"],
    ),
    "evaluate-zero-threads": (evaluate_with("--threads", "0"), SystemExit, ["threads=0", "whole number >= 1"]),
    "train-compile-mode-without-compile": (
        lambda tmp: main(["train", "--compile-mode", "reduce-overhead", "--output-dir", str(tmp / "run")]),
        SystemExit,
        ["compile_mode='reduce-overhead' is a mode of torch.compile", "needs compile: true (--compile)"],
    ),
    "train-unknown-compile-mode": (
        lambda tmp: main(["train", "--compile", "--compile-mode", "fast", "--output-dir", str(tmp / "run")]),
        SystemExit,
        ["unknown compile mode 'fast'", "reduce-overhead", "max-autotune"],
    ),
    "evaluate-compile-mode-without-compile": (
        evaluate_with("--compile-mode", "max-autotune"),
        SystemExit,
        ["--compile-mode 'max-autotune' is a mode of torch.compile", "needs --compile as well"],
    ),
    "predict-unknown-compile-mode": (
        predict_export("--compile", "--compile-mode", "reduce_overhead"),
        SystemExit,
        ["unknown compile mode 'reduce_overhead'", "reduce-overhead"],
    ),
    "schedule-max-train-examples-zero": (
        schedule_with("--max-train-examples", "0"),
        SystemExit,
        ["--max-train-examples 0", "give a number >= 1"],
    ),
    "schedule-misspelt-option-shows-the-schedule-usage": (
        schedule_with("--max-train-exampels", "5"),
        SystemExit,
        ["usage: pals-bench schedule", "unrecognized arguments: --max-train-exampels 5"],
    ),
    # DeepSpeed settings that contradict the run's, refused before anything is written
    "deepspeed-bf16-in-an-fp32-run": (
        deepspeed_config(bf16__enabled=True),
        ConfigError,
        ["ds.json contradicts the run", "bf16.enabled=true (the run: false, from --precision fp32)", '"auto"'],
    ),
    "deepspeed-fp16-in-an-fp32-run": (
        deepspeed_config(fp16__enabled=True),
        ConfigError,
        ["fp16.enabled=true (the run: false, from --precision fp32)"],
    ),
    "deepspeed-micro-batch-other-than-the-runs": (
        deepspeed_config(train_micro_batch_size_per_gpu=7),
        ConfigError,
        ["train_micro_batch_size_per_gpu=7", "--batch-size 4 examples of one task", "one item"],
    ),
    "deepspeed-gradient-accumulation": (
        deepspeed_config(gradient_accumulation_steps=2, train_batch_size="auto"),
        ConfigError,
        ["gradient_accumulation_steps=2", "does not accumulate gradients"],
    ),
}
