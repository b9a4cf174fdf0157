"""`compare --dry-run --print-commands` prints commands that run from any folder: their output folders
are absolute, so `--report-only` in the comparison's own folder finds what they wrote."""

import shlex

from compare_reruns import one_row_grid, pals_bench

from pals_adapters.harness import compare
from pals_adapters.harness.cli import main


def test_printed_commands_run_from_another_folder_write_where_report_only_looks(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    grid = one_row_grid(tmp_path / "project", tiny_model_dir, tasks=["mood"])
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(here)
    main(["compare", "--config", str(grid), "--output-dir", "out", "--dry-run", "--print-commands"])
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("pals-bench train ")]
    words = shlex.split(line)
    assert words[words.index("--output-dir") + 1].startswith(str(here / "out" / "runs"))
    done = pals_bench(*words[1:], cwd=elsewhere)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (elsewhere / "out").exists()
    data = compare(grid, "out", report_only=True)
    assert len(data["rows"][0]["runs"]) == 1 and not data.get("missing", {}).get("PALs")
