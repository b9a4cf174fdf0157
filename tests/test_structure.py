"""The package's shape: a light plugin, imports pointing one way, method backends, names, a CLI that explains itself."""

import ast
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from helpers import REPO, batch, tiny_bert_config
from torch import nn
from transformers import BertModel

from pals_adapters.errors import ConfigError, DataError, UnknownNameError
from pals_adapters.harness import METHODS, Method, MethodBackend, MultiTaskModel, get_method, register_backend
from pals_adapters.harness.cli import build_parser
from pals_adapters.harness.methods.registry import OLD_NAMES, register_method
from pals_adapters.harness.tasks.glue import GLUE_TASKS
from pals_adapters.harness.tasks.user_tasks import custom_task

PACKAGE = REPO / "pals_adapters"
HARNESS_ONLY = ["datasets", "peft", "sklearn", "evaluate"]  # the issue names these; transformers needs the rest


def test_the_plugin_imports_without_the_harness_dependencies():
    # None in sys.modules: `import x` fails and importlib.util.find_spec("x") says "not installed",
    # exactly as when the package is absent.
    blocker = (
        "import sys\n"
        f"for name in {HARNESS_ONLY!r}:\n"
        "    sys.modules[name] = None\n"
        "import pals_adapters, adapters\n"
        "from transformers import BertConfig\n"
        "from adapters import AutoAdapterModel\n"
        "m = AutoAdapterModel.from_config(BertConfig(hidden_size=48, num_hidden_layers=2, num_attention_heads=4,"
        " intermediate_size=64, vocab_size=99))\n"
        "m.add_adapter('t', config='pals')\n"
        "print(pals_adapters.count_parameters('pals', m.config, n_tasks=2).per_task)\n"
        f"assert all(sys.modules[name] is None for name in {HARNESS_ONLY!r})\n"
    )
    out = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.strip().splitlines()[-1]) > 0


def _imports(path: Path, package: str) -> set[str]:
    """Modules of pals_adapters imported at module level by ``path`` (absolute names)."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                name = f"{base}.{node.module}" if node.module else base
                found.add(name)
                found.update(f"{name}.{a.name}" for a in node.names)
            elif (node.module or "").startswith("pals_adapters"):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("pals_adapters"))
    return found


def _module_graph() -> dict[str, set[str]]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        package = ".".join(parts[:-1]) if parts[-1] != "__init__" else name
        modules[name] = _imports(path, package)
    return {m: {d for d in deps if d in modules and d != m} for m, deps in modules.items()}


def test_the_core_never_imports_the_harness():
    graph = _module_graph()
    core = [m for m in graph if not m.startswith("pals_adapters.harness")]
    assert core, "no core modules found"
    for module in core:
        assert not any(d.startswith("pals_adapters.harness") for d in graph[module]), module


def test_module_imports_form_no_cycle():
    graph = _module_graph()
    # package __init__ files only re-export: leave them out, as an import of a.b runs a/__init__ first anyway
    graph = {
        m: {d for d in deps if not (PACKAGE.parent / d.replace(".", "/") / "__init__.py").is_file()}
        for m, deps in graph.items()
    }
    state = {}

    def visit(node, trail):
        if state.get(node) == "done":
            return
        assert state.get(node) != "open", f"import cycle: {' -> '.join(trail + [node])}"
        state[node] = "open"
        for dep in graph.get(node, ()):
            visit(dep, trail + [node])
        state[node] = "done"

    for module in graph:
        visit(module, [])


@pytest.mark.parametrize("old, new", sorted(OLD_NAMES.items()))
def test_old_method_names_still_work_and_warn(old, new):
    with pytest.warns(DeprecationWarning, match=f"{old!r} is deprecated.*write {new!r}") as caught:
        method = get_method(old)
    assert all(issubclass(w.category, FutureWarning) for w in caught)  # 0.1's renames warned so: still caught
    assert caught[0].filename == __file__  # points at the line that names it
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert method == get_method(new) and method.name == new


def test_the_renamed_names_are_unambiguous_and_map_as_documented():
    expected = {
        "pals_top": "pals_top_layers",
        "pals_bottom": "pals_bottom_layers",
        "top_pals": "attention_on_top",
        "top_layer": "layer_on_top",
    }
    assert {old: OLD_NAMES[old] for old in expected} == expected
    assert not set(OLD_NAMES) & set(METHODS)  # an old name is never also a method
    on_top = METHODS["attention_on_top"], METHODS["layer_on_top"]  # per-task layers above the encoder
    assert [(m.kind, m.top) for m in on_top] == [("top", "pals"), ("top", "bert_layer")]
    for preset in ("pals_top_layers", "pals_bottom_layers"):  # PALs inside the encoder's layers
        assert (METHODS[preset].kind, METHODS[preset].adapter_config) == ("adapters", preset)
    with pytest.warns(DeprecationWarning, match="attention_on_top"):  # with settings, as typed
        old = get_method("top_pals[hidden_size_aug=24]")
    assert old == get_method("attention_on_top[hidden_size_aug=24]")


def test_the_cli_help_names_the_new_methods_only():
    text = " ".join(build_parser().commands["train"].format_help().split())
    for name in ("pals_top_layers", "pals_bottom_layers", "attention_on_top", "layer_on_top"):
        assert name in text
    for old in ("top_pals", "top_layer,", "pals_top,", "pals_bottom,"):
        assert old not in text


@pytest.mark.parametrize(
    "spec, says",
    [
        ("houlsby[reduction=32]", "reduction_factor"),
        ("pals[hidden_size=64]", "hidden_size_aug"),
        ("peft_lora[rank=4]", "rank"),
        ("attention_on_top[widht=3]", "PALsConfig"),
        ("shared[x=1]", "takes no settings"),
        ("pals[hidden_size_aug=", "key=value"),
    ],
)
def test_bad_method_settings_are_refused_before_anything_is_built(spec, says):
    with pytest.raises(ConfigError, match=says):
        get_method(spec)


def test_unknown_method_lists_the_methods():
    with pytest.raises(UnknownNameError) as info:
        get_method("palz")
    assert "pals_no_share" in str(info.value) and "peft_lora" in str(info.value)


class ScaledHeadBackend(MethodBackend):
    """A made-up method family for the test: one learned scale per task on the encoder output."""

    kind = "test_scale"

    def attach(self, model, encoder, tasks):
        for task in tasks:
            model.tops[task] = nn.Linear(1, 1, bias=False)
        return encoder

    def task_modules(self, model, task):
        return [model.tops[task]]

    def after_encoder(self, model, task, sequence, attention_mask):
        return sequence * model.tops[task].weight


def test_a_new_method_is_one_backend_and_one_method_entry():
    register_backend(ScaledHeadBackend)
    register_method(Method("test_scale", "test_scale"))
    try:
        tasks = {"rte": GLUE_TASKS["rte"], "stsb": GLUE_TASKS["stsb"]}
        model = MultiTaskModel(BertModel(tiny_bert_config()), tasks, get_method("test_scale"), "frozen")
        owned = {n for n, _ in model.task_parameters("rte")}
        assert owned == {"tops.rte.weight", "heads.rte.weight", "heads.rte.bias"}
        assert {id(p) for p in model.trainable_parameters()} == {
            id(p) for t in tasks for _, p in model.task_parameters(t)
        }
        ids, mask = batch()
        out = model(task="rte", input_ids=ids, attention_mask=mask, labels=torch.zeros(len(ids), dtype=torch.long))
        out["loss"].backward()
        assert model.tops["rte"].weight.grad is not None and model.tops["stsb"].weight.grad is None
    finally:
        METHODS.pop("test_scale", None)


def test_every_cli_option_has_help():
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command").choices
    for name, sub in subparsers.items():
        for action in sub._actions:
            if action.dest in ("help",):
                continue
            text = (action.help or "").split("(default")[0].strip()
            assert text, f"pals-bench {name} {action.option_strings or action.dest} has no help"


def test_a_tab_file_declared_csv_hints_tsv(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("text\tlabel\nnice\tpos\nbad\tneg\n")
    with pytest.raises(DataError, match="format: tsv"):
        from pals_adapters.harness import load_split

        load_split(custom_task("mine", train=path, labels=["pos", "neg"]), "train")


def test_a_score_declared_as_classes_hints_regression(tmp_path):
    path = tmp_path / "train.csv"
    rows = [f"s{i},{i * 0.13:.2f}" for i in range(40)]
    path.write_text("text,label\n" + "\n".join(rows) + "\n")
    with pytest.raises(ConfigError, match="type: regression"):
        custom_task("score", train=path)
