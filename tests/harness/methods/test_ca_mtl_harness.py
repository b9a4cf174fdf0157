"""CA-MTL in the harness: per-row routing in mixed batches, what trains, accounting, the run with
MT-Uncertainty, the export (task embedding + head per task, the conditional modules once with the base),
loading it back, and adding a task later."""

import pytest
import torch
from helpers import file_hashes, glue_dir, tiny_bert_config, tiny_run_config
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer, BertConfig, BertModel

from pals_adapters.ca_mtl import count_ca_mtl_parameters
from pals_adapters.errors import AdapterLoadError, ConfigError, IntegrityError, PalsError
from pals_adapters.harness import count_method_parameters
from pals_adapters.harness.export import load_task, load_tasks, read_base_manifest
from pals_adapters.harness.methods.model import MultiTaskModel
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.harness.scoring.evaluation import evaluate_tasks
from pals_adapters.harness.tasks.glue import GLUE_TASKS
from pals_adapters.harness.training.runner import RunConfig, load_dev_sets, run

TASKS = {name: GLUE_TASKS[name] for name in ("rte", "stsb", "cola")}
METHOD = "ca_mtl[max_seq_length=16,num_blocks=4]"


def mixed_inputs(rows=9, length=11):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 99, (rows, length), generator=g)
    mask = torch.ones(rows, length, dtype=torch.long)
    for i in range(0, rows, 2):
        mask[i, 3 + i % 5 :] = 0
    task_ids = torch.tensor([0, 1, 2, 1, 0, 0, 2, 1, 0])[:rows]
    labels = torch.tensor([1, 3.5, 0, 1.25, 0, 1, 1, 4.0, 1])[:rows]
    return ids, mask, task_ids, labels


def tiny_model():
    torch.manual_seed(0)
    model = MultiTaskModel(BertModel(tiny_bert_config()), TASKS, get_method(METHOD), "finetune")
    with torch.no_grad():  # non-trivial conditional modules
        for param in model.backbone.ca_mtl.parameters():
            param.add_(torch.randn_like(param) * 0.2)
    return model.eval()


def test_a_mixed_batch_gives_the_logits_and_gradients_of_its_per_task_parts():
    model = tiny_model()
    ids, mask, task_ids, labels = mixed_inputs()
    out = model(input_ids=ids, attention_mask=mask, task_ids=task_ids, labels=labels)
    out["loss"].backward()
    mixed = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    names = list(TASKS)
    present = torch.unique(task_ids).tolist()
    for index in present:
        rows = task_ids == index
        spec = TASKS[names[index]]
        task_labels = labels[rows] if spec.is_regression else labels[rows].long()
        single = model(task=names[index], input_ids=ids[rows], attention_mask=mask[rows], labels=task_labels)
        torch.testing.assert_close(out["logits"][names[index]], single["logits"], atol=1e-5, rtol=0)
        (single["loss"] / len(present)).backward()
    parts = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert mixed.keys() == parts.keys()
    assert {f"encoder.encoder.layer.0.ca_mtl_tasks.adapters.{t}.weight" for t in TASKS} <= mixed.keys()
    for name in mixed:
        torch.testing.assert_close(mixed[name], parts[name], atol=2e-6, rtol=1e-4, msg=name)


def test_what_trains_is_what_the_config_says():
    model = tiny_model()
    trains = {n for n, p in model.named_parameters() if p.requires_grad}
    names = {n for n, _ in model.named_parameters()}
    frozen = {
        n
        for n in names
        if n.startswith(("encoder.embeddings.", "encoder.encoder.layer.0.", "encoder.encoder.layer.1."))
    }
    frozen -= {f"encoder.encoder.layer.0.ca_mtl_tasks.adapters.{t}.weight" for t in TASKS}
    assert trains == names - frozen
    assert {n for n, _ in model.task_parameters("rte")} == {
        "encoder.encoder.layer.0.ca_mtl_tasks.adapters.rte.weight",
        "heads.rte.weight",
        "heads.rte.bias",
    }
    assert any(n.startswith("encoder.ca_mtl.") for n, _ in model.shared_parameters())


def test_accounting_counts_the_conditional_modules_as_shared():
    config = BertConfig()
    count = count_method_parameters("ca_mtl", config, n_tasks=8)
    plugin = count_ca_mtl_parameters(config, n_tasks=8)
    assert (count.base, count.shared, count.per_task) == (plugin.base, plugin.base + plugin.conditional, 768)
    assert count.total == plugin.total


def test_run_config_defaults_to_mt_uncertainty_for_ca_mtl_only():
    assert RunConfig(method="ca_mtl").sampler == "mt_uncertainty"
    assert RunConfig(method="ca_mtl[num_blocks=2]").sampler == "mt_uncertainty"
    assert RunConfig(method="ca_mtl", sampler="annealed").sampler == "annealed"
    assert RunConfig().sampler == "annealed" and RunConfig(method="pals").sampler == "annealed"


def test_a_frozen_base_is_only_for_adding_tasks():
    with pytest.raises(ConfigError, match="add_to"):
        RunConfig(model="unused", method="ca_mtl", base="frozen").validate()
    # with add_to the frozen base is accepted: what fails next is the missing export itself
    with pytest.raises(PalsError, match="somewhere/manifest.json is missing"):
        RunConfig(model="unused", method="ca_mtl", base="frozen", add_to="somewhere").validate()


# --- a run, its export, and adding a task ---------------------------------------------------------------


pytestmark_glue = pytest.mark.skipif(glue_dir() is None, reason="needs the shared GLUE folder")


def settings(model_dir, out, **changes):
    return tiny_run_config(model_dir, out, **{"method": "ca_mtl", **changes})


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, tiny_model_dir):
    if glue_dir() is None:
        pytest.skip("needs the shared GLUE folder")
    out = tmp_path_factory.mktemp("camtl")
    config = settings(tiny_model_dir, out / "run", tasks=["rte", "stsb"], batching="mixed")
    results = run(config)
    return config, results, out / "run" / "export"


@pytestmark_glue
def test_a_run_trains_with_mt_uncertainty_and_exports_the_shared_part_once(first_run, tiny_model_dir):
    config, results, export = first_run
    assert results["config"]["sampler"] == "mt_uncertainty"
    assert any(0 < entry.get("mix_rte", 0) < 1 for entry in results["log_history"])  # mixed top-b batches
    base = read_base_manifest(export / "base")
    assert "shared_modules.safetensors" in base.files
    for task, hidden in (("rte", 32), ("stsb", 32)):
        files = sorted(p.name for p in (export / task).iterdir())
        assert files == [
            "README.md",
            "adapter.safetensors",
            "adapter_config.json",
            "head.safetensors",
            "head_config.json",  # the head as adapters saves it
            "manifest.json",
            "model_head.safetensors",
        ]
        assert [v.numel() for v in load_file(export / task / "adapter.safetensors").values()] == [hidden]
    assert results["parameters"]["per_task"] == {"rte": 32 + 66, "stsb": 32 + 33}


@pytestmark_glue
def test_exported_tasks_load_back_with_the_run_scores(first_run):
    config, results, export = first_run
    tokenizer = AutoTokenizer.from_pretrained(str(export / "base"))
    model = load_tasks(export)
    dev = load_dev_sets(config, model.tasks, tokenizer)
    scores = evaluate_tasks(model, dev, tokenizer)
    for task in ("rte", "stsb"):
        assert scores[f"{task}_score"] == pytest.approx(results["metrics"][f"{task}_score"], abs=1e-9)
        alone = evaluate_tasks(load_task(export / task), {task: dev[task]}, tokenizer)
        assert alone[f"{task}_score"] == pytest.approx(results["metrics"][f"{task}_score"], abs=1e-9)


@pytestmark_glue
def test_the_shared_modules_are_checked_when_loading(first_run, tmp_path):
    import shutil

    _, _, export = first_run
    copy = tmp_path / "export"
    shutil.copytree(export, copy)
    path = copy / "base" / "shared_modules.safetensors"
    weights = load_file(path)
    weights["task_transform.bias"] += 1
    save_file(weights, path, metadata={"format": "pt", "task": "base", "part": "shared_modules"})
    with pytest.raises(IntegrityError, match="shared_modules.safetensors"):
        load_task(copy / "rte")
    with pytest.raises(AdapterLoadError, match="shared modules"):
        load_task(copy / "rte", base=str(first_run[0].model))  # the pretrained model has none


@pytestmark_glue
def test_adding_a_task_trains_only_its_embedding_and_head_and_leaves_the_old_tasks(first_run, tiny_model_dir, tmp_path):
    import shutil

    config, _, original = first_run
    export = tmp_path / "export"
    shutil.copytree(original, export)
    before = file_hashes(export)
    old = load_tasks(export)
    added = settings(tiny_model_dir, tmp_path / "add", tasks=["cola"], base="frozen", add_to=str(export))
    results = run(added)
    assert results["parameters"]["trainable"] == results["parameters"]["per_task"]["cola"] == 32 + 66
    after = file_hashes(export)
    assert {k: v for k, v in after.items() if k.parts[0] != "cola"} == before
    model = load_tasks(export)
    assert set(model.tasks) == {"rte", "stsb", "cola"}
    tokenizer = AutoTokenizer.from_pretrained(str(export / "base"))
    dev = load_dev_sets(added, model.tasks, tokenizer)
    old_scores = evaluate_tasks(old, {t: dev[t] for t in ("rte", "stsb")}, tokenizer)
    assert evaluate_tasks(model, {t: dev[t] for t in ("rte", "stsb")}, tokenizer) == old_scores
    cola = evaluate_tasks(load_task(export / "cola"), {"cola": dev["cola"]}, tokenizer)
    assert cola["cola_score"] == pytest.approx(results["metrics"]["cola_score"], abs=1e-9)


def test_a_predictor_answers_requests_of_several_tasks_in_one_forward(tmp_path, tiny_model_dir):
    from pals_adapters.harness.export import export_run
    from pals_adapters.harness.serving.predictor import MultiTaskPredictor

    torch.manual_seed(0)
    model = MultiTaskModel(BertModel.from_pretrained(tiny_model_dir), TASKS, get_method("ca_mtl"), "finetune")
    with torch.no_grad():  # a trained-looking model: not the initial weights
        for param in model.trainable_parameters():
            param.add_(torch.randn_like(param) * 0.02)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    export_run(model, tmp_path / "export", base_model_name=str(tiny_model_dir), tokenizer=tokenizer, max_length=40)
    predictor = MultiTaskPredictor.from_exports(tmp_path / "export")
    assert predictor.one_forward
    requests = [
        {"task": "cola", "text": "The book was read by the girl."},
        {"task": "rte", "text": "A man sleeps on a sofa.", "text_b": "Nobody is sleeping."},
        {"task": "stsb", "text": "A dog runs.", "text_b": "A dog is running."},
        {"task": "cola", "text": "Book the read girl was."},
    ]
    for request, answer in zip(requests, predictor.predict(requests)):
        task = request["task"]
        texts = [request["text"]] + ([request["text_b"]] if TASKS[task].is_pair else [])
        inputs = tokenizer(*texts, truncation=True, max_length=40, return_tensors="pt")
        with torch.no_grad():
            expected = load_task(tmp_path / "export" / task)(task=task, **inputs)["logits"][0]
        torch.testing.assert_close(torch.tensor(answer.logits), expected, atol=1e-5, rtol=1e-5)


def test_an_exported_task_loads_in_plain_adapters_with_the_base_folder_s_shared_modules(tmp_path, tiny_model_dir):
    import adapters
    from adapters import AdapterSetup

    from pals_adapters.ca_mtl import SHARED_MODULES_FILE, load_shared_modules, save_shared_modules
    from pals_adapters.harness.export import export_run

    torch.manual_seed(0)
    model = MultiTaskModel(BertModel.from_pretrained(tiny_model_dir), TASKS, get_method(METHOD), "finetune")
    with torch.no_grad():  # a trained-looking model: not the initial weights
        for param in model.trainable_parameters():
            param.add_(torch.randn_like(param) * 0.02)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    export = tmp_path / "export"
    export_run(model, export, base_model_name=str(tiny_model_dir), tokenizer=tokenizer, max_length=16)
    inputs = tokenizer(["A man sleeps.", "Nobody is sleeping on the sofa."], padding=True, return_tensors="pt")
    trained = load_task(export / "rte")
    with torch.no_grad(), trained.backend.activate(trained, "rte"):
        expected = trained.encoder(**inputs).last_hidden_state

    # as a user of plain adapters: the exported encoder, then the task folder
    plain = BertModel.from_pretrained(export / "base").eval()
    adapters.init(plain)
    plain.load_adapter(str(export / "rte"))
    with pytest.raises(AdapterLoadError, match=f"load_shared_modules.*{export / 'base'}"), AdapterSetup("rte"):
        plain(**inputs)  # the shared modules are the freshly initialised ones: refused, not silently off
    load_shared_modules(plain, export / "base")  # one format: the harness's base folder, read by the API
    with torch.no_grad(), AdapterSetup("rte"):
        torch.testing.assert_close(plain(**inputs).last_hidden_state, expected, atol=1e-6, rtol=0)
    # and what the API writes is the file the harness writes
    save_shared_modules(plain, tmp_path / "api")
    ours, theirs = load_file(tmp_path / "api" / SHARED_MODULES_FILE), load_file(export / "base" / SHARED_MODULES_FILE)
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


@pytestmark_glue
def test_the_block_layout_must_cover_max_length_before_anything_is_built(tiny_model_dir):
    with pytest.raises(ConfigError, match="max_length=32.*max_seq_length=16 tokens.*max_length <= 16"):
        RunConfig(
            model=str(tiny_model_dir), tasks=["rte"], method="ca_mtl[max_seq_length=16]", max_length=32
        ).validate()
    RunConfig(model=str(tiny_model_dir), tasks=["rte"], method="ca_mtl[max_seq_length=32]", max_length=32).validate()
