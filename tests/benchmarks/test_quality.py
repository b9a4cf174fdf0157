"""The quality suite: a user of `compare`. Its grid files are valid grids, its help reads as sentences, and
the committed medium runs come out of compare's report with the numbers of the committed tables."""

import json
import re

import pytest
import yaml
from helpers import glue_dir

from benchmarks.quality import suite
from benchmarks.quality.committed import FOLDER, report_committed
from pals_adapters.harness.tasks.glue import GLUE_TASKS

MEDIUM_TABLES = FOLDER / "quality.md"  # the tables as the benchmark's own report wrote them


def committed_tables():
    """{row: [cells]} of the score tables and {row: [cells]} of the paired table in quality.md."""
    scores, paired, section = {}, {}, None
    for line in MEDIUM_TABLES.read_text().splitlines():
        if line.startswith("### "):
            section = "paired" if "minus each row" in line else "scores"
        match = re.match(r"\| (.+?) \(n=(\d)\) \| (.+) \|$", line)
        if match and section in ("scores", "paired"):
            cells = [c.strip() for c in match.group(3).split("|")]
            (paired if section == "paired" else scores)[match.group(1)] = (int(match.group(2)), cells)
    return scores, paired


def test_the_committed_medium_runs_give_the_committed_tables(tmp_path):
    data = report_committed(out=tmp_path)
    scores, paired = committed_tables()
    rows = {row["name"]: row for row in data["rows"]}
    assert list(rows) and set(rows) == set(scores)
    keys = [*data["tasks"], "average"]
    for name, (n, cells) in scores.items():
        row = rows[name]
        assert len(row["seeds"]) == n and f"{row['params_x_base']:.2f}" == cells[0]
        mine = [f"{row['mean'][k]:.1f}" + (f" ± {row['sd'][k]:.1f}" if row["sd"][k] is not None else "") for k in keys]
        assert mine == cells[1:], name
    assert set(data["paired"]) == set(paired)
    for name, (n, cells) in paired.items():
        for key, cell in zip(keys, cells):
            mean, low, high = (float(x) for x in re.findall(r"[+-]\d+\.\d", cell))
            diff = data["paired"][name][key]
            assert (diff["n"], diff["interval"], f"{diff['mean']:+.1f}") == (n, "t", f"{mean:+.1f}")
            # the old table used t = 4.303 (three decimals) where scipy gives 4.3027: an end may round apart
            assert diff["low"] == pytest.approx(low, abs=0.051) and diff["high"] == pytest.approx(high, abs=0.051)


def test_the_committed_report_is_what_compare_makes_of_the_committed_runs(tmp_path):
    committed = json.loads((FOLDER / "comparison.json").read_text())
    now = report_committed(out=tmp_path)
    for key in ("tasks", "reference", "paired"):
        assert committed[key] == now[key]
    assert [(r["name"], r["mean"], r["sd"], r["params_x_base"]) for r in committed["rows"]] == [
        (r["name"], r["mean"], r["sd"], r["params_x_base"]) for r in now["rows"]
    ]
    assert all(run["run_dir"].startswith("runs/") for row in committed["rows"] for run in row["runs"])


@pytest.mark.parametrize("profile", suite.PROFILES)
def test_every_profile_is_a_valid_grid_and_a_dry_run_writes_nothing(profile, tiny_model_dir, tmp_path, capsys):
    if glue_dir() is None:
        pytest.skip("needs the GLUE folder")
    tasks = yaml.safe_load((suite.GRIDS / f"{profile}.yaml").read_text())["tasks"]
    absent = [task for task in tasks if not (glue_dir() / GLUE_TASKS[task].glue_folder).is_dir()]
    if absent:  # a run's identity is the digest of its data: a grid is planned on data at hand only
        pytest.skip(f"the {profile} profile needs {absent} in the GLUE folder")
    argv = ["--profile", profile, "--model", str(tiny_model_dir), "--glue-dir", str(glue_dir()), "--out", str(tmp_path)]
    assert suite.main([*argv, "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "runs, 0 done" in printed and "row 'PALs" in printed
    assert not any(tmp_path.iterdir())


def test_the_help_reads_as_sentences(capsys):
    assert suite.DESCRIPTION.endswith(".") and suite.DESCRIPTION[0].isupper()
    with pytest.raises(SystemExit):
        suite.main(["--help"])
    text = capsys.readouterr().out
    helps = re.findall(r"\n  --\S+(?: \S+)?\s+(\S.*?)(?=\n  -|\Z)", text, flags=re.S)
    assert len(helps) == 8
    for line in helps:
        sentence = " ".join(line.split())
        assert sentence[0].isupper() and sentence.endswith("."), sentence
    assert "grid file" in text
