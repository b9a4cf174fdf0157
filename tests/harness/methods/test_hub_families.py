"""Every encoder family the plugin supports, with tokenizer files shaped as the hub ships them, through
the CLI as a user runs it: train -> export -> evaluate -> predict -> --add-to -> evaluate again.

The families without a pretrained pooler (DistilBERT, ELECTRA, DeBERTa-v2) train a first-token pooler
per task; a tokenizer that only its files' spelling or its last call distinguishes is the same
tokenizer, and a real change (lower-casing, vocabulary) is still refused."""

import json
import shutil
from pathlib import Path

import hub_models
import pytest
import torch
from helpers import glue_dir
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModel, AutoTokenizer

import pals_adapters
from pals_adapters.harness import count_method_parameters
from pals_adapters.harness.cli import main
from pals_adapters.harness.export import load_task
from pals_adapters.harness.export.fingerprint import _legacy_file_digests, tokenizer_fingerprint
from pals_adapters.harness.export.manifest import MANIFEST, read_task_manifest
from pals_adapters.harness.methods.model import MultiTaskModel
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.harness.serving.predictor import MultiTaskPredictor
from pals_adapters.harness.tasks.glue import GLUE_TASKS

pytestmark = pytest.mark.skipif(glue_dir() is None, reason="needs the shared GLUE folder")

SHAPES = list(hub_models.SHAPES)
NO_POOLER = {"distilbert", "electra", "deberta-v2"}
SMALL = ["--max-steps", "4", "--batch-size", "8", "--max-length", "32", "--lr", "1e-3", "--logging-steps", "2"]
SMALL += ["--max-train-examples", "32", "--max-eval-examples", "16", "--sampler", "proportional"]
REQUESTS = [
    {"id": "a", "task": "rte", "text": "A man sleeps on a sofa.", "text_b": "Nobody is sleeping."},
    {"id": "b", "task": "stsb", "text": "A dog runs.", "text_b": "A dog is running."},
    {"id": "c", "task": "rte", "text": "It rains.", "text_b": "The street is wet."},
]


@pytest.fixture(scope="module")
def hub_model(tmp_path_factory):
    built = {}

    def get(shape):
        if shape not in built:
            built[shape] = hub_models.build(shape, tmp_path_factory.mktemp("hub") / shape, glue_dir())
        return built[shape]

    return get


def train_args(model_dir, out, *extra):
    return ["train", "--model", str(model_dir), "--glue-dir", str(glue_dir()), *SMALL, *extra, "--output-dir", str(out)]


def evaluate(export, capsys, *extra) -> dict[str, str]:
    """`pals-bench evaluate EXPORT`: the printed metrics of each task, as printed."""
    capsys.readouterr()
    assert main(["evaluate", str(export), *extra]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if ": " in line and "=" in line]
    return {line.split(":")[0]: line.split(": ", 1)[1].split(" (")[0] for line in lines}


def as_printed(metrics: dict, task: str) -> str:
    """How `evaluate` prints a task's metrics from a run's results.json."""
    return ", ".join(f"{k}={100 * v:.2f}" for k, v in metrics.items() if k.startswith(f"{task}_"))


def requests_file(folder: Path, rows) -> Path:
    path = folder / "requests.tsv"
    lines = ["id\ttask\ttext\ttext_b"] + [f"{r['id']}\t{r['task']}\t{r['text']}\t{r.get('text_b', '')}" for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_every_family_the_plugin_supports_has_a_hub_shape():
    assert {hub_models.FAMILY.get(shape, shape) for shape in SHAPES} == set(pals_adapters.ARCHITECTURES)


@pytest.mark.parametrize("shape", SHAPES)
def test_train_export_evaluate_predict_add_to_evaluate(shape, hub_model, tmp_path, capsys):
    model_dir = hub_model(shape)
    family = hub_models.FAMILY.get(shape, shape)
    # the harness default: a fine-tuned base, exported with its tokenizer
    assert main(train_args(model_dir, tmp_path / "run", "--tasks", "rte", "stsb")) == 0
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    export = tmp_path / "run" / "export"
    pooling = "first_token" if family in NO_POOLER else "pooler"
    assert {read_task_manifest(export / t).pooling for t in ("rte", "stsb")} == {pooling}

    # the export scores what the run scored, with the run's own tokenizer and head
    printed = evaluate(export, capsys)
    assert printed == {t: as_printed(results["metrics"], t) for t in ("rte", "stsb")}

    # requests that name their task, through the CLI and the Python API
    answers = tmp_path / "answers.tsv"
    assert main(["predict", str(export), "--input", str(requests_file(tmp_path, REQUESTS)), "--out", str(answers)]) == 0
    lines = answers.read_text().splitlines()
    assert [line.split("\t")[:2] for line in lines[1:]] == [[r["id"], r["task"]] for r in REQUESTS]
    served = MultiTaskPredictor.from_exports(export).predict(REQUESTS)
    assert [a.label if isinstance(a.label, str) else f"{a.label:.3f}" for a in served] == [
        line.split("\t")[2] for line in lines[1:]
    ]

    # a task added later, on the export's base (frozen), then the whole export again
    added = train_args(model_dir, tmp_path / "add", "--tasks", "cola", "--add-to", str(export))
    added.remove("--model")
    added.remove(str(model_dir))
    assert main(added) == 0
    cola = json.loads((tmp_path / "add" / "results.json").read_text())
    assert read_task_manifest(export / "cola").pooling == pooling
    again = evaluate(export, capsys)
    assert again == {**printed, "cola": as_printed(cola["metrics"], "cola")}


@pytest.mark.parametrize("base", ["frozen", "finetune"])
def test_bert_base_uncased_layout_frozen_and_fine_tuned(base, hub_model, tmp_path, capsys):
    """bert-base-uncased's files; GLUE test-set predictions as well as the dev scores, and a re-export."""
    model_dir = hub_model("bert")
    assert main(train_args(model_dir, tmp_path / "run", "--tasks", "rte", "--base", base, "--save-steps", "4")) == 0
    export = tmp_path / "run" / "export"
    assert (export / "base").is_dir() == (base == "finetune")
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert evaluate(export, capsys) == {"rte": as_printed(results["metrics"], "rte")}
    # the last checkpoint exported again (its tokenizer loaded afresh from the model folder)
    assert main(["export", str(tmp_path / "run"), "--out", str(tmp_path / "again")]) == 0
    assert evaluate(tmp_path / "again", capsys) == {"rte": as_printed(results["metrics"], "rte")}
    assert main(["predict", str(export), "--out", str(tmp_path / "predictions")]) == 0
    lines = (tmp_path / "predictions" / "RTE.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 3001
    assert {line.split("\t")[1] for line in lines[1:]} <= {"entailment", "not_entailment"}


def test_a_first_token_pooler_trains_with_its_task_and_is_exported_with_its_head(hub_model, tmp_path):
    """DistilBERT with its base frozen: the task's pooler is the task's own, trained and exported with its head."""
    model_dir = hub_model("distilbert")
    assert getattr(AutoModel.from_pretrained(model_dir), "pooler", None) is None
    assert (
        main(train_args(model_dir, tmp_path / "run", "--tasks", "rte", "--base", "frozen", "--method", "shared")) == 0
    )
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    hidden = 32
    assert results["parameters"]["trainable"] == (hidden * hidden + hidden) + (hidden * 2 + 2)  # pooler + head
    counted = count_method_parameters("shared", AutoConfig.from_pretrained(model_dir), n_tasks=1)
    assert counted.head_per_task == results["parameters"]["trainable"]  # `pals-bench params` counts it too
    model = load_task(tmp_path / "run" / "export" / "rte")
    assert model.pooling == "first_token" and set(model.task_poolers) == {"rte"}
    head = load_file(str(tmp_path / "run" / "export" / "rte" / "head.safetensors"))
    assert set(head) == {"pooler.dense.weight", "pooler.dense.bias", "classifier.weight", "classifier.bias"}
    torch.testing.assert_close(head["pooler.dense.weight"], model.task_poolers["rte"].dense.weight)


def changed_copy(model_dir: Path, folder: Path, change) -> Path:
    other = Path(shutil.copytree(model_dir, folder))
    change(other)
    return other


def no_lower_casing(folder: Path) -> None:
    (folder / "tokenizer.json").unlink()  # the slow files decide
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False, "model_max_length": 512}))


def swapped_vocabulary(folder: Path) -> None:
    """Two tokens swap ids, in vocab.txt (WordPiece) or vocab.json (BPE); the slow files decide."""
    (folder / "tokenizer.json").unlink(missing_ok=True)
    if (folder / "vocab.txt").exists():
        words = (folder / "vocab.txt").read_text().splitlines()
        words[100], words[101] = words[101], words[100]
        (folder / "vocab.txt").write_text("\n".join(words) + "\n")
    else:
        vocab = json.loads((folder / "vocab.json").read_text())
        a, b = sorted(vocab, key=vocab.get)[100:102]
        vocab[a], vocab[b] = vocab[b], vocab[a]
        (folder / "vocab.json").write_text(json.dumps(vocab))


def only_call_state(folder: Path) -> None:
    """What transformers rewrites: call state in tokenizer_config.json, AddedToken dicts, truncation set."""
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    tokenizer("a b c", "d e", truncation=True, max_length=7, padding="max_length")
    tokenizer.save_pretrained(folder)
    reloaded = AutoTokenizer.from_pretrained(str(folder))
    reloaded("x", truncation=True, max_length=5)
    reloaded.save_pretrained(folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert config["max_length"] == 7 and isinstance(json.loads((folder / "special_tokens_map.json").read_text()), dict)


@pytest.mark.parametrize(
    "change, refused",
    [(no_lower_casing, "normalizer"), (swapped_vocabulary, "model"), (only_call_state, None)],
    ids=["lower-casing", "vocabulary", "call-state-only"],
)
def test_a_real_tokenizer_change_is_refused_and_call_state_is_not(change, refused, hub_model, tmp_path, capsys):
    model_dir = hub_model("bert")
    assert main(train_args(model_dir, tmp_path / "run", "--tasks", "rte", "--base", "frozen")) == 0
    export = tmp_path / "run" / "export"
    other = changed_copy(model_dir, tmp_path / "other-base", change)
    capsys.readouterr()
    if refused is None:
        assert evaluate(export, capsys, "--base-model", str(other))
        return
    with pytest.raises(SystemExit) as info:
        main(["evaluate", str(export), "--base-model", str(other)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "tokenizer of" in err and str(other) in err and f"({refused} differ)" in err
    with pytest.raises(SystemExit):
        main(["predict", str(export), "--base-model", str(other), "--out", str(tmp_path / "p")])
    assert not (tmp_path / "p").exists()


def rewrite_manifests_as_before(export: Path, legacy: dict) -> None:
    """What the previous version wrote: tokenizer file digests, and no pooling field."""
    for manifest in export.glob(f"*/{MANIFEST}"):
        data = json.loads(manifest.read_text())
        data["tokenizer_files"] = legacy
        data.pop("pooling", None)
        manifest.write_text(json.dumps(data, indent=2, sort_keys=True))


@pytest.mark.parametrize("shape", ["bert", "roberta"])
def test_exports_written_by_the_previous_version_still_load_and_grow(shape, hub_model, tmp_path, capsys):
    """Their tokenizer records are file digests: checked against the files the exported base carries."""
    model_dir = hub_model(shape)
    assert main(train_args(model_dir, tmp_path / "run", "--tasks", "rte")) == 0
    export = tmp_path / "run" / "export"
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    legacy = _legacy_file_digests(AutoTokenizer.from_pretrained(str(model_dir)))  # what the old export recorded
    assert legacy != _legacy_file_digests(AutoTokenizer.from_pretrained(str(export / "base")))  # hence the refusal
    rewrite_manifests_as_before(export, legacy)
    assert evaluate(export, capsys) == {"rte": as_printed(results["metrics"], "rte")}
    added = train_args(model_dir, tmp_path / "add", "--tasks", "stsb", "--add-to", str(export))
    added.remove("--model")
    added.remove(str(model_dir))
    assert main(added) == 0
    assert read_task_manifest(export / "stsb").tokenizer_files == tokenizer_fingerprint(
        AutoTokenizer.from_pretrained(str(export / "base"))
    )
    assert set(evaluate(export, capsys)) == {"rte", "stsb"}
    # an old record still refuses a tokenizer that differs (a plain model folder: no manifest)
    other = changed_copy(export / "base", tmp_path / "other", swapped_vocabulary)
    (other / MANIFEST).unlink()
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["evaluate", str(export / "rte"), "--base-model", str(other)])
    assert "vocab" in capsys.readouterr().err


@pytest.mark.parametrize("family", ["albert", "electra", "xmod"])
def test_pooled_output_and_mixed_batches_on_any_family(family):
    """The pretrained pooler as the encoder applies it (ALBERT's is a Linear and a tanh on the first token);
    a batch mixing tasks gives each row what its task alone gives it, first-token poolers included."""
    config = AutoConfig.for_model(family, vocab_size=99, **hub_models.CONFIGS[family])
    tasks = {name: GLUE_TASKS[name] for name in ("rte", "stsb")}
    model = MultiTaskModel(AutoModel.from_config(config), tasks, get_method("pals"), "finetune").eval()
    assert model.pooling == ("first_token" if family in NO_POOLER else "pooler")
    ids = torch.randint(5, 99, (4, 9))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    task_ids = torch.tensor([0, 1, 1, 0])
    with torch.no_grad():
        mixed = model(task_ids=task_ids, input_ids=ids, attention_mask=mask)["logits"]
        for index, task in enumerate(tasks):
            rows = task_ids == index
            alone = model(task=task, input_ids=ids[rows], attention_mask=mask[rows])["logits"]
            torch.testing.assert_close(mixed[task], alone, atol=1e-5, rtol=0)
        if model.pooling == "pooler":
            plain = model.backbone(input_ids=ids, attention_mask=mask)
            torch.testing.assert_close(model.pool("rte", plain.last_hidden_state), plain.pooler_output)
