"""What the benchmark suites share: the models, the machine and command every result records,
where results go, the common options and cached harness runs."""

from .models import MODELS, load_model, model_config, padded_batch
from .options import comma_list, typed_methods
from .results import (
    RESULTS_DIR,
    command_line,
    machine_info,
    markdown_table,
    print_and_write,
    results_dir,
    verdict_line,
    write_results,
)
from .runs import cached_run_folder, same_settings

__all__ = [
    "MODELS",
    "RESULTS_DIR",
    "cached_run_folder",
    "comma_list",
    "command_line",
    "load_model",
    "machine_info",
    "markdown_table",
    "model_config",
    "padded_batch",
    "print_and_write",
    "results_dir",
    "same_settings",
    "typed_methods",
    "verdict_line",
    "write_results",
]
