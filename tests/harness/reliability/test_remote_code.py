"""An export is meant to be downloaded and shared: a base that ships its own Python code (config.json's
``auto_map``) never runs, not even when a terminal answers transformers' "run the custom code?" prompt."""

import ast
import hashlib
import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import reliability_cases as cases
from helpers import REPO

import pals_adapters
from pals_adapters.errors import UnsupportedModelError
from pals_adapters.harness.export import load_task
from pals_adapters.harness.export.manifest import MANIFEST

# Writes a marker file when imported: any sign that transformers ran the export's code.
PLANTED = "from pathlib import Path\nPath({marker!r}).write_text('ran')\n"
PLANTED_CONFIG = PLANTED + (
    "from transformers import BertConfig\n\nclass EvilConfig(BertConfig):\n    model_type = 'evil_bert'\n"
)
PLANTED_MODEL = PLANTED + (
    "from transformers import BertModel\nfrom .configuration_evil import EvilConfig\n\n"
    "class EvilModel(BertModel):\n    config_class = EvilConfig\n"
)
PACKAGE = Path(pals_adapters.__file__).resolve().parent
AUTO_MAP = {"AutoConfig": "configuration_evil.EvilConfig", "AutoModel": "modeling_evil.EvilModel"}


def plant_code(folder: Path, marker: Path) -> None:
    """Turns a model folder into one that asks transformers to run its own code."""
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "evil_bert", "auto_map": AUTO_MAP}))
    (folder / "configuration_evil.py").write_text(PLANTED_CONFIG.format(marker=str(marker)))
    (folder / "modeling_evil.py").write_text(PLANTED_MODEL.format(marker=str(marker)))


def rehash(folder: Path) -> None:
    """Lists every file of a base folder with its new sha256, as an attacker would."""
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["files"] = {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.iterdir())
        if p.is_file() and p.name != MANIFEST
    }
    (folder / MANIFEST).write_text(json.dumps(manifest))


def tampered_export(tmp: Path, marker: Path) -> Path:
    export = cases.served_export(tmp, tasks=("cola",))
    plant_code(export / "base", marker)
    rehash(export / "base")
    return export


def run_answering_yes(argv: list[str], timeout: float = 120) -> tuple[int, str]:
    """Runs ``argv`` on a pseudo-terminal that answers "y" to every prompt; its exit code and output."""
    controller, terminal = os.openpty()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(argv, stdin=terminal, stdout=terminal, stderr=terminal, env=env, close_fds=True)
    os.close(terminal)
    output, deadline = b"", time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(controller, 4096)
                except OSError:  # the terminal closed: the process ended
                    chunk = b""
                output += chunk
                if not chunk and proc.poll() is not None:
                    break
            elif proc.poll() is not None:
                break
            os.write(controller, b"y\n")
        else:
            proc.kill()
    finally:
        proc.wait()
        os.close(controller)
    return proc.returncode, output.decode(errors="replace")


def test_predict_on_a_tampered_export_in_a_terminal_answering_yes_runs_none_of_its_code(tmp_path, tiny_model_dir):
    cases.TINY["model"] = tiny_model_dir
    marker = tmp_path / "ran.txt"
    export = tampered_export(tmp_path, marker)
    (tmp_path / "requests.jsonl").write_text(json.dumps(cases.COLA) + "\n")
    argv = [sys.executable, "-m", "pals_adapters.harness.cli", "predict", str(export)]
    argv += ["--input", str(tmp_path / "requests.jsonl"), "--out", str(tmp_path / "answers.tsv")]
    code, output = run_answering_yes(argv)
    assert not marker.exists(), f"the export's code ran:\n{output[-3000:]}"
    assert code == 2, output[-3000:]
    for fragment in ("ships its own code", "auto_map", "modeling_evil.EvilModel", "modeling_evil.py"):
        assert fragment in output, f"{fragment!r} not in: {output[-3000:]}"
    assert not (tmp_path / "answers.tsv").exists()


def test_a_frozen_task_whose_base_model_name_ships_code_is_refused_before_it_runs(tmp_path, tiny_model_dir):
    cases.TINY["model"] = tiny_model_dir
    marker = tmp_path / "ran.txt"
    export = cases.served_export(tmp_path, base="frozen", tasks=("rte",))
    planted = Path(shutil.copytree(tiny_model_dir, tmp_path / "planted-base"))
    plant_code(planted, marker)
    manifest = json.loads((export / "rte" / MANIFEST).read_text())
    (export / "rte" / MANIFEST).write_text(json.dumps({**manifest, "base_model_name": str(planted)}))
    with pytest.raises(UnsupportedModelError) as info:
        load_task(export / "rte")
    assert not marker.exists(), "the base's code ran"
    for fragment in ("planted-base", "ships its own code", "AutoModel -> modeling_evil.EvilModel", "'evil_bert'"):
        assert fragment in str(info.value)


def from_pretrained_calls_without_remote_code_off() -> list[str]:
    """Every ``X.from_pretrained(...)`` in the package that neither passes ``trust_remote_code`` nor
    ``**NO_REMOTE_CODE``."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "from_pretrained":
                keywords = {k.arg for k in node.keywords} | {
                    k.value.id for k in node.keywords if k.arg is None and isinstance(k.value, ast.Name)
                }
                if not keywords & {"trust_remote_code", "NO_REMOTE_CODE"}:
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    return found


def test_every_from_pretrained_call_of_the_package_turns_remote_code_off():
    assert from_pretrained_calls_without_remote_code_off() == []
