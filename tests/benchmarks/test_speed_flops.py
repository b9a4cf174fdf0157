"""The speed suite's model FLOPs (for MFU) against torch's own FLOP counter, the data-sheet peaks, and the
GPU targets it checks."""

from types import SimpleNamespace

import pytest
import torch

from benchmarks.speed import flops as speed_flops
from benchmarks.speed import jobs as speed_jobs
from benchmarks.speed import measure as speed_measure
from benchmarks.speed import report as speed_report
from benchmarks.speed import step as speed_step


@pytest.fixture
def speed():
    return speed_step


def speed_jobs_module():
    return speed_jobs


def speed_flops_module():
    return speed_flops


def counted(method, methods=None):
    """FLOPs of each job of one row, as the benchmark counts them, on a tiny model."""
    jobs, count = speed_jobs_module(), speed_flops_module().count_flops
    torch.manual_seed(0)
    work = jobs.make_workload("tiny", 4, 32, torch.device("cpu"))
    bench = jobs.build_benches("tiny", [] if method == "base" else [method], torch.device("cpu"))[method]
    flops = {"forward": count(lambda: jobs.forward(bench, work))}
    for mode in bench.modes[1:]:
        flops[mode] = count(lambda m=mode: jobs.train_step(bench, m, work))
    return work, flops


@pytest.mark.parametrize("method", ["base", "pals", "pals_top_layers", "houlsby", "lora"])
def test_counted_flops_agree_with_the_analytic_forward_and_training_costs(speed, method):
    flops_of = speed_flops_module()
    work, flops = counted(method)
    layers = work.config.num_hidden_layers * flops_of.base_layer_flops(work.config, work.length)
    ratio = 1 if method == "base" else flops_of.flops_ratio(method, work.config, work.length)
    analytic = work.tokens * layers * ratio
    # the counter also sees the pooler and the head on each row's first token: under 1% here
    assert flops["forward"] == pytest.approx(analytic, rel=0.01)
    assert flops["train_full"] == pytest.approx(3 * flops["forward"], rel=0.01)  # backward: 2x the forward
    if method != "base":
        # autograd skips the frozen weights' gradients: more than a forward, less than a full step
        assert flops["forward"] < flops["train_frozen"] < 0.75 * flops["train_full"]


def test_a_frozen_step_of_pals_on_the_top_layers_does_less_work_than_of_pals_everywhere(speed):
    assert counted("pals_top_layers")[1]["train_frozen"] < counted("pals")[1]["train_frozen"]


@pytest.mark.parametrize(
    "name, peak",
    [
        ("NVIDIA H100 80GB HBM3", 989.4),
        ("NVIDIA H100 PCIe", 756.5),
        ("NVIDIA H200", 989.4),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("Some Future GPU", None),
    ],
)
def test_bf16_peaks_by_device_name(speed, name, peak):
    assert speed_flops_module().bf16_peak_tflops(name) == peak


def fake_times(forward, frozen):
    """Rounds where the PALs forward and frozen step take these multiples of the base's."""
    times = {}
    for suffix in ("", " (compiled)"):
        times[("base" + suffix, "forward")] = [1.0, 1.0, 1.0]
        times[("base" + suffix, "train_full")] = [3.0, 3.0, 3.0]
        times[("pals" + suffix, "forward")] = [forward] * 3
        times[("pals" + suffix, "train_frozen")] = [3.0 * frozen] * 3
        times[("pals" + suffix, "train_full")] = [3.3] * 3
    return times


@pytest.mark.parametrize("forward, frozen, passed", [(1.14, 0.99, True), (1.16, 0.99, False), (1.1, 1.0, False)])
def test_on_a_gpu_the_gpu_targets_are_checked(speed, forward, frozen, passed):
    config = speed_jobs_module().model_config("tiny")
    work = SimpleNamespace(device=torch.device("cuda"), config=config, length=32)
    checks = speed.target_checks(fake_times(forward, frozen), work)
    assert [c["target"] for c in checks] == ["<= 1.15", "< 1.0"] * 2
    assert checks[2]["what"].startswith("compiled PALs forward")
    assert all(c["passed"] for c in checks) == passed


def test_on_a_cpu_the_cpu_targets_are_checked(speed):
    config = speed_jobs_module().model_config("tiny")
    work = SimpleNamespace(device=torch.device("cpu"), config=config, length=32)
    checks = speed.target_checks(fake_times(1.05, 0.7), work)
    assert [c["target"] for c in checks] == ["<= 1.09", "<= 1.12", "<= 0.72"] * 2


def test_a_step_whose_gradients_are_not_its_modes_is_refused(speed):
    """As when torch 2.11 reused a compiled frozen-base graph for the full step: the row's time would be
    another step's, so the benchmark stops."""
    jobs = speed_jobs_module()
    work = jobs.make_workload("tiny", 4, 32, torch.device("cpu"))
    bench = jobs.build_benches("tiny", ["pals"], torch.device("cpu"))["pals"]
    jobs.train_step(bench, "train_frozen", work)  # the mode's own gradients: accepted
    model = bench.model

    def stale_graph(**inputs):  # computes the gradients of every weight, whatever the flags said
        for p in model.parameters():
            p.requires_grad_(True)
        return model(**inputs)

    bench.runner = stale_graph
    with pytest.raises(RuntimeError, match="weights have gradients other than this mode's"):
        jobs.train_step(bench, "train_frozen", work)


def test_compiled_rows_have_torch_check_every_weights_requires_grad(speed):
    """torch.compile skips the checks of a module's tensors while its attributes are unchanged; a row's modes
    switch requires_grad between calls, so the benchmark turns that shortcut off when it compiles."""
    config = torch._dynamo.config
    with config.patch(skip_tensor_guards_with_matching_dict_tags=True):  # torch's default, put back afterwards
        speed_jobs_module().build_benches("tiny", ["pals"], torch.device("cpu"))
        assert config.skip_tensor_guards_with_matching_dict_tags  # eager rows leave torch as it is
        speed_jobs_module().build_benches("tiny", ["pals"], torch.device("cpu"), {})
        assert not config.skip_tensor_guards_with_matching_dict_tags


def test_a_compiled_step_whose_first_call_compiles_no_graph_is_refused(speed, monkeypatch):
    """As torch 2.11 ran a frozen-base step through the full step's graph: the base's gradients were computed
    and dropped, so check_gradients saw nothing wrong, and the row timed a full backward."""
    jobs = speed_jobs_module()
    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda model, **options: compile_(model, backend="aot_eager"))
    torch._dynamo.reset()  # no graph of an earlier test's tiny model to reuse
    work = jobs.make_workload("tiny", 4, 32, torch.device("cpu"))
    with torch._dynamo.config.patch(skip_tensor_guards_with_matching_dict_tags=True):
        bench = jobs.build_benches("tiny", ["pals"], torch.device("cpu"), {})["pals (compiled)"]
        jobs.train_step(bench, "train_full", work)  # compiles its graph: accepted
        jobs.train_step(bench, "train_full", work)  # later calls are not checked again
        bench.runner = bench.model  # a first call that compiles nothing, as a reused graph does
        with pytest.raises(RuntimeError, match="compiled no graph of its own"):
            jobs.train_step(bench, "train_frozen", work)


def test_a_compiled_rows_cuda_graph_skips_are_counted_on_its_first_call_and_reported_on_a_gpu(speed):
    from torch._dynamo.utils import counters

    jobs = speed_jobs_module()
    work = jobs.make_workload("tiny", 4, 32, torch.device("cpu"))
    bench = jobs.build_benches("tiny", ["pals"], torch.device("cpu"), {})["pals (compiled)"]
    model = bench.model

    def skipping(**inputs):  # as inductor does when it keeps two graphs out of CUDA graphs
        counters["inductor"]["cudagraph_skips"] += 2
        return model(**inputs)

    bench.runner = skipping
    jobs.forward(bench, work)
    jobs.forward(bench, work)  # later calls compile nothing: not counted again
    assert bench.cudagraph_skips == {"forward": 2}

    report = speed_report
    rows = [{"method": "pals (compiled)", "forward": {"cudagraph_skips": 2}}, {"method": "pals", "forward": {}}]
    results = {"settings": {"compile_mode": "reduce-overhead", "device": "cuda"}, "rows": rows}
    assert "pals (compiled) forward 2." in report.cudagraph_lines(results)[0]
    assert report.cudagraph_lines({**results, "settings": {"compile_mode": "reduce-overhead", "device": "cpu"}}) == []


def test_a_jobs_set_up_runs_before_the_clock_starts(speed, monkeypatch):
    """A row's train/eval switch and requires_grad flags are its job's ``prepare``, which time_rounds runs before
    it starts the clock (bf16 rows too), so the timed call is the step alone."""
    measure = speed_measure
    events = []
    monkeypatch.setattr(measure.time, "perf_counter", lambda: events.append("clock") or 0.0)

    def job():
        events.append("run")

    job.prepare = lambda: events.append("prepare")
    first_calls = {}
    cpu = torch.device("cpu")
    times = measure.time_rounds({"row": measure.autocast_job(job, cpu)}, 1, 1, cpu, 0.0, first_calls)
    assert set(first_calls) == set(times) == {"row"}
    # each round: the set-up, the clock around the call alone, and the clock of the round's progress line
    assert events == ["prepare", "clock", "run", "clock", "clock"] * 2


def test_a_prepared_job_switches_no_mode_in_its_timed_call(speed, monkeypatch):
    jobs = speed_jobs_module()
    work = jobs.make_workload("tiny", 4, 32, torch.device("cpu"))
    bench = jobs.build_benches("tiny", ["pals"], torch.device("cpu"))["pals"]
    switches = []
    train = bench.model.train
    monkeypatch.setattr(bench.model, "train", lambda mode=True: switches.append(mode) or train(mode))
    frozen, forward = jobs.bench_job(bench, "train_frozen", work), jobs.bench_job(bench, "forward", work)

    frozen.prepare()
    assert switches == [True]
    frozen()
    frozen()  # check_gradients inside: the flags set once are the mode's
    assert switches == [True]
    assert {id(p) for p in bench.params if p.requires_grad} == bench.trainable["train_frozen"]

    forward.prepare()
    forward()
    assert switches == [True, False] and not bench.model.training
    assert not any(p.requires_grad for p in bench.params)
    frozen()  # called without its prepare (as pal_step_floor.py does): the step still sets its own mode
    assert switches == [True, False, True]
