"""One entry point for a multi-task run: `RunConfig` -> `run()` -> per-task results and exports.

A single task is the same run with one task: "separate models per task" is a baseline run.
The settings and their checks live in `run_config`; the output folder's lock, record and resume
checks in `run_folder`.
"""

import contextlib
import json
import logging
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import safetensors.torch
import torch
from transformers import TrainingArguments, set_seed

from ...errors import ConfigError
from ...pretrained import pretrained_tokenizer
from ..checks import resolve_task_names, resolve_tasks  # noqa: F401  (public here too)
from ..data.batches import MultiTaskBatches, unwrap_single_item
from ..data.sampling import make_sampler
from ..data.selection import SPLIT_FILE
from ..export import EvaluationRecord, export_run, fingerprint_model
from ..export.added_tasks import export_added_tasks
from ..export.read import load_shared_modules
from ..export.write import check_other_tasks_kept, other_tasks
from ..methods.model import build_model, resolve_model
from ..plan import RunPlan, plan_run
from ..run_config import RunConfig
from ..scoring.report import DEV_PREDICTIONS_FILE, parameter_summary, plot_training, task_metrics, write_dev_predictions
from ..serving.add_tasks import SharedBase
from ..tasks.splits import SkippedRows
from .checkpoints import check_rank_count
from .compiling import prepare_compile, trainer_compile_environment
from .deepspeed_setup import check_deepspeed_launch, deepspeed_settings
from .run_data import load_dev_sets, load_train_sets, regression_label_stats  # noqa: F401 (public here too)
from .run_environment import run_precision_environment, torch_threads
from .run_folder import prepare_run_folder, run_lock
from .segments import RunSegments
from .sharding import check_fsdp_launch, fsdp_plugin, unsharded_copy
from .trainer import MultiTaskTrainer

logger = logging.getLogger(__name__)


def build_trainer(config: RunConfig, model, tokenizer, train, dev, callbacks=(), segments=None) -> MultiTaskTrainer:
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    sampler = make_sampler(
        config.sampler,
        {name: len(data) for name, data in train.items()},
        seed=config.seed,
        total_steps=config.max_steps,
        steps_per_epoch=config.steps_per_epoch,
        alpha=config.alpha,
    )
    batches = MultiTaskBatches(
        train,
        sampler,
        tokenizer,
        config.batch_size,
        config.max_steps,
        world_size=world_size,
        seed=config.seed,
        all_tasks=config.sampler == "mt_uncertainty",
        group_by_length=config.group_by_length,
        mixed=config.batching == "mixed" and config.sampler != "mt_uncertainty",  # MT-U picks its own mix
    )
    evaluate_during = config.eval_steps is not None
    if config.compile:
        prepare_compile(len(train))
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
        torch_compile=config.compile,
        torch_compile_mode=config.compile_mode,
        report_to=list(config.report_to),
        dataloader_num_workers=0,
        dataloader_pin_memory=torch.cuda.is_available(),
        remove_unused_columns=False,
        # Each step trains one task: the other tasks' parameters get no gradient.
        ddp_find_unused_parameters=True,
        # Without it, accelerate sees no device to distribute over on a CPU-only machine: under torchrun
        # every rank would then train on its own (DistributedType.NO) instead of using gloo DDP.
        # bf16 without a GPU: Trainer autocasts on the CPU only when told to use it (fp32 master weights).
        use_cpu=(world_size > 1 or config.precision == "bf16") and not torch.cuda.is_available(),
        # per-step progress bars in a terminal; a log file (stderr not a terminal) gets the periodic log lines
        # instead (every logging_steps), not a bar redrawn at every step
        disable_tqdm=not sys.stderr.isatty(),
        deepspeed=deepspeed_settings(config),  # DeepSpeed's engine, through transformers' integration
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
        scale_shared_lr=bool(config.scale_shared_lr),
        example_batch_size=config.batch_size,
        mixed_batches=config.batching == "mixed",
        sampling_epochs=(config.steps_per_epoch, config.max_steps) if config.sampler == "annealed" else None,
        fsdp_plugin=fsdp_plugin(config.fsdp_options) if config.fsdp else None,
        run_segments=segments,
        callbacks=list(callbacks),
    )


def evaluation_record(config: RunConfig, dev: dict | None = None) -> EvaluationRecord:
    """How the run scores its tasks at the end: `pals-bench evaluate` repeats it by default. ``dev``: the
    dev sets it scored (`load_dev_sets`), for the number of examples in each."""
    glue_dir = config.glue_dir or os.environ.get("GLUE_DIR")
    return EvaluationRecord(
        max_eval_examples=config.max_eval_examples,
        eval_batch_size=config.eval_batch_size,
        glue_dir=str(Path(glue_dir).resolve()) if glue_dir else None,
        data_source=config.data_source,
        examples_scored={t: {s: len(d) for s, d in splits.items()} for t, splits in dev.items()} if dev else None,
    )


def run(config: RunConfig, callbacks=()) -> dict:
    """Trains, evaluates on the dev sets, exports every task; returns and writes ``results.json``.
    ``callbacks``: transformers ``TrainerCallback`` objects for the run's Trainer (e.g. a progress line).

    Every setting is checked, the output folder locked and a resume compared with the run it continues
    before anything is loaded."""
    started = time.time()
    plan = plan_run(config)  # every setting checked, the method parsed once: the rest reads the plan
    check_deepspeed_launch(plan.settings)  # first: --deepspeed with --fsdp is refused as such
    check_fsdp_launch(plan.settings)
    writer = int(os.environ.get("RANK", "0")) == 0  # under torchrun only rank 0 writes (and locks)
    settings = plan.settings
    with (
        run_lock(plan.output_dir) if writer else contextlib.nullcontext(),
        torch_threads(settings.threads),
        trainer_compile_environment(settings.compile),
        run_precision_environment(settings.precision),
    ):
        resume = prepare_run_folder(settings, plan.task_specs, writer=writer)
        if resume is not None:
            check_rank_count(resume, int(os.environ.get("WORLD_SIZE", "1")))
        return _train(plan, resume, started, callbacks)


def trainer_is_writer() -> bool:
    """Under torchrun only rank 0 writes."""
    return int(os.environ.get("RANK", "0")) == 0


def _check_added_base(config: RunConfig, shared: SharedBase, model, resume: str | None) -> None:
    """Before any step: the model holds the export's base as it is now, and so does the checkpoint resumed."""
    load_shared_modules(model, Path(shared.source) if shared.base_mode == "finetune" else None)
    if fingerprint_model(model) != shared.fingerprint:
        raise ConfigError(
            f"add_to={config.add_to}: the base loaded from {shared.source} is not the base the export's tasks were "
            "trained on (its weights changed since); nothing was trained"
        )
    if resume is not None:  # the checkpoint holds the (frozen) base it trained against: load it as resuming will
        safetensors.torch.load_model(model, str(Path(resume) / "model.safetensors"), strict=False)
        if fingerprint_model(model) != shared.fingerprint:
            raise ConfigError(
                f"resume: {resume} trained against another base than the one the export {config.add_to} has now "
                "(the export was re-exported or replaced since this run started), so its tasks would not load "
                "beside the export's; start a new run (new output_dir) to train them on the export's base"
            )


def _check_export_folder(config: RunConfig, model, tokenizer) -> None:
    """Before any step: the export at the end must not delete tasks added to the run's export folder later."""
    export_dir = Path(config.output_dir) / "export"
    others = other_tasks(export_dir, model.tasks)
    if others and config.base == "finetune":
        raise ConfigError(
            f"{export_dir} holds tasks {sorted(others)} that this run does not train (added to that export later "
            "with add_to?); they need its base, which this run's training replaces, so the export at the end would "
            "delete them. Choose another output_dir, or move them away first"
        )
    check_other_tasks_kept(export_dir, model, tokenizer)


def _device_name(device: torch.device) -> str:
    """``cpu`` or ``cuda:0 (NVIDIA H100 80GB HBM3)``: which machine a run's wall time belongs to."""
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)


def _train(plan: RunPlan, resume: str | None, started: float, callbacks=()) -> dict:
    config, specs, shared, base_source = plan.settings, plan.task_specs, plan.shared, plan.base_source
    set_seed(config.seed)
    tokenizer = pretrained_tokenizer(resolve_model(base_source))
    skipped: list[SkippedRows] = []  # malformed rows that tasks with skip_bad_rows left out (logged, recorded)
    held_out: dict = {}  # with selection: which training rows each task's selection part holds
    train = load_train_sets(config, specs, tokenizer, skipped, held_out)
    dev = load_dev_sets(config, specs, tokenizer, skipped)
    label_stats = regression_label_stats(train, specs) if config.standardise_targets else None

    def new_model():
        fresh = build_model(base_source, specs, plan.method, plan.base_mode)
        if label_stats is not None:
            fresh.standardise_targets(label_stats)
        return fresh

    model = new_model()
    if shared is not None:
        _check_added_base(config, shared, model, resume)
    elif config.export and trainer_is_writer():
        _check_export_folder(config, model, tokenizer)
    parameters = parameter_summary(model)  # before a ZeRO-3 engine partitions the weights
    segments = RunSegments.resuming(resume)  # the time and loss of the run before its checkpoint
    trainer = build_trainer(config, model, tokenizer, train, dev, callbacks, segments)
    trainer.train(resume_from_checkpoint=resume)
    metrics = trainer.evaluate()
    results = {
        "config": asdict(config),
        "metrics": {k[len("eval_") :]: v for k, v in metrics.items() if k.startswith("eval_")},
        "train_sizes": {name: len(data) for name, data in train.items()},
        "parameters": parameters,
        "log_history": trainer.state.log_history,
        "device": _device_name(trainer.args.device),
        "threads": torch.get_num_threads(),
        "per_class": trainer.class_reports,
        "skipped_rows": _skipped_record(skipped),
        "scored_on": "selection" if config.selection is not None else "dev",
    }
    # start to the dev table (exports not included), summed over the run's segments when it was resumed
    results.update(segments.run_record(time.time() - started, config.batch_size, trainer.state.log_history))
    out = Path(config.output_dir)
    if config.fsdp or config.deepspeed:  # rank 0 exports full tensors, as a single process would
        model = unsharded_copy(trainer, new_model)
    if trainer.is_world_process_zero():
        if plan.export_dir is not None and shared is not None:
            exported = export_added_tasks(
                model,
                list(specs),
                plan.export_dir,
                base_mode=shared.base_mode,
                base_model_name=shared.base_model_name,
                metrics_by_task={t: task_metrics(results["metrics"], t, specs) for t in specs},
                max_length=config.max_length,
                tokenizer=tokenizer,
                evaluation=evaluation_record(config, dev),
                replace=config.replace,
                run_config=config,  # the task cards' training section
            )
            results["exports"] = {task: str(path) for task, path in exported.items()}
        elif plan.export_dir is not None:
            per_task = {t: task_metrics(results["metrics"], t, specs) for t in specs}
            exported = export_run(
                model,
                plan.export_dir,
                base_model_name=config.model,
                metrics_by_task=per_task,
                tokenizer=tokenizer,
                max_length=config.max_length,
                evaluation=evaluation_record(config, dev),
                run_config=config,  # the task cards' training section
            )
            results["exports"] = {task: str(path) for task, path in exported.items()}
        out.mkdir(parents=True, exist_ok=True)
        results["plot"] = _plot(trainer.state.log_history, out / PLOT_FILE)
        write_dev_predictions(trainer.dev_predictions, out / DEV_PREDICTIONS_FILE)  # for paired bootstraps
        if held_out:  # the recorded split: the rows scored, never trained on
            (out / SPLIT_FILE).write_text(json.dumps(held_out, indent=2), encoding="utf-8")
        written = out / f".results.json.tmp-{os.getpid()}"  # then renamed: a folder never holds half a record
        written.write_text(json.dumps(results, indent=2, default=str))
        os.replace(written, out / "results.json")
    return results


PLOT_FILE = "training.png"


def _plot(log_history: list[dict], path: Path) -> str | None:
    """The run's picture (`report.plot_training`); a failure to draw it never fails the run."""
    try:
        written = plot_training(log_history, path)
    except Exception as err:  # noqa: BLE001 - a plot is never worth the run's results
        logger.warning("could not draw %s (%s: %s); the run's results are kept", path, type(err).__name__, err)
        return None
    return str(written) if written is not None else None


def _skipped_record(skipped: list[SkippedRows]) -> dict:
    """``{task: {split: {file, count, first}}}`` of the malformed rows left out (skip_bad_rows)."""
    record: dict = {}
    for report in skipped:
        record.setdefault(report.task, {})[report.split] = report.as_json()
    return record
