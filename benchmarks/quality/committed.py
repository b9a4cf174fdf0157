"""The committed medium runs (benchmarks/results/quality/medium/runs/, trained before `compare` existed, in
folders named by row rather than by digest), reported by `compare`'s own report: the same rows, the same
runs, the same statistics as a grid of today."""

from __future__ import annotations

import json
from pathlib import Path

from pals_adapters.harness.comparison.reporting.floor import majority_score
from pals_adapters.harness.comparison.reporting.paired import paired_differences
from pals_adapters.harness.comparison.reporting.report import comparison_data, write_report
from pals_adapters.harness.comparison.reporting.rows import FinishedRun, RowResult
from pals_adapters.harness.tasks.glue import get_task

TASKS = ["cola", "sst2", "mrpc", "stsb", "rte"]
SEEDS = [0, 1, 2]
REFERENCE = "PALs + annealed"
FOLDER = Path(__file__).resolve().parents[1] / "results" / "quality" / "medium"

# (row, method, base, sampler, every seed or the first only, suffix of its run folders): as the runs were made.
ROWS = [
    ("separate fine-tuned models", "separate", "finetune", "round_robin", True, ""),
    ("shared (heads only per task)", "shared", "finetune", "annealed", True, ""),
    ("PALs + annealed", "pals", "finetune", "annealed", True, ""),
    ("Houlsby at the PALs budget", "houlsby[reduction_factor=13.7]", "finetune", "annealed", True, ""),
    ("LoRA (adapters) r=29, PALs budget", "lora[r=29]", "finetune", "annealed", True, ""),
    ("Houlsby (d/16)", "houlsby", "finetune", "annealed", False, ""),
    ("LoRA (adapters) r=8", "lora", "finetune", "annealed", False, ""),
    ("LoRA (PEFT) r=8", "peft_lora", "finetune", "annealed", False, ""),
    ("low-rank", "low_rank", "finetune", "annealed", False, ""),
    ("projected attention on top", "top_pals", "finetune", "annealed", False, ""),
    ("CA-MTL (MT-Uncertainty, old regression rule)", "ca_mtl", "finetune", "mt_uncertainty", False, ""),
    ("PALs + round robin", "pals", "finetune", "round_robin", False, ""),
    ("PALs + proportional", "pals", "finetune", "proportional", False, ""),
    ("PALs + square root", "pals", "finetune", "sqrt", False, ""),
    ("PALs + MT-Uncertainty (old regression rule)", "pals", "finetune", "mt_uncertainty", False, ""),
    ("PALs, frozen base (plain MSE, one lr)", "pals", "frozen", "annealed", False, ""),
    ("Houlsby, frozen base (plain MSE, one lr)", "houlsby", "frozen", "annealed", False, ""),
    ("LoRA (adapters) r=8, frozen base (plain MSE, one lr)", "lora", "frozen", "annealed", False, ""),
    ("PALs + MT-Uncertainty", "pals", "finetune", "mt_uncertainty", True, "-regression-share"),
    ("CA-MTL (MT-Uncertainty)", "ca_mtl", "finetune", "mt_uncertainty", True, "-regression-share"),
    ("PALs, frozen base", "pals", "frozen", "annealed", True, "-frozen-defaults"),
    ("Houlsby, frozen base", "houlsby", "frozen", "annealed", True, "-frozen-defaults"),
    ("LoRA (adapters) r=8, frozen base", "lora", "frozen", "annealed", True, "-frozen-defaults"),
]


def committed_rows(folder: Path = FOLDER) -> list[RowResult]:
    """Every row of the committed medium runs, as `compare` collects the rows of a grid."""
    rows = []
    for name, method, base, sampler, seeded, suffix in ROWS:
        runs = []
        for seed in SEEDS if seeded else SEEDS[:1]:
            if method == "separate":
                groups = [(f"full-finetune-round_robin-{task}-s{seed}", [task]) for task in TASKS]
            else:
                groups = [(f"{method}-{base}-{sampler}-{'+'.join(TASKS)}{suffix}-s{seed}", TASKS)]
            for run_id, tasks in groups:
                run_dir = folder / "runs" / run_id
                results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
                runs.append(FinishedRun(seed, run_dir, list(tasks), results))
        shown = "attention_on_top" if method == "top_pals" else method  # the method's name today
        rows.append(RowResult(name, shown, base, method == "separate", TASKS, runs))
    return rows


def report_committed(
    folder: Path = FOLDER, glue_dir: str | None = None, command: str = "", out: Path | None = None
) -> dict:
    """``comparison.{json,md,csv,png}`` of the committed runs in ``folder``, written to ``out`` (default:
    ``folder``); the floor needs the GLUE data (``glue_dir``), without which it is left out."""
    out = Path(out or folder)
    rows = committed_rows(folder)
    specs = {task: get_task(task) for task in TASKS}
    paired, notes = paired_differences(rows, REFERENCE, specs)
    floor = {task: majority_score(spec, glue_dir, "local") for task, spec in specs.items()} if glue_dir else {}
    data = comparison_data(TASKS, REFERENCE, rows, paired, notes, floor, command, out)
    write_report(data, rows, out)
    return data
