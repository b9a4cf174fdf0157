"""``import pals_adapters`` registers PALs and CA-MTL with `adapters` whatever a program imports first, and
imports neither torch nor `adapters` itself. Each case is a fresh process: the first import is the point."""

import json
import subprocess
import sys

import pytest

# What a program's first lines may be: the plugin before or after adapters, or one of its packages first.
FIRST_IMPORTS = {
    "plugin, then adapters": "import pals_adapters\nimport adapters",
    "adapters, then plugin": "import adapters\nimport pals_adapters",
    "a plugin name first": "import pals_adapters\npals_adapters.PALsConfig",
    "a PALs module first": "from pals_adapters.pals.config import PALsConfig",
    "the CA-MTL package first": "from pals_adapters.ca_mtl import CAMTLConfig",
    "the harness first": "from pals_adapters.harness import get_method\nget_method('pals')",
}

# After the first lines: what adapters knows, in which order the two methods' patches stack, and (where asked)
# a model with both adapters added through the library's own call.
PROBE = """
import json, sys
import adapters, pals_adapters
from pals_adapters.ca_mtl.integration import PATCH_MARKER as CA_MTL
from pals_adapters.pals.integration import PATCH_MARKER as PALS

outer = adapters.AdapterConfig.__dict__["_get_config_class"].__func__
added = []
if sys.argv[1:] == ["model"]:
    from adapters import BertAdapterModel
    from transformers import BertConfig

    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                        vocab_size=99)
    model = BertAdapterModel(config)
    model.add_adapter("a", config="pals")
    model.add_adapter("b", config="ca_mtl")
    added = sorted(model.adapters_config.adapters)
print(json.dumps({
    "registered": sorted(n for n in ("pals", "low_rank", "pals_top", "ca_mtl") if n in adapters.ADAPTER_CONFIG_MAP),
    "loaded": [type(adapters.AdapterConfig.load(name)).__name__ for name in ("pals", "ca_mtl")],
    "ca_mtl_outside": getattr(outer, CA_MTL, False) and not getattr(outer.__wrapped__, CA_MTL, False),
    "pals_inside": getattr(outer.__wrapped__, PALS, False),
    "hook_left": [type(f).__name__ for f in sys.meta_path if "Registration" in type(f).__name__],
    "adapters": added,
}))
"""
# the order whose registration waits longest (an adapters import started inside the plugin) also builds a model
BUILDS_A_MODEL = "a PALs module first"


def _run(code, *args):
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("name", FIRST_IMPORTS)
def test_the_plugin_registers_whatever_is_imported_first(name):
    build = name == BUILDS_A_MODEL
    seen = json.loads(_run(FIRST_IMPORTS[name] + "\n" + PROBE, *(["model"] if build else [])))
    assert seen["registered"] == ["ca_mtl", "low_rank", "pals", "pals_top"]
    assert seen["loaded"] == ["PALsConfig", "CAMTLConfig"]
    assert seen["pals_inside"] and seen["ca_mtl_outside"]  # PALs first, then CA-MTL: the order patches stack in
    assert seen["hook_left"] == []  # the import hook is gone once it has registered
    assert seen["adapters"] == (["a", "b"] if build else [])


def test_importing_the_plugin_imports_no_torch_and_no_adapters():
    loaded = _run(
        "import sys, pals_adapters\n"
        "print([m for m in ('torch', 'transformers', 'adapters', 'datasets', 'peft') if m in sys.modules])"
    )
    assert loaded == "[]"
