"""Adding a task later: only its parameters train, against the export's shared base; the old tasks stay."""

import pytest
from helpers import file_hashes, glue_dir, tiny_run_config
from transformers import AutoTokenizer

from pals_adapters.errors import ConfigError
from pals_adapters.harness.evaluation import evaluate_tasks
from pals_adapters.harness.export import load_task, load_tasks
from pals_adapters.harness.runner import load_dev_sets, run

pytestmark = pytest.mark.skipif(glue_dir() is None, reason="needs the shared GLUE folder")


def settings(model_dir, out, **changes):
    return tiny_run_config(model_dir, out, **{"method": "pals", "sampler": "proportional", **changes})


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, tiny_model_dir):
    out = tmp_path_factory.mktemp("first")
    run(settings(tiny_model_dir, out / "run", tasks=["rte", "stsb"]))
    return out / "run" / "export"


def test_an_added_task_trains_alone_and_leaves_the_old_tasks_as_they_were(first_run, tiny_model_dir, tmp_path):
    before = file_hashes(first_run)
    old = load_tasks(first_run)
    config = settings(tiny_model_dir, tmp_path / "add", tasks=["cola"], base="frozen", add_to=str(first_run))
    results = run(config)
    # only the new task's PAL and head were trained
    assert results["parameters"]["trainable"] == results["parameters"]["per_task"]["cola"]
    after = file_hashes(first_run)
    assert {k: v for k, v in after.items() if k.parts[0] != "cola"} == before
    model = load_tasks(first_run)
    assert set(model.tasks) == {"rte", "stsb", "cola"}
    tokenizer = AutoTokenizer.from_pretrained(str(first_run / "base"))
    dev = load_dev_sets(config, model.tasks, tokenizer)
    old_scores = evaluate_tasks(old, {t: dev[t] for t in ("rte", "stsb")}, tokenizer)
    new_scores = evaluate_tasks(model, {t: dev[t] for t in ("rte", "stsb")}, tokenizer)
    assert new_scores == old_scores
    cola_alone = evaluate_tasks(load_task(first_run / "cola"), {"cola": dev["cola"]}, tokenizer)
    assert cola_alone["cola_score"] == pytest.approx(results["metrics"]["cola_score"], abs=1e-9)


@pytest.mark.parametrize(
    "changes, says",
    [
        (dict(tasks=["cola"], base="finetune"), "base=frozen"),
        (dict(tasks=["rte"], base="frozen"), "already has tasks"),
        (dict(tasks=["mrpc"], base="frozen", method="houlsby"), "same"),
    ],
)
def test_adding_is_refused_before_training(first_run, tiny_model_dir, tmp_path, changes, says):
    config = settings(tiny_model_dir, tmp_path / "add", add_to=str(first_run), **changes)
    with pytest.raises(ConfigError, match=says):
        run(config)
    assert not (tmp_path / "add").exists()  # nothing trained or written
