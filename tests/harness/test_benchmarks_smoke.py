"""The quality benchmark (benchmarks/quality.py) end to end and its cached runs; the other suites' tests are
in tests/benchmarks/."""

import dataclasses
import importlib.util
import json
import subprocess
import sys
import warnings

import pytest
from helpers import REPO

BENCHMARKS = REPO / "benchmarks"


def import_script(name):
    spec = importlib.util.spec_from_file_location(f"benchmark_{name[:-3]}", BENCHMARKS / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quality_trains_in_worker_processes_then_reports_from_the_cache(tmp_path, tiny_model_dir):
    glue = REPO.parent / "shared" / "glue"
    if not glue.is_dir():
        pytest.skip("needs ../shared/glue")
    common = ["--profile", "smoke", "--model", str(tiny_model_dir), "--glue-dir", str(glue), "--out", str(tmp_path)]
    rows = ["--rows", "shared (heads only per task)", "PALs + annealed"]
    script = str(BENCHMARKS / "quality.py")
    done = subprocess.run([sys.executable, script, *common, *rows, "--jobs", "2"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    logs = [(tmp_path / "smoke" / f"worker-{i}.log").read_text() for i in range(2)]
    assert all(log.count("] average ") == 2 for log in logs)  # 4 runs (2 rows x 2 seeds), 2 per worker
    report = json.loads((tmp_path / "smoke" / "quality.json").read_text())
    assert [r["name"] for r in report["rows"]] == ["shared (heads only per task)", "PALs + annealed"]
    assert report["paired_differences_pals_minus_row"]["shared (heads only per task)"]["average"]["n"] == 2
    assert report["rows_not_finished"] == []
    # --report-only trains nothing: a row whose runs are missing is listed as not finished.
    again = subprocess.run(
        [sys.executable, script, *common, "--report-only", "--rows", "PALs + annealed", "low-rank"],
        capture_output=True,
        text=True,
    )
    assert again.returncode == 0, again.stderr[-2000:]
    report = json.loads((tmp_path / "smoke" / "quality.json").read_text())
    assert [r["name"] for r in report["rows"]] == ["PALs + annealed"] and report["rows_not_finished"] == ["low-rank"]
    assert not (tmp_path / "smoke" / "runs" / "low_rank-finetune-annealed-cola+sst2+mrpc+stsb+rte-s0").exists()


def test_quality_reruns_get_runs_of_their_own_with_their_settings(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    quality = import_script("quality.py")
    from benchmarks.common import same_settings

    profile = quality.PROFILES["medium"]
    configs = {}  # run id -> config: one cached folder must never stand for two different runs
    for row in quality.ROWS_MEDIUM:
        if row.name.startswith("separate"):  # per-task runs, sized from the data (not read here)
            continue
        for _, run_id, config in quality.planned_runs(profile, row, "glue"):
            if run_id in configs:
                assert same_settings(dataclasses.asdict(configs[run_id]), config), run_id
            configs[run_id] = config
    rows = {row.name: row for row in quality.ROWS_MEDIUM}
    old, new = (
        quality.planned_runs(profile, rows[name], "glue")
        for name in ("PALs, frozen base (plain MSE, one lr)", "PALs, frozen base")
    )
    assert [seed for seed, _, _ in new] == [0, 1, 2] and len(old) == 1
    assert new[0][1] == "pals-frozen-annealed-cola+sst2+mrpc+stsb+rte-frozen-defaults-s0" != old[0][1]
    assert (old[0][2].standardise_targets, old[0][2].scale_shared_lr) == (False, False)  # as the runs were
    assert (new[0][2].standardise_targets, new[0][2].scale_shared_lr) == (True, True)  # the harness's default
    rerun = quality.planned_runs(profile, rows["PALs + MT-Uncertainty"], "glue")
    stale = quality.planned_runs(profile, rows["PALs + MT-Uncertainty (old regression rule)"], "glue")
    assert stale[0][1] == "pals-finetune-mt_uncertainty-cola+sst2+mrpc+stsb+rte-s0"  # the committed run's folder
    assert rerun[0][1] == "pals-finetune-mt_uncertainty-cola+sst2+mrpc+stsb+rte-regression-share-s0"
    assert same_settings(dataclasses.asdict(stale[0][2]), rerun[0][2])  # the same settings: only the tag differs


def test_quality_reuses_a_run_cached_before_its_method_was_renamed(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    quality = import_script("quality.py")
    row = next(r for r in quality.ROWS_MEDIUM if r.method == "attention_on_top")
    [(_, run_id, config)] = quality.planned_runs(quality.PROFILES["medium"], row, "glue")
    assert run_id.startswith("attention_on_top-")
    folder = tmp_path / "runs" / run_id.replace("attention_on_top", "top_pals", 1)  # as cached before the rename
    folder.mkdir(parents=True)
    cached = {"config": {**dataclasses.asdict(config), "method": "top_pals"}, "metrics": {"average": 0.5}}
    (folder / "results.json").write_text(json.dumps(cached))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # reading an old cache is silent
        assert quality.run_cached(tmp_path, run_id, config, train=False) == cached
    assert config.output_dir == str(folder)  # an unfinished run would resume in that folder
    other = dataclasses.replace(config, seed=9)  # any other setting is still a miss
    assert quality.run_cached(tmp_path, run_id, other, train=False) is None
