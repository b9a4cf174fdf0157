"""What the suites share (benchmarks.common): the command a result records, cached runs' settings."""

import json
from dataclasses import asdict

from benchmarks.common import command_line, same_settings
from pals_adapters.harness import RunConfig


def test_a_result_records_the_entry_points_command():
    assert command_line("speed throughput", ["--steps", "4"]) == "python -m benchmarks run speed throughput --steps 4"
    assert command_line("params", ["--models", "a b"]) == "python -m benchmarks run params --models 'a b'"


def test_a_cached_run_from_before_a_new_setting_counts_at_its_default_wherever_its_data_lies():
    config = RunConfig(model="m", tasks=["rte"], output_dir="a")
    recorded = json.loads(json.dumps(asdict(config)))
    del recorded["standardise_targets"]  # a run cached before the setting existed
    assert same_settings(recorded, config)
    assert not same_settings(recorded, RunConfig(model="m", tasks=["rte"], output_dir="a", standardise_targets=True))
    assert not same_settings({**recorded, "lr": 1.0}, config)
    assert same_settings({**recorded, "output_dir": "elsewhere"}, config)
    assert not same_settings({**recorded, "output_dir": "elsewhere"}, config, ignore=())
    # the same GLUE files under another spelling of their folder: the same run; no local folder: not
    local = RunConfig(model="m", tasks=["rte"], output_dir="a", glue_dir="../shared/glue")
    assert same_settings({**recorded, "glue_dir": "/work/shared/glue"}, local)
    assert not same_settings(recorded, local)
