"""A task folder's model card (``README.md``), as the Hugging Face hub reads one: YAML front matter written
by `huggingface_hub.ModelCardData` (library, tags, base model, datasets, the dev metrics as a model-index)
and a short body: what the folder holds, how to load it (code that runs as written, in the folder), the
base it needs and its fingerprint, how it was trained, and how to publish it.

The card is written from the task's manifest and the run's settings alone, so the same task writes the
same bytes. It is not among the manifest's hashed files: editing it (as one does before publishing)
never stops the task from loading.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..tasks.dataset_source import hub_id
from ..tasks.spec import TaskSpec, spec_from_json
from .card_code import base_origin, base_source, harness_code, library_code, settings_of, train_command
from .files import ADAPTER_CONFIG, CARD
from .library_heads import HEAD_CONFIG, HEAD_WEIGHTS, hub_model_id, shared_base_name
from .manifest import MANIFEST, TaskManifest

logger = logging.getLogger(__name__)

# The hub's ids of the metrics the harness scores (https://huggingface.co/metrics).
HUB_METRICS = {
    "accuracy": "accuracy",
    "f1": "f1",
    "matthews": "matthews_correlation",
    "pearson": "pearsonr",
    "spearman": "spearmanr",
}
# The hub's library of each method backend whose task files a library loads (the others: none).
LIBRARIES = {"adapters": "adapter-transformers", "ca_mtl": "adapter-transformers", "peft": "peft"}
TASK_TYPE = "text-classification"  # the hub files GLUE's regression (STS-B) under it too
FILE_ROLES = {
    ADAPTER_CONFIG: "the adapter's config, in its library's own format",
    "adapter.safetensors": "the adapter's weights (`adapters` format)",
    "adapter_model.safetensors": "the LoRA weights and, where PEFT loads it, the task's head (PEFT format)",
    HEAD_CONFIG: "the task's prediction head and its labels, in `adapters`' own format",
    HEAD_WEIGHTS: "the prediction head's weights (`adapters` format)",
    "top.safetensors": "the task's layer on top of the encoder (pals_adapters format)",
    "head.safetensors": "the task's prediction head (pals_adapters format)",
}


def write_card(folder: Path, manifest: TaskManifest, run_config: Any = None, origin: Mapping | None = None) -> None:
    """Writes ``folder/README.md`` for the task of ``manifest`` (``run_config``: the run's `RunConfig` or its
    settings as a mapping, for the training section; None where the export does not know them; ``origin``: the
    comparison the run came from, see `comparison.handoff`). A card is documentation: a failure to write one is
    logged and never fails the export of the task's weights."""
    try:
        card_of(manifest, run_config, origin).save(folder / CARD)
    except Exception as err:  # noqa: BLE001 - the weights' export is worth more than their card
        (folder / CARD).unlink(missing_ok=True)
        logger.warning("no model card for %s (%s: %s); the task is exported", folder.name, type(err).__name__, err)


def card_of(manifest: TaskManifest, run_config: Any = None, origin: Mapping | None = None) -> ModelCard:
    spec = spec_from_json(manifest.task_spec)
    data = card_data(manifest, spec)
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n{body(manifest, spec, run_config, origin)}")


def hub_base_model(manifest: TaskManifest) -> str | None:
    """The base's hub model id (a bundled model's included); None for a local folder (the hub takes only ids)."""
    return hub_model_id(manifest.base_model_name)


def dataset_of(spec: TaskSpec) -> tuple[str, str | None, str]:
    """(dataset id, its config, its name in words): the hub copy of a GLUE task; a task of one's own by name."""
    if spec.hub is not None:
        dataset, config = spec.hub
        return dataset, config, f"GLUE {config.upper()}" if dataset.endswith("/glue") else f"{dataset} {config}"
    dataset = hub_id(spec.dataset)
    if dataset is not None:  # a task of a Hub dataset of one's own
        config = spec.dataset.get("name")
        return dataset, config, f"{dataset} {config}" if config else dataset
    return spec.name, None, spec.name


def _dev_split(split: str) -> str:
    """The prefix of a dev split's metric names (``validation_matched`` -> ``matched_``), as the run names them."""
    rest = split[len("validation") :].lstrip("_")
    return f"{rest}_" if rest else ""


def eval_results(manifest: TaskManifest, spec: TaskSpec) -> list[EvalResult]:
    """The run's dev metrics of the task as the hub's model-index records them (the task's own metrics)."""
    metrics = manifest.metrics or {}
    dataset, config, name = dataset_of(spec)
    results = []
    for split in spec.dev_splits:
        for metric in spec.metrics:
            key = _dev_split(split) + metric
            if key in metrics:
                results.append(
                    EvalResult(
                        task_type=TASK_TYPE,
                        dataset_type=dataset,
                        dataset_name=name,
                        dataset_config=config,
                        dataset_split=scored_split(manifest, split),
                        metric_type=HUB_METRICS.get(metric, metric),
                        metric_value=float(metrics[key]),
                        metric_name=key,
                    )
                )
    return results


def examples_scored(manifest: TaskManifest, split: str) -> int | None:
    """How many dev examples of ``split`` the run scored (None where the export does not know)."""
    scored = (manifest.evaluation.examples_scored if manifest.evaluation else None) or {}
    return scored.get(manifest.task, {}).get(split)


def scored_split(manifest: TaskManifest, split: str) -> str:
    """The dev split the run scored, in the datasets library's slice notation where it scored a subset."""
    limit = manifest.evaluation.max_eval_examples if manifest.evaluation else None
    scored = examples_scored(manifest, split)
    if limit and (scored is None or scored >= limit):  # cut at the limit (or not known to be the whole split)
        return f"{split}[:{scored or limit}]"
    return split


def card_data(manifest: TaskManifest, spec: TaskSpec) -> ModelCardData:
    """The front matter: library, tags, base model, datasets, metrics and the dev results."""
    kind = manifest.method.kind
    library = LIBRARIES.get(kind)
    results = eval_results(manifest, spec)
    adapter_tags = ["adapter-transformers", "adapters"] if library == "adapter-transformers" else []
    adapter_tags += ["peft", "lora", "adapters"] if kind == "peft" else []
    model_type = manifest.base_config.get("model_type")
    tags = [*adapter_tags, manifest.method.name, *([model_type] if model_type else []), "pals_adapters", TASK_TYPE]
    return ModelCardData(
        library_name=library,
        tags=list(dict.fromkeys(tags)),
        base_model=hub_base_model(manifest),
        datasets=[dataset_of(spec)[0]],
        metrics=sorted({r.metric_type for r in results}) or None,
        pipeline_tag=TASK_TYPE,
        model_name=f"{manifest.task}-{manifest.method.name}" if results else None,
        eval_results=results or None,
    )


def _files(manifest: TaskManifest) -> list[str]:
    lines = [f"- `{name}`: {FILE_ROLES.get(name, 'a file of the task')}" for name in sorted(manifest.files)]
    lines.append(
        f"- `{MANIFEST}`: the task as trained (labels in their order), the sha256 of every file above and what "
        "the base must be; the harness checks all of it before loading"
    )
    lines.append(f"- `{CARD}`: this card (not hashed: edit it freely)")
    return lines


def _loading(manifest: TaskManifest, spec: TaskSpec) -> list[str]:
    lines = ["## How to load", "", "Run the code in this folder (the one that holds this README.md).", ""]
    library = library_code(manifest, spec)
    if library is not None:
        name, code = library
        what = "the LoRA and the head" if name == "peft" else "the adapter and its head"
        lines += [
            f"With `{name}` (`pip install pals-adapters`: torch, transformers, adapters): the base, then this "
            f"folder's task ({what}), giving the task's labels:",
            "",
            "```python",
            code,
            "```",
            "",
        ]
    else:
        lines += [
            f"No library loads the task weights of method `{manifest.method.name}` on its own (they are "
            "pals_adapters' own files): load the task with pals_adapters.",
            "",
        ]
    lines += [
        "With pals_adapters' harness (`pip install pals-adapters[harness]`): the whole task, its labels "
        "decoded, after checking every file, the base and the tokenizer:",
        "",
        "```python",
        harness_code(manifest, spec),
        "```",
    ]
    return lines


def _base(manifest: TaskManifest) -> list[str]:
    _, words = base_source(manifest)
    lines = [
        "## Base model",
        "",
        f"The task needs {words}: the base whose weights have the sha256 fingerprint",
        f"`{manifest.base_fingerprint}` ({manifest.base_dtype}; `pals_adapters.harness.export.fingerprint_model`).",
    ]
    origin = shared_base_name(manifest.base_model_name)
    if manifest.base_mode == "finetune" and origin:
        lines.append(f"It was fine-tuned from {base_origin(manifest)} together with the run's tasks.")
    if hub_base_model(manifest) is None and origin:
        lines += [
            "",
            f"`{origin}` is a local folder, not a hub model id, so the front matter names no `base_model`; add "
            "the hub id of that model there before publishing, if it has one.",
        ]
    return lines


def _training(manifest: TaskManifest, run_config: Any) -> list[str]:
    base = "fine-tuned together with the tasks" if manifest.base_mode == "finetune" else "frozen"
    facts = [
        f"- method: `{manifest.method.name}`"
        + (f" with {manifest.method.overrides}" if manifest.method.overrides else "")
        + f" (backend `{manifest.method.kind}`)",
        f"- base: {base}, from {base_origin(manifest)}",
        f"- tokens per example: {manifest.max_length}",
        f"- parameters of this task: {manifest.num_parameters:,}" if manifest.num_parameters is not None else "",
        f"- written by {manifest.producer}" if manifest.producer else "",
    ]
    lines = ["## Training", "", *(fact for fact in facts if fact)]
    command, settings = train_command(run_config, shared=True), settings_of(run_config)
    if command:
        lines += ["", "The run (its other settings at their defaults; local folders by their name):", ""]
        lines += ["```bash", command, "```"]
    if settings:
        lines += [
            "",
            "<details><summary>Every setting of the run (<code>pals-bench train --config</code> reads them as a "
            "YAML file)</summary>",
            "",
            "```yaml",
            yaml.safe_dump(settings, sort_keys=False).rstrip(),
            "```",
            "",
            "</details>",
        ]
    if not command and not settings:
        lines += ["", "The run's settings are in `run_config.json` of its output folder."]
    return lines


def _scope(manifest: TaskManifest, spec: TaskSpec) -> str:  # the examples scored of each dev split, in words
    counts = {split: examples_scored(manifest, split) for split in spec.dev_splits}
    if all(count is not None for count in counts.values()):
        return ", ".join(f"{count:,} `{split}` examples" for split, count in counts.items())
    limit = manifest.evaluation.max_eval_examples if manifest.evaluation else None
    return f"at most the first {limit} examples of each dev split" if limit else "the whole dev set"


def _results(manifest: TaskManifest, spec: TaskSpec) -> list[str]:
    lines = ["## Dev results", ""]
    if not manifest.metrics:
        return lines + ["None recorded with this export; `pals-bench evaluate .` scores the task here."]
    step = manifest.evaluation.step if manifest.evaluation else None  # a checkpoint's, or the run's end
    when = "at its end" if step is None else f"at step {step} (the checkpoint exported here)"
    lines.append(f"As the run measured them {when}, on {_scope(manifest, spec)} (`pals-bench evaluate .` repeats it):")
    return lines + ["", "| metric | value |", "|---|---|"] + [f"| {k} | {v:.4f} |" for k, v in manifest.metrics.items()]


def _publishing(manifest: TaskManifest) -> list[str]:
    task = manifest.task
    if manifest.base_path is None:
        what = "This folder is the whole task (its base is a pretrained model): upload it as one repository"
        command = f"hf upload YOUR-NAME/{task}-{manifest.method.name} ."
    else:
        what = (
            f"The task needs `{manifest.base_path}`, exported with it: upload the export folder (its `base/` and "
            "task folders), from the folder above this one"
        )
        command = "hf upload YOUR-NAME/REPO-NAME .. ."
    return [
        "## Publishing",
        "",
        f"{what}, with the hub's client (`huggingface_hub`: `HfApi().upload_folder(folder_path=..., "
        'repo_id=..., repo_type="model")`, or its command line):',
        "",
        "```bash",
        command,
        "```",
        "",
        "`huggingface_hub.snapshot_download(repo_id)` gives the folder back; the code above runs in "
        + ("it." if manifest.base_path is None else f"its `{task}` folder."),
    ]


def _comparison(origin: Mapping[str, Any] | None) -> list[str]:
    """Where the run stands in the comparison it came from (``pals-bench compare --export``): its row, seed and
    scores there beside the row's mean over seeds, in points."""
    if not origin:
        return []
    keys = [*origin["tasks"], "average"]
    seeds = ", ".join(map(str, origin["seeds"]))
    count = len(origin["seeds"])
    lines = [
        "## In the comparison",
        "",
        f"Exported from row `{origin['row']}` (seed {origin['seed']}; the row's seeds: {seeds}) of the comparison in "
        f"`{origin['comparison']}` (grid file `{origin['grid']}`), with `{origin['command']}`. Dev scores there, in "
        "points (0-100):",
        "",
        "| | " + " | ".join(keys) + " |",
        "|---|" + "---:|" * len(keys),
        f"| this run (seed {origin['seed']}) | " + " | ".join(f"{origin['scores'][k]:.1f}" for k in keys) + " |",
        f"| the row's mean over {count} seed{'s' if count > 1 else ''} | "
        + " | ".join(f"{origin['row_mean'][k]:.1f}" for k in keys)
        + " |",
    ]
    return lines


def body(manifest: TaskManifest, spec: TaskSpec, run_config: Any = None, origin: Mapping | None = None) -> str:
    _, _, dataset = dataset_of(spec)
    # labels are the user's text: escaped, so that no HTML of theirs enters the card's body
    labels = ", ".join(html.escape(label) for label in spec.labels)
    kind = "regression" if spec.is_regression else f"classification into {labels}"
    sections = [
        [
            f"# {manifest.task}: `{manifest.method.name}`",
            "",
            f"The task-specific weights of **{manifest.task}** ({dataset}; {kind}) from a multi-task run of "
            f"pals_adapters, method `{manifest.method.name}`.",
            "",
            *_files(manifest),
        ],
        _loading(manifest, spec),
        _base(manifest),
        _training(manifest, run_config),
        _results(manifest, spec),
        _comparison(origin),
        _publishing(manifest),
    ]
    return "\n\n".join("\n".join(section) for section in sections if section) + "\n"
