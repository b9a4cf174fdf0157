"""Run folders are named by the settings that change a run's scores, and by nothing else."""

import dataclasses
import warnings

from pals_adapters.harness import RunConfig
from pals_adapters.harness.comparison.naming import run_folder_name, settings_digest


def test_the_digest_follows_the_scores_settings_only():
    config = RunConfig(model="m", tasks=["rte"], method="pals", seed=1, output_dir="a")
    same = dataclasses.replace(config, output_dir="b", threads=3, logging_steps=7, export=False, save_steps=5)
    assert settings_digest(same) == settings_digest(config)
    for change in ({"lr": 1e-3}, {"seed": 2}, {"method": "houlsby"}, {"base": "frozen"}, {"max_steps": 10}):
        assert settings_digest(dataclasses.replace(config, **change)) != settings_digest(config), change
    # where the data, tasks and model are counts by their content (the run's inputs), not in the settings;
    # a renamed method is the same method
    for where in ({"glue_dir": "/x"}, {"task_file": "t.yaml"}, {"model": "/elsewhere/m"}, {"data_source": "local"}):
        assert settings_digest(dataclasses.replace(config, **where)) == settings_digest(config), where
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        old = dataclasses.replace(config, method="top_pals")
    assert settings_digest(old) == settings_digest(dataclasses.replace(config, method="attention_on_top"))


def test_the_folder_name_reads_as_the_run_and_ends_with_the_digest():
    config = RunConfig(model="m", tasks=["rte"], method="houlsby[reduction_factor=13.7]", seed=2)
    digest = settings_digest(config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        old = dataclasses.replace(config, method="full")
    assert run_folder_name(old, False, digest) == f"shared-finetune-s2-{digest}"  # by the method's current name
    assert run_folder_name(config, False, digest) == f"houlsby_reduction_factor=13.7-finetune-s2-{digest}"
    assert run_folder_name(config, True, digest) == f"houlsby_reduction_factor=13.7-finetune-rte-s2-{digest}"
