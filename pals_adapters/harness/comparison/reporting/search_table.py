"""The report's section on each row's search (its ``search`` record, `search.record`): the settings chosen,
what the search cost, and each trial's settings and selection score."""

from __future__ import annotations


def _value(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def search_lines(data: dict) -> list[str]:
    """The report's search section: per searched row, the chosen settings, what the search cost, and each
    trial's settings and selection score."""
    searched = [row for row in data["rows"] if row.get("search")]
    if not searched:
        return []
    lines = [
        "",
        "Settings chosen by each row's search, by their score on the selection part (training rows held out "
        "from the trials' training; the dev set is never read); the row's seeds then trained on the full "
        "training data with them. Selection scores in points; cost: the trials' runs, steps and wall time.",
    ]
    for row in searched:
        search = row["search"]
        names = list(search["space"])
        chosen = ", ".join(f"{n}={_value(v)}" for n, v in (search["chosen"] or {}).items()) or "not finished"
        cost = search["cost"]
        lines += [
            "",
            f"{row['name']}: chose {chosen} ({search['sampler']}, "
            f"{len(search['trials'])} of {search['trials_per_row']} trials, selection {search['selection']:g} of "
            f"the training rows, seed {search['seed']}; cost {cost['runs']} runs, {cost['steps']:,} steps, "
            f"{cost['seconds']:.0f} s)",
            "",
            "| trial | " + " | ".join(names) + " | selection score | |",
            "|---:|" + "---:|" * len(names) + "---:|---|",
        ]
        for trial in search["trials"]:
            score = trial["selection_score"]
            mark = "chosen" if trial["number"] == search["chosen_trial"] else ""
            cells = " | ".join(_value(trial["settings"][n]) for n in names)
            lines.append(f"| {trial['number']} | {cells} | {'-' if score is None else f'{score:.1f}'} | {mark} |")
    return lines
