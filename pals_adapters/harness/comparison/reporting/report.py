"""The report of a comparison: ``comparison.json`` (the shape other tools read), ``.md`` (the table the
command prints), ``.csv`` and ``comparison.png``, each with the command line that made it. Each is written
to a temporary name and renamed; a file of those names that compare did not write is never replaced."""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from pathlib import Path

from ....errors import ConfigError
from .floor import floor_flags
from .rows import RowResult
from .search_table import search_lines
from .stats import mean_sd

REPORT_NAME = "comparison"
MARKDOWN_START = "Command: `"  # the first line of every comparison.md compare writes
CSV_HEADER = ["row", "task", "mean", "sd", "seeds", "params_x_base", "diff", "low", "high", "interval"]
CSV_MORE = ["examples_seen", "budget_differs", "near_floor", "one_class_seeds", "resumed"]
LEGEND = {
    "floor": "(floor): the score is within the seeds' noise of the majority-class floor (the 95% t interval of "
    "the mean over seeds holds it; one seed: the same score to 0.1 point): the row did no better than no training",
    "one class": "(one class): a seed's run predicts one class for every dev example of the task (train says "
    "'class ... is never predicted' for the others)",
    "≠ reference": "(≠ reference): the row's budget differs from the reference row's, so its scores are not "
    "on an equal budget",
    "resumed": "(resumed): a run of the row was interrupted and resumed; its time and examples/s are the sums "
    "over its segments",
}


def comparison_data(
    tasks: list[str],
    reference: str,
    rows: list[RowResult],
    paired: dict,
    notes: dict,
    floor: dict,
    command: str,
    output_dir: Path,
) -> dict:
    """The whole report as JSON values; ``run_dir`` relative to ``output_dir``."""
    keys = [*tasks, "average"]
    reference_budget = next((row.budget for row in rows if row.name == reference), {})
    out_rows = []
    for row in rows:
        if not row.runs:
            continue
        per_seed = row.seed_scores()
        stats = {key: mean_sd([scores[key] for scores in per_seed.values()]) for key in keys}
        out_rows.append(
            {
                "name": row.name,
                "method": row.method,
                "base": row.base,
                "seeds": row.seeds,
                "runs": [_run_entry(run, output_dir) for run in row.runs],
                "mean": {key: stats[key][0] for key in keys},
                "sd": {key: stats[key][1] for key in keys},
                "params_x_base": row.params_x_base(),
                "seconds_per_seed": row.seconds_per_seed(),
                "examples_per_second": row.examples_per_second(),
                "resumed": row.resumed,
                "budget": {**row.budget, "differs_from_reference": _differs(row.budget, reference_budget)},
                "flags": floor_flags(row, floor),
                "curve": {str(step): value for step, value in row.curve().items()},
            }
        )
    return {
        "tasks": tasks,
        "reference": reference,
        "rows": out_rows,
        "paired": paired,
        "paired_notes": notes,
        "floor": floor,
        "missing": {row.name: row.missing for row in rows if row.missing},
        "command": command,
    }


def _differs(budget: dict, reference: dict) -> bool:
    """Examples per task apart by more than half a batch (a separate run's steps are whole numbers)."""
    if not budget or not reference:
        return False
    tolerance = max(budget["batch_size"], reference["batch_size"]) / 2
    return any(abs(n - reference["examples"][task]) > tolerance for task, n in budget["examples"].items())


def _run_entry(run, output_dir: Path) -> dict:
    scores = run.scores()
    scores["average"] = sum(scores.values()) / len(scores)
    return {
        "seed": run.seed,
        "run_dir": os.path.relpath(run.folder, output_dir),
        "tasks": run.tasks,
        "scores": scores,
        "seconds": run.seconds(),
        "resumed": run.resumed,
    }


def _cell(mean: float, sd: float | None, marks: list[str] = ()) -> str:
    return f"{mean:.1f}" + (f" ± {sd:.1f}" if sd is not None else "") + (f" ({', '.join(marks)})" if marks else "")


def _interval(d: dict) -> str:
    return f"{d['mean']:+.1f} [{d['low']:+.1f}, {d['high']:+.1f}]"


def _name(name: str) -> str:
    """A row's name in a Markdown table cell: its ``|`` would end the cell."""
    return name.replace("|", "\\|")


def _marks(flags: dict) -> list[str]:
    return ["floor"] * flags.get("near_floor", False) + ["one class"] * bool(flags.get("one_class_seeds"))


def _budget_cell(row: dict, tasks: list[str]) -> str:
    examples = row["budget"].get("examples")
    if not examples:
        return "-"
    cell = " / ".join(f"{examples[task]:,.0f}" for task in tasks)
    return cell + (" (≠ reference)" if row["budget"]["differs_from_reference"] else "")


def markdown(data: dict) -> str:
    """The tables: scores per row (mean ± sd over seeds, the budget, markers), the floor, the reference minus
    each row; the markers' legend and the notes below."""
    tasks, keys = data["tasks"], [*data["tasks"], "average"]
    lines = [
        f"{MARKDOWN_START}{data['command']}`",
        "",
        "Dev scores in points (0-100), mean ± standard deviation over seeds; avg: the mean over tasks. Examples "
        "per task: the training examples each task sees in a run (steps x batch, split among the tasks as the "
        "row's sampler draws them, expected), in the order of the task columns.",
        "",
        "| row | seeds | params (x base) | examples per task | "
        + " | ".join(tasks)
        + " | avg | s per seed | examples/s |",
        "|---|---:|---:|---:|" + "---:|" * (len(keys) + 2),
    ]
    used = set()
    for row in data["rows"]:
        marks = {key: _marks(row["flags"].get(key, {})) for key in keys}
        cells = [_cell(row["mean"][k], row["sd"][k], marks[k]) for k in keys]
        seconds = f"{row['seconds_per_seed']:.0f}" if row["seconds_per_seed"] is not None else "-"
        seconds += " (resumed)" if row["resumed"] else ""
        rate = f"{row['examples_per_second']:.1f}" if row["examples_per_second"] is not None else "-"
        budget = _budget_cell(row, tasks)
        used |= {m for ms in marks.values() for m in ms}
        used |= {"resumed"} if row["resumed"] else set()
        used |= {"≠ reference"} if row["budget"].get("differs_from_reference") else set()
        lines.append(
            f"| {_name(row['name'])} | {len(row['seeds'])} | {row['params_x_base']:.2f} | {budget} | "
            + " | ".join(cells)
            + f" | {seconds} | {rate} |"
        )
    if data["floor"]:
        floor = [data["floor"][t]["score"] for t in tasks]
        lines.append(
            "| majority class (floor) | - | - | - | "
            + " | ".join(f"{s:.1f}" for s in floor)
            + f" | {sum(floor) / len(floor):.1f} | - | - |"
        )
    lines += [f"\n{LEGEND[mark]}." for mark in LEGEND if mark in used]
    if data["paired"]:
        lines += [
            "",
            f"{_name(data['reference'])} minus each row (points): the mean difference and its 95% interval; "
            "t: Student-t over the common seeds; bootstrap: paired bootstrap over the dev examples of one run "
            "each. An interval that excludes 0 is a difference beyond the seeds' noise.",
            "",
            "| row | seeds (n) | interval | " + " | ".join(tasks) + " | avg |",
            "|---|---:|---|" + "---:|" * len(keys),
        ]
        for name, diffs in data["paired"].items():
            first = diffs["average"]
            cells = " | ".join(_interval(diffs[k]) for k in keys)
            lines.append(f"| {_name(name)} | {first['n']} | {first['interval']} | {cells} |")
        lines += _zero_width(data["paired"], keys)
    reasons: dict[str, list[str]] = {}
    for name, why in data["paired_notes"].items():
        reasons.setdefault(why, []).append(name)
    for why, names in reasons.items():
        lines.append(f"\nNo interval ({why}): {'; '.join(names)}.")
    for name, folders in data["missing"].items():
        lines.append(f"\nNot done yet ({name}): {len(folders)} runs, e.g. {folders[0]}.")
    lines += search_lines(data)
    return "\n".join(lines) + "\n"


def _zero_width(paired: dict, keys: list[str]) -> list[str]:
    """A note on intervals of width zero: the seeds gave the same difference, which is no measure of noise."""
    cells = [
        f"{name} ({key})" for name, diffs in paired.items() for key in keys if diffs[key]["low"] == diffs[key]["high"]
    ]
    if not cells:
        return []
    return [
        f"\nWidth zero (every seed or resample gave the same difference, so the interval shows no noise at all; "
        f"more seeds or dev examples would): {'; '.join(cells)}."
    ]


def csv_text(data: dict) -> str:
    """One line per row and task (and the average): mean, sd, the paired difference with its interval, the
    examples seen, and the markers."""
    handle = io.StringIO()
    writer = csv.writer(handle, lineterminator="\n")
    writer.writerow([*CSV_HEADER, *CSV_MORE])
    for row in data["rows"]:
        examples = row["budget"].get("examples", {})
        for key in [*data["tasks"], "average"]:
            diff = data["paired"].get(row["name"], {}).get(key, {})
            flags = row["flags"].get(key, {})
            writer.writerow(
                [
                    row["name"],
                    key,
                    row["mean"][key],
                    row["sd"][key],
                    len(row["seeds"]),
                    row["params_x_base"],
                    *(diff.get(k) for k in ("mean", "low", "high", "interval")),
                    examples.get(key, sum(examples.values()) if examples else None),
                    row["budget"].get("differs_from_reference", False),
                    flags.get("near_floor"),
                    " ".join(map(str, flags.get("one_class_seeds", []))),
                    row["resumed"],
                ]
            )
    return handle.getvalue()


def report_paths(output_dir: Path) -> dict[str, Path]:
    return {ext: output_dir / f"{REPORT_NAME}.{ext}" for ext in ("json", "md", "csv", "png")}


def check_report_files(output_dir: Path) -> None:
    """ConfigError when a report file's name in ``output_dir`` holds a file compare did not write (checked
    before any run trains, and again before the report is written)."""
    from .figure import FIGURE_MARK

    paths = report_paths(Path(output_dir))
    foreign = [path for path in paths.values() if path.exists() and not _ours(path, paths["json"], FIGURE_MARK)]
    if foreign:
        names = ", ".join(str(path) for path in foreign)
        raise ConfigError(
            f"{names}: not a report that pals-bench compare wrote, and compare would replace it; move it away or "
            "choose another --output-dir"
        )


def _ours(path: Path, json_path: Path, figure_mark: bytes) -> bool:
    try:
        if path.suffix == ".png":  # ours carry a mark; those of older versions sit beside our comparison.json
            content = path.read_bytes()
            return figure_mark in content or (b"Matplotlib" in content and _ours(json_path, json_path, figure_mark))
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    if path.suffix == ".md":
        return text.startswith(MARKDOWN_START)
    if path.suffix == ".csv":
        return text.startswith(",".join(CSV_HEADER))
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return False
    return isinstance(data, dict) and {"tasks", "reference", "rows", "command"} <= set(data)


def write_atomic(path: Path, content: str | bytes) -> None:
    """``content`` to a temporary file beside ``path``, then renamed: never a half-written report."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(content.encode("utf-8") if isinstance(content, str) else content)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_report(data: dict, rows: list[RowResult], output_dir: Path) -> dict[str, Path]:
    """``comparison.{json,md,csv,png}`` in ``output_dir``; returns the paths written."""
    from .figure import plot

    output_dir.mkdir(parents=True, exist_ok=True)
    check_report_files(output_dir)
    paths = report_paths(output_dir)
    write_atomic(paths["json"], json.dumps(data, indent=2) + "\n")
    write_atomic(paths["md"], markdown(data))
    write_atomic(paths["csv"], csv_text(data))
    figure = plot(data) if data["rows"] else None
    if figure is not None:
        write_atomic(paths["png"], figure)
    return {ext: path for ext, path in paths.items() if ext != "png" or figure is not None}
