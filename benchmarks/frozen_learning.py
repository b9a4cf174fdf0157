"""Frozen-base learning: PALs against Houlsby adapters and heads only, with the bundled MiniLM frozen.

Issue 24 (section 3): with the base frozen, PALs stayed at the label mean on STS-B (Pearson 25) where
Houlsby adapters reached 86.5. The cause: the regression head started at 0, about 2.7 below the labels'
mean; with the base frozen the PALs learn that offset first, as one large vector that their shared
projections add to every token of every layer (output RMS 2-4 against a residual stream near 1), which
wipes out the frozen features; the loss then stays at the label variance. With the base frozen the
harness now starts a regression head at the training labels' mean and measures its loss in units of
their variance (``standardise_targets``, on by default with a frozen base and with add_to);
``--no-standardise-targets`` restores the old behaviour: the rows "head at 0" below.

CoLA, a classification task, then still stayed at a constant prediction with frozen PALs: with one
learning rate, a step on the V_E/V_D that all layers share moves every layer's PAL output at once, and
the near-constant offset they learn drowns the frozen features again. With the base frozen the harness
now divides their learning rate by the number of layers sharing them (``scale_shared_lr``, on by default
with a frozen base and with add_to); ``--no-scale-shared-lr`` restores one learning rate: the rows
"one learning rate" below.

Parts (the bundled MiniLM, base frozen, batches of 16 examples of at most 64 tokens, AdamW lr 1e-3 with
10% warm-up then linear decay, a seeded 4,000 training examples and the first 500 dev examples per task):

- stsb:  STS-B alone, 300 steps, seed 42: PALs (default and one learning rate), Houlsby and heads only, and
         with the head at 0. Target: PALs >= 80 Pearson with the default.
- multi: CoLA, SST-2, MRPC, STS-B and RTE in one run, annealed sampling (epochs of 100 steps), 1,000 steps,
         seed 42: PALs (default and one learning rate), Houlsby, and PALs with the head at 0.
- multi3000: the same five tasks with 3,000 steps (epochs of 300): PALs and Houlsby with the defaults,
         and pals_no_share.
- multi3000-seed43, multi3000-lr3e-3: multi3000's PALs and Houlsby rows with seed 43, and with lr 3e-3.
- multi3000-init05, multi3000-init05-seed43: multi3000's PALs with every weight at N(0, 0.05), seeds 42 and 43.
- multi6000, multi6000-seed43: multi3000's PALs and Houlsby rows with twice the steps (epochs of 600), seeds 42
         and 43: does the gap close with budget?
- cola:  CoLA alone (all 8,551 training examples), 1,500 steps, seed 42: PALs (default and one learning
         rate), Houlsby, PALs with per-layer V_E/V_D (pals_no_share), and PALs without the GELU after V_D
         (the paper's equation; the GELU is the authors' code). With the base frozen CoLA needs more steps
         than the multi-task budget gives it.
- cola600, cola600-seed43: CoLA alone with about the budget it gets in multi3000 (4,000 examples, 600 steps),
         seeds 42 and 43: PALs (default, one learning rate, pals_no_share, without their attention), Houlsby
         and heads only, also ranked by the dev ROC AUC of their exports (most rows predict one class); and
         PALs varied one setting at a time: V_D at 0 (init_weights='zero_output', also with one learning
         rate), no attention dropout, one attention head, V_E/V_D twice as wide, no GELU after V_D, every
         weight at N(0, 0.05) or N(0, 0.08), N(0, 0.05) without the GELU, PALs in the top three layers only.
- addto: an export of SST-2, MRPC and RTE trained with the base fine-tuned (600 steps, lr 1e-4), then CoLA
         added to a copy of it with add_to (base frozen, as the cola part): PALs (default and one learning
         rate) and Houlsby (its own export).

Every run is cached in <cache>/<run id>/results.json; rerun the same command to continue (a run
interrupted midway starts again). One run at a time, one torch thread by default:

    nohup python benchmarks/frozen_learning.py --glue-dir ../shared/glue > frozen_learning.log 2>&1 &

``--parts`` and ``--rows`` (keys of the run ids, e.g. ``--parts multi3000 --rows houlsby``) train some runs
only, e.g. two at a time in two processes; the tables show every cached run of the parts given.
"""

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    RESULTS_DIR,
    command_line,
    machine_info,
    markdown_table,
    same_settings,
    verdict_line,
    write_results,
)
from _frozen_parts import ADDTO_BASE, COMMON, PARTS, RANKED_PARTS, TARGET  # noqa: E402
from _frozen_ranking import dev_auc  # noqa: E402
from _frozen_trace import trace  # noqa: E402

from pals_adapters.harness import RunConfig, run  # noqa: E402


def run_id(part, key):
    return f"{part}-{key}"


def run_config(part, method, at_mean, scaled, glue_dir, add_to=None):
    tasks, settings, _ = PARTS[part]
    # stsb is the only regression task: for the others, at_mean changes nothing; scaled=None: a method
    # without weights shared by layers, where the setting changes nothing (off, as its cached run)
    return RunConfig(
        # an added task is exported into the export it was added to
        **{**COMMON, **settings, "export": add_to is not None or part in RANKED_PARTS},
        tasks=tasks,
        method=method,
        standardise_targets=at_mean,
        scale_shared_lr=bool(scaled),
        glue_dir=glue_dir,
        add_to=add_to,
    )


def addto_export(cache: Path, key: str, method: str, glue_dir: str, train: bool = True) -> str | None:
    """A fresh copy of the trained ADDTO_BASE export of ``method`` for the row ``key`` (None: not trained yet)."""
    name = "addto-base" if method == "pals" else f"addto-base-{method}"
    config = RunConfig(**{**COMMON, **ADDTO_BASE, "method": method, "glue_dir": glue_dir})
    if run_cached(cache, name, config, train) is None:
        return None
    copy = cache / f"addto-{key}-export"
    if train and not (cache / run_id("addto", key) / "results.json").exists():
        shutil.rmtree(copy, ignore_errors=True)  # a run interrupted midway starts again from the export
        shutil.copytree(cache / name / "export", copy)
    return str(copy)


def row_config(cache, part, key, method, at_mean, scaled, glue_dir, train=True):
    """The run of one row (None: the export it adds to is not trained yet)."""
    if part != "addto":
        return run_config(part, method, at_mean, scaled, glue_dir)
    export = addto_export(cache, key, method, glue_dir, train)
    return None if export is None else run_config(part, method, at_mean, scaled, glue_dir, add_to=export)


def run_cached(cache: Path, name: str, config: RunConfig, train: bool = True) -> dict | None:
    """One harness run, or its cached results when the settings are the same (None: not run yet). With
    add_to, the run records the export's base folder as its model and the export's absolute path: the row's
    own export copy, compared by the row, not by path."""
    folder = cache / name
    config.output_dir = str(folder)
    cached = folder / "results.json"
    if cached.exists():
        results = json.loads(cached.read_text())
        ignore = ("resume", "output_dir") + (("model", "add_to") if config.add_to else ())
        if same_settings(results["config"], config, ignore=ignore):
            return results
    if not train:
        return None
    results = run(config)
    print(f"[{name}] average {100 * results['metrics']['average']:.1f} in {results['wall_seconds']:.0f}s", flush=True)
    return results


def score_cell(results, task):
    metrics = results["metrics"]
    if task == "stsb":
        return f"{100 * metrics['stsb_pearson']:.1f}"
    return f"{100 * metrics[f'{task}_score']:.1f}"


def head_start(tasks, at_mean):
    if "stsb" not in tasks:
        return "(no regression task)"
    return "label mean" if at_mean else "0"


def report(cache, glue_dir, parts):
    data = {"command": command_line(), "machine": machine_info(), "settings": COMMON, "parts": {}}
    text = [
        "# Frozen-base learning (bundled MiniLM, base frozen)",
        "",
        f"{torch.get_num_threads()} torch thread(s) on {data['machine']['cpu_model']}. Scores on the first 500 "
        "dev examples per task: STS-B Pearson, CoLA Matthews, MRPC mean of accuracy and F1, others accuracy (x100).",
    ]
    for part in parts:
        tasks, settings, rows = PARTS[part]
        header = [
            "row",
            "regression head starts at",
            "V_E/V_D lr",
            *tasks,
            *(["avg"] if len(tasks) > 1 else []),
            *(["cola AUC"] if part in RANKED_PARTS else []),
            "wall s",
        ]
        table, entries = [], []
        for key, name, method, at_mean, scaled in rows:
            config = row_config(cache, part, key, method, at_mean, scaled, glue_dir, train=False)
            results = None if config is None else run_cached(cache, run_id(part, key), config, train=False)
            shared_lr = "-" if scaled is None else ("lr / layers" if scaled else "lr")
            if results is None:
                table.append([name, head_start(tasks, at_mean), shared_lr, *["not run yet"] * (len(header) - 3)])
                continue
            cells = [score_cell(results, t) for t in tasks]
            average = [f"{100 * results['metrics']['average']:.1f}"] if len(tasks) > 1 else []
            wall = f"{results['wall_seconds']:.0f}"
            ranked = {}
            if part in RANKED_PARTS:
                ranked["cola_auc"] = dev_auc(cache / run_id(part, key), "cola", glue_dir, COMMON["max_eval_examples"])
                average.append(f"{ranked['cola_auc']:.3f}")
            table.append([name, head_start(tasks, at_mean), shared_lr, *cells, *average, wall])
            entries.append(
                {
                    "row": name,
                    "method": method,
                    "head_at_label_mean": at_mean,
                    "scale_shared_lr": scaled,
                    **results["metrics"],
                    **ranked,
                }
            )
        steps = settings["max_steps"]
        text += ["", f"## {part}: {', '.join(tasks)}, {steps} steps", "", markdown_table(header, table)]
        data["parts"][part] = {"tasks": tasks, "settings": settings, "rows": entries}
        pals = next((e for e in entries if e["row"] == "PALs"), None)
        if part == "stsb" and pals is not None:
            pearson = 100 * pals["stsb_pearson"]
            line = verdict_line(pearson >= TARGET, f"PALs STS-B Pearson {pearson:.1f} (target >= {TARGET:.0f})")
            text += ["", line]
            data["verdict"] = line
    return data, "\n".join(text)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--glue-dir", default="../shared/glue")
    parser.add_argument("--parts", nargs="+", choices=list(PARTS), default=list(PARTS))
    parser.add_argument("--rows", nargs="+", help="train only these rows (keys of the run ids, e.g. pals houlsby)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--cache", default=str(RESULTS_DIR / "cache" / "frozen_learning"))
    parser.add_argument("--out-dir", default=str(RESULTS_DIR))
    parser.add_argument("--report-only", action="store_true", help="write the tables from the cached runs only")
    parser.add_argument(
        "--trace", action="store_true", help="only trace the PALs' output over the first steps of the stsb part"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    cache = Path(args.cache)
    if args.trace:
        table = trace(lambda at_mean: run_config("stsb", "pals", at_mean, False, args.glue_dir))
        text = f"# PAL output over the first steps (frozen base, STS-B)\n\n`{command_line()}`\n\n{table}"
        Path(args.out_dir, "frozen_learning_trace.md").write_text(text + "\n")
        return
    if not args.report_only:
        for part in args.parts:
            for key, _, method, at_mean, scaled in PARTS[part][2]:
                if args.rows and key not in args.rows:
                    continue
                config = row_config(cache, part, key, method, at_mean, scaled, args.glue_dir)
                run_cached(cache, run_id(part, key), config)
                data, markdown = report(cache, args.glue_dir, args.parts)
                write_results("frozen_learning", data, markdown, out_dir=args.out_dir)
    data, markdown = report(cache, args.glue_dir, args.parts)
    write_results("frozen_learning", data, markdown, out_dir=args.out_dir)
    print(markdown)


if __name__ == "__main__":
    main()
