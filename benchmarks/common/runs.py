"""Cached harness runs: a suite continues from the runs it has already made."""

import dataclasses
import json
from pathlib import Path

from pals_adapters.harness import RunConfig
from pals_adapters.harness.methods.method import OLD_NAMES, current_name


def cached_run_folder(runs: Path, run_id: str) -> Path:
    """``runs/<run_id>``, or the folder of the same run cached before its method was renamed
    (``top_pals-...`` for ``attention_on_top-...``) when only that one exists: caches continue."""
    folder = runs / run_id
    if not folder.exists():
        for old, new in OLD_NAMES.items():
            legacy = runs / (old + run_id[len(new) :])
            if run_id.startswith(new + "-") and legacy.exists():
                return legacy
    return folder


def same_settings(cached: dict, config: RunConfig, ignore=("resume", "output_dir", "overwrite")) -> bool:
    """Whether a cached run's recorded config is ``config``. A setting added to RunConfig after the run
    was cached counts at its default: new settings default to the behaviour runs had before them (the
    defaults of a run that sets nothing, e.g. standardise_targets off: the base is fine-tuned).
    ``glue_dir`` counts only as set or not: ``../shared/glue`` and its absolute path, or the same files on
    another machine, are the same data, and a cache keyed on the spelling would retrain every run."""
    defaults = dataclasses.asdict(RunConfig())
    now = json.loads(json.dumps(dataclasses.asdict(config)))
    recorded = {**json.loads(json.dumps(defaults)), **cached}
    for settings in (now, recorded):
        settings["glue_dir"] = settings["glue_dir"] is not None
    now["method"], recorded["method"] = current_name(now["method"]), current_name(recorded["method"])  # renames
    return {k: v for k, v in recorded.items() if k not in ignore} == {k: v for k, v in now.items() if k not in ignore}
