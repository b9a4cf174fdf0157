"""`compare --launcher ray` on a real Ray cluster of two worker nodes (and a head that trains nothing) on this
machine, on loopback only: each test drives it as a user does, a fresh `pals-bench compare` process. The runs
land on both nodes, come back into the output folder as local runs are, and report what the local launcher
reports; a run failing for its own reason fails once and the others go on; a node killed mid-run and a
driver killed mid-grid cost only the runs they cut off; a search's trials run on the cluster and choose as
local ones do; a grid that asks for GPUs the cluster lacks is refused before it starts. One cluster serves
the module (Ray starts slowly on two shared cores)."""

import json
import os
import signal
import sys
import time

import pytest
from compare_grids import write_grid
from ray_cluster import Cluster, loopback_namespace
from search_grids import write_search_grid, write_signal_task

from pals_adapters.harness import compare

pytest.importorskip("ray", reason='the Ray launcher tests need Ray: pip install "pals-adapters[ray]"')

ROWS = "rows:\n  - name: PALs\n    method: pals\n    export: true\n  - name: Houlsby\n    method: houlsby\n"
COST_KEYS = ("seconds", "seconds_per_seed", "examples_per_second", "resumed", "command", "output_dir")  # how a run went


@pytest.fixture(scope="module")
def cluster():
    namespace, why = loopback_namespace()
    if namespace is None:
        pytest.skip(why)
    started = None
    try:
        started = Cluster(namespace)
        started.workers = [started.add_worker("node-a"), started.add_worker("node-b")]
        yield started
    finally:
        if started is not None:
            started.shutdown()
        namespace.close()


def compare_command(grid, out, cluster, *more):
    return [sys.executable, "-m", "pals_adapters.harness.cli", "compare", "--config", str(grid), "--output-dir",
            str(out), "--launcher", "ray", "--ray-address", cluster.address, *more]  # fmt: skip


def grid_file(folder, user_tasks, tiny_model_dir, name, rows=ROWS, **shared):
    grid = write_grid(user_tasks.parent, tiny_model_dir, rows=rows, **shared)
    grid = grid.rename(folder / name)
    grid.write_text(grid.read_text().replace('"tasks.yaml"', json.dumps(str(user_tasks))))
    return grid


def scores_only(data):
    """The report without its cost columns (times, throughput) and the command that made it."""
    if isinstance(data, dict):
        return {key: scores_only(value) for key, value in data.items() if key not in COST_KEYS}
    if isinstance(data, list):
        return [scores_only(item) for item in data]
    return data


def run_files(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_gpu_per_run_is_refused_at_planning(cluster, user_tasks, tiny_model_dir, tmp_path):
    grid = grid_file(tmp_path, user_tasks, tiny_model_dir, "gpu.yaml", resources_per_run={"cpus": 1, "gpus": 0.5})
    done = cluster.run(compare_command(grid, tmp_path / "out", cluster))
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "asks 1 CPU, 0.5 GPU for each run" in done.stderr
    assert "the cluster has 2 CPU, 0 GPU on 3 node(s)" in done.stderr
    assert not (tmp_path / "out" / "runs").exists()


def test_a_grid_on_two_nodes_reports_what_the_local_launcher_reports(cluster, user_tasks, tiny_model_dir, tmp_path):
    # --fsdp passes the planning checks but is refused when its run starts without a distributed launch: a
    # run failing for its own reason, once, while the other runs go on
    failing = "  - name: sharded\n    method: pals\n    fsdp: true\n    seeds: [1]\n"
    grid = grid_file(tmp_path, user_tasks, tiny_model_dir, "grid.yaml", rows=ROWS + failing, max_steps=3)
    done = cluster.run(compare_command(grid, tmp_path / "ray", cluster))
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert "compare: 4/5 runs done" in done.stdout
    assert "compare: FAILED sharded seed 1" in done.stdout and "ConfigError" in done.stdout
    assert done.stdout.count("compare: FAILED") == 1
    assert "1 run(s) failed" in done.stderr and "sharded seed 1" in done.stderr and "--fsdp" in done.stderr
    on_ray = json.loads((tmp_path / "ray" / "comparison.json").read_text())
    assert list(on_ray["missing"]) == ["sharded"]
    grid.write_text(grid.read_text().replace(failing, ""))
    local = compare(grid, tmp_path / "local")
    for key in ("rows", "paired", "floor", "tasks", "reference"):  # every score and interval, to the last digit
        assert scores_only(on_ray[key]) == scores_only(local[key])
    nodes = set()
    finished = sorted(record.parent for record in (tmp_path / "ray" / "runs").glob("*/results.json"))
    assert [f.name for f in finished] == sorted(f.name for f in (tmp_path / "local" / "runs").iterdir())
    unfinished = [f for f in (tmp_path / "ray" / "runs").iterdir() if f not in finished]
    assert [run_files(f) for f in unfinished] == [[".pals-bench.lock"]]  # the failed run's, as a local one's
    for folder in finished:
        here = tmp_path / "local" / "runs" / folder.name
        assert run_files(folder) == run_files(here)  # the same files, the export of the PALs runs among them
        assert (folder / "dev_predictions.jsonl").read_bytes() == (here / "dev_predictions.jsonl").read_bytes()
        results, local_results = (json.loads((f / "results.json").read_text()) for f in (folder, here))
        assert results["metrics"] == local_results["metrics"]
        assert results["config"]["output_dir"] == str(folder)  # the records name this folder, not the node's
        assert "pals-run-" not in (folder / "results.json").read_text() + (folder / "run_config.json").read_text()
        placement = results["placement"]
        assert placement["resources"] == {"cpus": 1, "gpus": 0} and placement["device"] == "cpu"
        assert placement["host"] and placement["cpu"]
        nodes.add(placement["node_id"])
    assert len(nodes) == 2  # both worker nodes trained runs
    assert not [p for node in cluster.workers for p in node.scratch.glob("pals-run-*")]  # scratch cleared


def test_the_driver_killed_mid_grid_reruns_only_the_missing_runs(cluster, user_tasks, tiny_model_dir, tmp_path):
    rows = "rows:\n  - name: PALs\n    method: pals\n"
    grid = grid_file(tmp_path, user_tasks, tiny_model_dir, "killed.yaml", rows=rows, seeds=[1, 2, 3, 4], max_steps=6)
    out = tmp_path / "out"
    driver = cluster.start(compare_command(grid, out, cluster))
    try:
        deadline = time.time() + 150
        while time.time() < deadline and driver.poll() is None and not list(out.glob("runs/[!.]*/results.json")):
            time.sleep(0.02)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    finished = {p.parent: p.stat().st_mtime_ns for p in out.glob("runs/[!.]*/results.json")}
    assert 1 <= len(finished) < 4, "the test must kill the driver between its first and its last run"
    done = cluster.run(compare_command(grid, out, cluster))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"compare: {4 - len(finished)} runs on {cluster.address}" in done.stdout
    assert {p: (p / "results.json").stat().st_mtime_ns for p in finished} == finished  # read, not retrained
    assert len(list(out.glob("runs/*/results.json"))) == 4 and not list(out.glob("runs/.*"))


def test_a_node_lost_mid_run_is_trained_again_on_another_node(cluster, user_tasks, tiny_model_dir, tmp_path):
    storage = tmp_path / "shared"  # a folder every node mounts: the run cut off resumes from its checkpoint
    storage.mkdir()
    rows = "rows:\n  - name: PALs\n    method: pals\n"
    grid = grid_file(
        tmp_path, user_tasks, tiny_model_dir, "lost.yaml", rows=rows, max_steps=24, save_steps=2, storage=str(storage)
    )
    out = tmp_path / "out"
    driver = cluster.start(compare_command(grid, out, cluster))
    victim, cut = None, None
    deadline = time.time() + 150
    while victim is None and time.time() < deadline and driver.poll() is None:
        for folder in storage.glob("*/checkpoint-4"):
            for node in cluster.workers:
                if any(f"pals-run {folder.parent.name}" in line for _, line in node.processes()):
                    victim, cut = node, folder.parent.name
        time.sleep(0.05)
    assert victim is not None, "no run reached its step-4 checkpoint on a worker node"
    victim.kill()
    output, _ = driver.communicate(timeout=240)
    assert driver.returncode == 0, output[-4000:]
    assert "compare: 2/2 runs done" in output and "resumed" in output
    results = json.loads((out / "runs" / cut / "results.json").read_text())
    assert results["config"]["resume"] is not None  # went on from the checkpoint the lost node left
    assert results["config"]["output_dir"] == str(out / "runs" / cut)
    survivor = next(node for node in cluster.workers if node is not victim)
    assert results["placement"]["host"] and survivor.processes()  # the other node is still up and trained it
    assert not list(storage.iterdir())  # the shared folder keeps no finished run
    local = compare(grid, tmp_path / "local")
    assert scores_only(json.loads((out / "comparison.json").read_text())) == scores_only(local)


def test_a_search_on_ray_chooses_and_scores_as_the_local_launcher(cluster, tiny_model_dir, tmp_path):
    write_signal_task(tmp_path)
    rows = "reference: searched\nrows:\n  - name: searched\n    method: shared\n    search: {lr: [1.0e-6, 1.0e-2]}\n"
    grid = write_search_grid(tmp_path, tiny_model_dir, rows, seeds=[1], search={"selection": 0.25})
    done = cluster.run(compare_command(grid, tmp_path / "ray", cluster))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "compare: 2 runs on" in done.stdout and "compare: 1 runs on" in done.stdout  # the trials, then the row
    on_ray = json.loads((tmp_path / "ray" / "comparison.json").read_text())["rows"][0]
    local = compare(grid, tmp_path / "local")["rows"][0]
    assert on_ray["search"]["chosen"] == local["search"]["chosen"] == {"lr": 1e-2}
    for trial, local_trial in zip(on_ray["search"]["trials"], local["search"]["trials"], strict=True):
        for key in ("settings", "selection_score"):
            assert trial[key] == local_trial[key]
        assert "placement" in json.loads((tmp_path / "ray" / trial["run_dir"] / "results.json").read_text())
    assert scores_only(on_ray["runs"]) == scores_only(local["runs"])
