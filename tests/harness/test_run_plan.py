"""`plan_run`: a run's settings validated and resolved once into an immutable `RunPlan`."""

import dataclasses
import warnings

import pytest
import yaml
from helpers import glue_dir, tiny_run_config

from pals_adapters.errors import ConfigError
from pals_adapters.harness.cli import build_parser
from pals_adapters.harness.cli.options import config_file_defaults, config_from_args
from pals_adapters.harness.methods import registry
from pals_adapters.harness.plan import RunPlan, plan_run

pytestmark = pytest.mark.skipif(glue_dir() is None, reason="needs the GLUE folder (GLUE_DIR)")


def test_the_method_string_is_parsed_once(tiny_model_dir, tmp_path, monkeypatch):
    parsed = []
    original = registry.canonical_name
    monkeypatch.setattr(registry, "canonical_name", lambda name: parsed.append(name) or original(name))
    config = tiny_run_config(tiny_model_dir, tmp_path / "run", method="pals[hidden_size_aug=12]", batching="mixed")
    plan = plan_run(config)
    assert parsed == ["pals"]  # validation, the mixed-batch check and the model limits share one parse
    assert plan.method.name == "pals" and plan.method.overrides == {"hidden_size_aug": 12}
    assert plan.backend.kind == "adapters"
    assert list(plan.tasks) == list(config.validate())
    assert plan.base_source == str(tiny_model_dir) and plan.base_mode == config.base
    assert plan.export_dir == tmp_path / "run" / "export"


def test_a_plan_cannot_be_changed_and_does_not_follow_the_config(tiny_model_dir, tmp_path):
    config = tiny_run_config(tiny_model_dir, tmp_path / "run")
    plan = plan_run(config)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.method = None
    with pytest.raises(TypeError):
        plan.tasks["other"] = plan.tasks["rte"]
    config.max_steps, config.method = 999, "houlsby"
    assert plan.settings.max_steps != 999 and plan.settings.method == "pals" and plan.method.name == "pals"
    assert isinstance(plan, RunPlan)


def test_a_bad_setting_is_refused_before_a_plan_exists(tiny_model_dir, tmp_path):
    with pytest.raises(ConfigError, match="batching=mixed"):
        plan_run(tiny_run_config(tiny_model_dir, tmp_path / "run", method="attention_on_top", batching="mixed"))
    assert not (tmp_path / "run").exists()


RENAMED = [  # (old, new, settings)
    ("top_pals", "attention_on_top", "[init_weights_seed=3]"),
    ("top_layer", "layer_on_top", ""),
    ("pals_top", "pals_top_layers", "[init_weights_seed=3]"),
    ("pals_bottom", "pals_bottom_layers", ""),
]


@pytest.mark.parametrize("old, new, kvs", RENAMED)
def test_a_yaml_config_with_an_old_method_name_warns_and_plans_the_new_method(tiny_model_dir, tmp_path, old, new, kvs):
    settings = dataclasses.asdict(tiny_run_config(tiny_model_dir, tmp_path / "run", method=old + kvs))
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(settings))
    argv = ["train", "--config", str(path)]
    config = config_from_args(build_parser(config_file_defaults(argv)).parse_args(argv))  # as `pals-bench` reads it
    with pytest.warns(DeprecationWarning, match=f"{old!r} is deprecated.*write {new!r}"):
        plan = plan_run(config)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new name is silent
        expected = plan_run(tiny_run_config(tiny_model_dir, tmp_path / "new", method=new + kvs))
    assert plan.method == expected.method and plan.method.overrides == expected.method.overrides
    assert plan.method.overrides == ({"init_weights_seed": 3} if kvs else {})
    assert plan.backend.kind == expected.backend.kind
    assert plan.settings.method == new + kvs  # recorded (run folder, results) by its new name
