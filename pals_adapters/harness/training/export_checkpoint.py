"""Per-task exports of any complete checkpoint of a run (e.g. of a run that was interrupted)."""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import fields
from pathlib import Path

import safetensors.torch

from ...errors import AdapterLoadError, ConfigError, PalsError
from ...pretrained import pretrained_tokenizer
from ..checks import resolve_tasks
from ..export import export_run, fingerprint_model
from ..export.added_tasks import export_added_tasks
from ..export.manifest import EvaluationRecord as Evaluation
from ..methods.model import build_model, resolve_model
from ..methods.registry import current_name, get_method
from ..run_config import RunConfig
from ..scoring.report import task_metrics
from ..serving.add_tasks import SharedBase, check_new_tasks, export_tokenizer, shared_base_of
from ..tasks.spec import spec_from_json
from .checkpoints import (
    RUN_CONFIG,
    RUN_TASKS,
    checkpoint_problem,
    is_sharded,
    last_complete_checkpoint,
)
from .run_folder import MODEL_FOLDER
from .runner import evaluation_record, load_dev_sets
from .sharding import load_sharded_checkpoint

logger = logging.getLogger(__name__)


def recorded_run(run_dir: Path) -> tuple[RunConfig, dict, str]:
    """The run's settings, its tasks as they were resolved when it started (labels in their order then,
    whatever the task file says now), and its model: the name given, or the folder that finds it from this
    directory (exports record a local folder by its path from the export)."""
    config_path = run_dir / RUN_CONFIG
    if not config_path.is_file():
        raise ConfigError(f"{config_path}: missing; point to the output_dir of a `pals-bench train` run")
    try:
        data = json.loads(config_path.read_text(encoding="utf-8"))
        known = {f.name for f in fields(RunConfig)}
        # a run of a renamed method (top_pals) reads as the method's current name, silently
        config = RunConfig(**{k: current_name(v) if k == "method" else v for k, v in data.items() if k in known})
    except (OSError, ValueError, TypeError) as err:
        raise ConfigError(f"{config_path}: not a record of run settings ({err})") from err
    source = config.model
    folder = data.get(MODEL_FOLDER)
    if isinstance(folder, str) and not Path(source).exists() and Path(folder).is_dir():
        source = folder  # a model given as a relative folder, and this is another directory: the record finds it
    tasks_path = run_dir / RUN_TASKS
    if tasks_path.is_file():  # runs since the record held the tasks
        try:
            specs = {name: spec_from_json(spec) for name, spec in json.loads(tasks_path.read_text()).items()}
        except (OSError, ValueError) as err:
            raise ConfigError(f"{tasks_path}: not a record of the run's tasks ({err})") from err
    else:
        specs = resolve_tasks(config)
    return config, specs, source


def export_checkpoint(
    run_dir: str, checkpoint: str | None = None, out: str | None = None, with_base: bool = False
) -> dict[str, str]:
    """Per-task exports of a run's checkpoint (default: its newest one that loads), e.g. of a run that was
    interrupted, or to re-export the best checkpoint. Returns {task or "base": folder}.

    A run that added tasks to an export (``add_to``) adds them to that export again (default: the one it
    added to), as it did, the export's other tasks and base unchanged; the export's base must still be the
    one the run trained against. Any other run's export keeps the tasks added to it later when they can
    stay beside the checkpoint's base; otherwise nothing is written. ``with_base``: a frozen base is written
    into the export too (``<out>/base``), so that it loads with no hub (a fine-tuned base always is)."""
    config, specs, model_source = recorded_run(Path(run_dir))
    if with_base and config.add_to is not None:
        raise ConfigError(
            f"--with-base: {run_dir} added its tasks to the export {config.add_to}, whose base they share as its "
            "other tasks do; leave out --with-base (export that export's run with it instead)"
        )
    method = get_method(config.method)  # parsed once
    shared = None
    if config.add_to is not None:
        try:  # checked before any weight is read
            shared = shared_base_of(out or config.add_to)
        except (AdapterLoadError, ConfigError) as err:
            raise type(err)(
                f"{run_dir} added its tasks to the export {config.add_to} (add_to): its tasks are exported into that "
                f"export (leave out --out), next to the tasks whose base they need; {err}"
            ) from None
        check_new_tasks(shared, (), method)
    if shared is None and out is not None:
        _check_out_folder(Path(run_dir), Path(out))
    if checkpoint is not None:
        _check_own_checkpoint(Path(run_dir), Path(checkpoint))
    checkpoint = checkpoint or last_complete_checkpoint(run_dir)
    source = shared.source if shared is not None else model_source
    if is_sharded(checkpoint):  # an FSDP run's checkpoint: its shards are assembled in this one process
        problem = checkpoint_problem(checkpoint)
        if problem:
            raise ConfigError(f"{checkpoint}: {problem}; give another checkpoint")
        model = build_model(source, specs, method, config.base)
        load_sharded_checkpoint(model, Path(checkpoint))
        return _export(config, specs, shared, model, run_dir, out, model_source, Path(checkpoint), with_base)
    weights = Path(checkpoint) / "model.safetensors"
    if not weights.is_file():
        raise ConfigError(f"{weights}: missing; give a checkpoint-N folder of the run")
    problem = checkpoint_problem(checkpoint)
    if problem and "model.safetensors" in problem:
        raise ConfigError(f"{checkpoint}: {problem}; give another checkpoint")
    model = build_model(source, specs, method, config.base)
    missing, unexpected = safetensors.torch.load_model(model, str(weights), strict=False)
    # load_model already leaves out of `missing` a tied name whose tensor the file holds under another name
    if missing or unexpected:
        raise ConfigError(
            f"{weights} does not match the run's model: missing {sorted(missing)[:4]}, "
            f"unexpected {sorted(unexpected)[:4]}"
        )
    return _export(config, specs, shared, model, run_dir, out, model_source, Path(checkpoint), with_base)


def _check_own_checkpoint(run_dir: Path, checkpoint: Path) -> None:
    """The checkpoint must be one of the run's: another run's weights under this run's manifest and card (its
    settings, max length, seed) would describe a model they are not."""
    if checkpoint.resolve().parent != run_dir.resolve():
        raise ConfigError(
            f"--checkpoint {checkpoint} is not a checkpoint of the run {run_dir} (it is in {checkpoint.parent}); "
            f"export it from its own run: pals-bench export {checkpoint.parent} --checkpoint {checkpoint}"
        )


def _check_out_folder(run_dir: Path, out: Path) -> None:
    """``--out`` names a new or empty folder, or the run's own export: an export there replaces what it holds,
    and the tasks of another export (another run's, or one exported before) are not this run's to replace."""
    if out.resolve() == (run_dir / "export").resolve() or not out.is_dir():
        return
    held = sorted(p.name for p in out.iterdir() if (p / "manifest.json").is_file())
    if held:
        raise ConfigError(
            f"--out {out} holds an export already ({', '.join(held[:6])}); exporting {run_dir} there would replace "
            "it. Give a new folder (or move that export away); the run's own export folder is "
            f"{run_dir / 'export'}. Nothing written"
        )


def _checkpoint_scores(checkpoint: Path, config: RunConfig, specs: dict, tokenizer) -> tuple[dict | None, Evaluation]:
    """The dev scores the run measured at the checkpoint's step (its ``trainer_state.json``) by task, and the
    evaluation record with the number of dev examples of each split they are of (the run's dev sets, read
    again as the run read them). (None, the record without counts) where the run did not score at that step,
    or where its dev sets cannot be read now: a card never states scores without what they were measured on."""
    try:
        state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
        step = state["global_step"]
        scored = [e for e in state["log_history"] if e.get("step") == step and any(k.startswith("eval_") for k in e)]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        scored = []
    if not scored:
        return None, evaluation_record(config)
    try:
        dev = load_dev_sets(config, specs, tokenizer)
    except (PalsError, OSError, ValueError) as err:
        logger.warning(
            "the dev scores of %s are left out of the export: its dev sets cannot be read to count the examples "
            "scored (%s); `pals-bench evaluate EXPORT` scores its tasks",
            checkpoint.name,
            err,
        )
        return None, evaluation_record(config)
    metrics = {key[len("eval_") :]: value for key, value in scored[-1].items() if key.startswith("eval_")}
    per_task = {task: task_metrics(metrics, task, specs) for task in specs}
    return per_task, dataclasses.replace(evaluation_record(config, dev), step=step)


def _export(
    config: RunConfig,
    specs: dict,
    shared: SharedBase | None,
    model,
    run_dir,
    out,
    model_source: str,
    checkpoint: Path,
    with_base: bool = False,
) -> dict[str, str]:
    if shared is not None:
        return _export_added(config, specs, shared, model, checkpoint)
    tokenizer = pretrained_tokenizer(resolve_model(model_source))
    metrics, evaluation = _checkpoint_scores(checkpoint, config, specs, tokenizer)
    exported = export_run(
        model,
        Path(out or Path(run_dir) / "export"),
        base_model_name=model_source,  # a hub id as given; a local folder where it is from here
        metrics_by_task=metrics,
        tokenizer=tokenizer,
        max_length=config.max_length,
        evaluation=evaluation,
        run_config=config,  # the task cards' training section
        with_base=with_base,
    )
    return {name: str(path) for name, path in exported.items()}


def _export_added(config: RunConfig, specs: dict, shared: SharedBase, model, checkpoint: Path) -> dict[str, str]:
    """The tasks of an add_to run, added to the export as the run would have at its end."""
    if fingerprint_model(model) != shared.fingerprint:
        raise ConfigError(
            f"{shared.export_dir}: its base is not the one this run trained its tasks against (the export was "
            "re-exported or replaced since); they would not load beside its tasks. Nothing was written"
        )
    tokenizer = export_tokenizer(shared)
    metrics, evaluation = _checkpoint_scores(checkpoint, config, specs, tokenizer)
    exported = export_added_tasks(
        model,
        list(specs),
        shared.export_dir,
        base_mode=shared.base_mode,
        base_model_name=shared.base_model_name,
        metrics_by_task=metrics,
        max_length=config.max_length,
        tokenizer=tokenizer,
        evaluation=evaluation,
        # into its own export, the run's tasks are exported again (as any run's re-export replaces its tasks)
        replace=shared.export_dir.resolve() == Path(config.add_to).resolve(),
        run_config=config,  # the task cards' training section
    )
    return {name: str(path) for name, path in exported.items()}
