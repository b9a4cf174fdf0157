"""Importing pals_adapters changes nothing for the library's own methods; every patch is scoped and listed."""

import inspect
import json
import subprocess
import sys
import textwrap

import adapters
import pytest
import torch
from adapters import AutoAdapterModel
from adapters.loading import AdapterLoader
from adapters.model_mixin import ModelAdaptersMixin, ModelWithHeadsAdaptersMixin
from tiny_models import encode, inputs, plain_model, tiny_config

import pals_adapters.ca_mtl.contract as ca_mtl_contract
import pals_adapters.ca_mtl.integration as ca_mtl_integration
import pals_adapters.pals.integration as integration
from pals_adapters.errors import IntegrityError

# Runs in a fresh interpreter, with or without the plugin: every file the library writes for its own
# methods, the keys inside, whether each reloads to the same output, and supports_adapter's answers.
BEHAVIOUR_PROBE = textwrap.dedent(
    """
    import json, os, sys, tempfile
    import adapters, torch
    from adapters import ADAPTER_CONFIG_MAP, AutoAdapterModel
    from adapters.composition import Stack
    from transformers import AutoModel, BertConfig, GPT2Config
    if sys.argv[1] == "with":
        import pals_adapters

    METHODS = ["seq_bn", "lora", "mam", "compacter[phm_dim=2, reduction_factor=8]", "prefix_tuning",
               "prompt_tuning", "unipelt"]
    config = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=37)
    batch = {"input_ids": torch.arange(5, 23).view(2, 9), "attention_mask": torch.ones(2, 9, dtype=torch.long)}

    def model(kind):
        torch.manual_seed(0)
        if kind == "flex":
            return AutoAdapterModel.from_config(config).eval()
        m = AutoModel.from_config(config).eval()
        adapters.init(m)
        return m

    def listing(folder):
        out = {}
        for root, _, files in os.walk(folder):
            for f in sorted(files):
                path = os.path.join(root, f)
                rel = os.path.relpath(path, folder)
                if f.endswith(".bin"):
                    out[rel] = sorted(torch.load(path, weights_only=True))
                elif f.endswith(".safetensors"):
                    from safetensors.torch import load_file
                    out[rel] = sorted(load_file(path))
                else:
                    out[rel] = "file"
        return out

    report = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("flex", "plain"):
            for method in METHODS:
                key = f"{kind}/{method}"
                m = model(kind)
                m.add_adapter("x", config=method, set_active=True)
                with torch.no_grad():
                    expected = m(**batch)[0]
                entry = {}
                for call in ("save_adapter", "save_all_adapters", "save_adapter_setup"):
                    folder = os.path.join(tmp, key, call)
                    os.makedirs(os.path.dirname(folder), exist_ok=True)
                    try:
                        if call == "save_adapter":
                            m.save_adapter(folder, "x")
                        elif call == "save_all_adapters":
                            m.save_all_adapters(folder)
                        else:
                            m.save_adapter_setup(folder, Stack("x"))
                        entry[call] = listing(folder)
                    except Exception as err:
                        entry[call] = f"{type(err).__name__}: {err}".replace(tmp, "<tmp>")
                try:
                    fresh = model(kind)
                    if isinstance(entry["save_adapter_setup"], dict):
                        fresh.load_adapter_setup(os.path.join(tmp, key, "save_adapter_setup"), set_active=True)
                    else:
                        fresh.load_adapter(os.path.join(tmp, key, "save_adapter"), set_active=True)
                    with torch.no_grad():
                        entry["reloads_equal"] = bool(torch.allclose(fresh(**batch)[0], expected, atol=1e-6))
                except Exception as err:
                    entry["reloads_equal"] = f"{type(err).__name__}: {err}".replace(tmp, "<tmp>")
                report[key] = entry
    gpt2 = AutoModel.from_config(GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=99))
    adapters.init(gpt2)
    bert = model("plain")
    # the plugin's own config types (PALs, CA-MTL) are what it adds; the library's must be unchanged
    names = [n for n, c in ADAPTER_CONFIG_MAP.items() if getattr(c, "architecture", None) not in ("pals", "ca_mtl")]
    report["supports"] = {
        n: [bert.supports_adapter(ADAPTER_CONFIG_MAP[n]), gpt2.supports_adapter(ADAPTER_CONFIG_MAP[n])] for n in names
    }
    report["config_names"] = sorted(names)
    print(json.dumps(report, sort_keys=True))
    """
)


def probe(*modes):
    """Runs the probe once per mode, the processes side by side."""
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", BEHAVIOUR_PROBE, mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for mode in modes
    ]
    reports = []
    for run in runs:
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err[-3000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports


def test_the_library_writes_reads_and_answers_the_same_with_or_without_the_plugin():
    without, with_plugin = probe("without", "with")
    assert with_plugin == without
    # and what it writes is what the library documents: pickle by default for its own methods
    assert "pytorch_adapter.bin" in without["flex/seq_bn"]["save_adapter"]
    assert without["flex/mam"]["reloads_equal"] is True


def test_pickle_refusal_is_an_explicit_opt_in_for_other_methods(tmp_path):
    source = plain_model("bert")
    source.add_adapter("h", config="double_seq_bn", set_active=True)
    source.save_adapter(str(tmp_path), "h")
    assert (tmp_path / "pytorch_adapter.bin").is_file()  # the library's default, untouched
    model = plain_model("bert")
    with pytest.raises(IntegrityError, match="pickle weight file refused"):
        model.load_adapter(str(tmp_path), allow_pickle=False)
    assert "h" not in model.adapters_config
    assert model.load_adapter(str(tmp_path), set_active=True) == "h"  # default: the library's behaviour
    with torch.no_grad():
        assert torch.equal(encode(model, inputs()), encode(source, inputs()))


def test_houlsby_setup_round_trip_with_the_library_defaults(tmp_path):
    torch.manual_seed(0)
    model = AutoAdapterModel.from_config(tiny_config("bert")).eval()
    model.add_adapter("h", config="double_seq_bn")
    model.add_adapter("p", config="pals")
    model.save_adapter_setup(str(tmp_path), ["h", "p"])
    assert (tmp_path / "h" / "pytorch_adapter.bin").is_file() and (tmp_path / "p" / "adapter.safetensors").is_file()
    torch.manual_seed(0)
    fresh = AutoAdapterModel.from_config(tiny_config("bert")).eval()
    fresh.load_adapter_setup(str(tmp_path), set_active=True)
    model.set_active_adapters(["h", "p"])
    with torch.no_grad():
        assert torch.equal(model.base_model(**inputs())[0], fresh.base_model(**inputs())[0])


def patched_attributes(marker):
    """(owner, name) of every function of `adapters` that carries ``marker``."""
    owners = [adapters.AdapterConfig, ModelAdaptersMixin, ModelWithHeadsAdaptersMixin, AdapterLoader]
    for owner in owners:
        for name, value in vars(owner).items():
            function = value.__func__ if isinstance(value, staticmethod) else value
            if getattr(function, marker, False):
                yield owner.__name__, name


@pytest.mark.parametrize(
    "method, docs",
    [
        ("pals", [integration]),
        ("ca_mtl", [ca_mtl_integration, ca_mtl_contract]),
    ],
)
def test_every_patch_is_listed_with_its_reason_in_one_place(method, docs):
    marker = {"pals": integration.PATCH_MARKER, "ca_mtl": ca_mtl_integration.PATCH_MARKER}[method]
    patched = sorted(set(patched_attributes(marker)))
    # what each method's register() patches: found by the marker, so a patch added without a docstring entry fails
    assert patched, f"no {method} patch found"
    listed = "\n".join(inspect.getdoc(module) for module in docs)
    for owner, name in patched:
        assert f"``{name}``" in listed or f"{owner}.{name}" in listed, (method, owner, name)


def test_the_patch_listing_sees_a_new_unlisted_patch():
    """The listing check above can fail: a patch made with a method's marker and no docstring entry is found."""
    from pals_adapters.patching import wrap

    class Owner:
        def unlisted_call(self):
            return 1

    wrap(Owner, "unlisted_call", lambda original, self: original(self) + 1, integration.PATCH_MARKER)
    assert Owner().unlisted_call() == 2
    assert getattr(vars(Owner)["unlisted_call"], integration.PATCH_MARKER)
    assert "``unlisted_call``" not in inspect.getdoc(integration)
