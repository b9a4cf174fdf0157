"""A GLUE task's export finds the GLUE folder it was scored on as a user task's export finds its files:
relative to the export, in a fresh process started anywhere, with no GLUE_DIR; an export copied where
that path leads nowhere is refused with one message naming --glue-dir, and evaluates once given it."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from helpers import REPO, glue_dir, tiny_run_config

GLUE = glue_dir()
pytestmark = pytest.mark.skipif(GLUE is None, reason="GLUE data not found: provide ../shared/glue")


def pals_bench(*args, cwd):
    env = {k: v for k, v in os.environ.items() if k != "GLUE_DIR"}
    env.update(HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]))
    code = "import sys; from pals_adapters.harness.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def glue_export(tiny_model_dir, tmp_path_factory):
    """A tiny run on RTE whose GLUE folder is a copy beside the project (as a user's would be)."""
    from pals_adapters.harness.training.runner import run

    project = tmp_path_factory.mktemp("project")
    shutil.copytree(GLUE / "RTE", project / "data" / "glue" / "RTE")
    config = tiny_run_config(
        tiny_model_dir, project / "runs" / "rte", tasks=["rte"], glue_dir=str(project / "data" / "glue")
    )
    results = run(config)
    return project, results


def test_the_manifest_records_the_glue_folder_by_name_and_from_the_export_never_absolute(glue_export):
    project, _ = glue_export
    text = (project / "runs" / "rte" / "export" / "rte" / "manifest.json").read_text()
    evaluation = json.loads(text)["evaluation"]
    assert evaluation["glue_dir"] == "glue"
    assert evaluation["glue_dir_from_export"] == "../../../../data/glue"
    assert str(project) not in text


def test_a_fresh_process_anywhere_evaluates_the_export_on_its_own_glue_folder(glue_export, tmp_path):
    project, results = glue_export
    done = pals_bench(
        "evaluate", project / "runs" / "rte" / "export" / "rte", "--out", tmp_path / "m.json", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["tasks"]["rte"]["metrics"]["rte_score"] == pytest.approx(results["metrics"]["rte_score"], abs=1e-6)


def test_a_copied_export_names_the_option_then_evaluates_with_it(glue_export, tmp_path):
    project, results = glue_export
    copy = tmp_path / "elsewhere" / "deep" / "export"
    shutil.copytree(project / "runs" / "rte" / "export", copy)
    refused = pals_bench("evaluate", copy / "rte", cwd=tmp_path)
    assert refused.returncode != 0
    assert "--glue-dir" in refused.stderr and "Traceback" not in refused.stderr
    given = pals_bench(
        "evaluate", copy / "rte", "--glue-dir", project / "data" / "glue", "--out", tmp_path / "m.json", cwd=tmp_path
    )
    assert given.returncode == 0, given.stderr
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["tasks"]["rte"]["metrics"]["rte_score"] == pytest.approx(results["metrics"]["rte_score"], abs=1e-6)
