"""Tests for pals_adapters.harness.data (task samplers, annealing, MT-Uncertainty)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pals_adapters.errors import UnknownNameError
from pals_adapters.harness.data.sampling import STRATEGIES, TaskSampler, annealing_alpha, make_sampler
from pals_adapters.harness.data.schedule import format_schedule, plot_schedule, schedule
from pals_adapters.harness.data.uncertainty import select_uncertain

SIZES = {"mnli": 392_702, "qqp": 363_846, "sst2": 67_349, "rte": 2_490}
N = np.array(list(SIZES.values()), dtype=np.float64)

# One entry per strategy: the keyword arguments make_sampler needs for it.
CONFIGS = {
    "round_robin": {},
    "proportional": {},
    "sqrt": {},
    "temperature": {"alpha": 0.3},
    "annealed": {"total_steps": 10_000, "steps_per_epoch": 2_000},
    "mt_uncertainty": {},
}


def build(strategy: str, seed: int = 0, sizes: dict[str, int] = SIZES) -> TaskSampler:
    return make_sampler(strategy, sizes, seed=seed, **CONFIGS.get(strategy, {}))


@pytest.mark.parametrize("name", ["annealled", "Annealed", "", "round-robin"])
def test_an_unknown_strategy_is_refused_naming_every_strategy(name):
    with pytest.raises(UnknownNameError) as info:
        make_sampler(name, SIZES, seed=0)
    assert all(strategy in str(info.value) for strategy in STRATEGIES)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_has_its_own_distribution(strategy):
    # no two strategy names may silently be the same sampler (a name mapped to the wrong family)
    others = {s: build(s).probabilities(10_000) for s in STRATEGIES if s != strategy}
    mine = build(strategy).probabilities(10_000)
    twins = [s for s, p in others.items() if np.allclose(p, mine)]
    assert twins == [] or {strategy, *twins} == {"round_robin", "mt_uncertainty"}, twins


# ---------------------------------------------------------------- probabilities


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_probabilities_sum_to_one(strategy):
    sampler = build(strategy)
    assert sampler.task_names == list(SIZES)
    for step in [0, 1, 2, 3, 1999, 2000, 5000, 9999, 10_000, 123_456]:
        p = sampler.probabilities(step)
        assert p.shape == (len(SIZES),)
        assert np.all(p >= 0)
        assert p.sum() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize(
    "strategy, expected",
    [
        ("proportional", N / N.sum()),
        ("sqrt", np.sqrt(N) / np.sqrt(N).sum()),
        ("temperature", N**0.3 / (N**0.3).sum()),
        ("round_robin", np.full(4, 0.25)),
        ("mt_uncertainty", np.full(4, 0.25)),
    ],
)
def test_probabilities_match_formula(strategy, expected):
    np.testing.assert_allclose(build(strategy).probabilities(17), expected, rtol=1e-12)


def test_temperature_zero_is_uniform():
    sampler = make_sampler("temperature", SIZES, alpha=0)
    np.testing.assert_allclose(sampler.probabilities(0), np.full(4, 0.25))


def test_annealed_probabilities_follow_epoch_alpha():
    sampler = build("annealed")
    for step, alpha in [(0, 1.0), (2_000, 0.8), (4_000, 0.6), (6_000, 0.4), (9_999, 0.2)]:
        np.testing.assert_allclose(sampler.probabilities(step), N**alpha / (N**alpha).sum(), rtol=1e-12)


def test_round_robin_cycles():
    sampler = build("round_robin", seed=123)
    assert sampler.sequence(0, 10) == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert sampler.sample(10**9 + 2) == 2


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_empirical_frequencies_match_probabilities(strategy):
    sampler = build(strategy, seed=7)
    n = 20_000
    counts = np.bincount(sampler.sequence(0, n), minlength=len(SIZES))
    # Compare with the mean distribution over the same steps (annealed varies).
    expected = np.mean([sampler.probabilities(s) for s in range(n)], axis=0)
    np.testing.assert_allclose(counts / n, expected, atol=0.012)


def test_extreme_temperature_does_not_overflow():
    sampler = make_sampler("temperature", {"a": 10**6, "b": 1}, alpha=500)
    np.testing.assert_allclose(sampler.probabilities(0), [1.0, 0.0])
    assert set(sampler.sequence(0, 200)) == {0}


# ---------------------------------------------------------------- annealing


def test_annealing_alpha_endpoints_and_monotone():
    total, per_epoch = 10_000, 2_400  # E = 5, last epoch is partial
    alphas = [annealing_alpha(s, total, per_epoch) for s in range(0, total + 500, 100)]
    assert alphas[0] == 1.0
    assert annealing_alpha(total - 1, total, per_epoch) == 0.2
    assert annealing_alpha(4 * 2_400, total, per_epoch) == 0.2  # first step of epoch 5
    assert annealing_alpha(4 * 2_400 - 1, total, per_epoch) == pytest.approx(0.4)
    assert annealing_alpha(total + 10**6, total, per_epoch) == 0.2  # clamped past the end
    assert all(a >= b for a, b in zip(alphas, alphas[1:]))


@pytest.mark.parametrize("total", [1, 100, 2_400])
def test_annealing_single_epoch_keeps_alpha_one(total):
    assert annealing_alpha(0, total, 2_400) == 1.0
    assert annealing_alpha(total - 1, total, 2_400) == 1.0
    sampler = make_sampler("annealed", SIZES, total_steps=total)
    np.testing.assert_allclose(sampler.probabilities(total - 1), N / N.sum())


@pytest.mark.parametrize(
    "args, match",
    [((-1, 10, 5), "step"), ((0, 0, 5), "total_steps"), ((0, 10, 0), "steps_per_epoch")],
)
def test_annealing_alpha_rejects_bad_args(args, match):
    with pytest.raises(ValueError, match=match):
        annealing_alpha(*args)


# ---------------------------------------------------------------- determinism


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_same_seed_same_sequence(strategy):
    assert build(strategy, seed=3).sequence(0, 500) == build(strategy, seed=3).sequence(0, 500)


@pytest.mark.parametrize("strategy", [s for s in STRATEGIES if s != "round_robin"])
def test_different_seeds_differ(strategy):
    assert build(strategy, seed=1).sequence(0, 500) != build(strategy, seed=2).sequence(0, 500)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_resumed_sampler_continues_sequence(strategy):
    full = build(strategy, seed=11).sequence(0, 600)
    state = json.loads(json.dumps(build(strategy, seed=11).state_dict()))  # as a checkpoint
    resumed = build(strategy, seed=11)
    resumed.load_state_dict(state)
    assert resumed.sequence(437, 600) == full[437:]
    # Sampling order must not matter (no hidden state): step 437 drawn in isolation.
    assert build(strategy, seed=11).sample(437) == full[437]


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"seed": 1}, "seed"),
        ({"strategy": "sqrt"}, "strategy"),
        ({"sizes": {**SIZES, "rte": 2_491}}, "task_sizes"),
        ({"sizes": dict(reversed(list(SIZES.items())))}, "task_names"),
        ({"total_steps": 9_000}, "total_steps"),
        ({"steps_per_epoch": 1_000}, "steps_per_epoch"),
    ],
)
def test_load_state_dict_with_different_config_raises(changes, field):
    base = dict(strategy="annealed", seed=0, sizes=SIZES, total_steps=10_000, steps_per_epoch=2_000)
    other = {**base, **changes}
    ours = make_sampler(
        base["strategy"],
        base["sizes"],
        seed=base["seed"],
        total_steps=base["total_steps"],
        steps_per_epoch=base["steps_per_epoch"],
    )
    theirs = make_sampler(
        other["strategy"],
        other["sizes"],
        seed=other["seed"],
        total_steps=other["total_steps"],
        steps_per_epoch=other["steps_per_epoch"],
    )
    with pytest.raises(ValueError, match=field):
        ours.load_state_dict(theirs.state_dict())


def test_load_state_dict_alpha_mismatch_and_missing_field():
    sampler = make_sampler("temperature", SIZES, alpha=0.5)
    with pytest.raises(ValueError, match="alpha"):
        sampler.load_state_dict(make_sampler("temperature", SIZES, alpha=0.6).state_dict())
    state = sampler.state_dict()
    del state["seed"]
    with pytest.raises(ValueError, match="seed"):
        sampler.load_state_dict(state)


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "strategy, sizes, kwargs, match",
    [
        ("bogus", SIZES, {}, "round_robin, proportional"),
        ("sqrt", {}, {}, "task_sizes"),
        ("sqrt", {"a": 0}, {}, "task_sizes"),
        ("sqrt", {"a": -5}, {}, "task_sizes"),
        ("sqrt", {"a": 2.5}, {}, "task_sizes"),
        ("annealed", SIZES, {}, "total_steps"),
        ("temperature", SIZES, {}, "alpha"),
        ("temperature", SIZES, {"alpha": -0.1}, "alpha"),
        ("temperature", SIZES, {"alpha": float("nan")}, "alpha"),
        ("sqrt", SIZES, {"alpha": 0.5}, "alpha"),
        ("sqrt", SIZES, {"steps_per_epoch": 0}, "steps_per_epoch"),
        ("annealed", SIZES, {"total_steps": 100, "steps_per_epoch": -1}, "steps_per_epoch"),
        ("annealed", SIZES, {"total_steps": 0}, "total_steps"),
        ("sqrt", SIZES, {"seed": -1}, "seed"),
    ],
)
def test_make_sampler_rejects_bad_arguments(strategy, sizes, kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_sampler(strategy, sizes, **kwargs)


def test_errors_are_project_types():
    from pals_adapters.errors import ConfigError, UnknownNameError

    with pytest.raises(UnknownNameError):
        make_sampler("bogus", SIZES)
    with pytest.raises(ConfigError):
        make_sampler("sqrt", {})


def test_negative_step_rejected():
    with pytest.raises(ValueError, match="step"):
        build("sqrt").sample(-1)


# ---------------------------------------------------------------- property tests

task_sizes_st = st.lists(st.integers(1, 10**6), min_size=1, max_size=9).map(
    lambda sizes: {f"task{i}": n for i, n in enumerate(sizes)}
)


@settings(max_examples=150, deadline=None)
@given(
    sizes=task_sizes_st,
    strategy=st.sampled_from(STRATEGIES),
    alpha=st.floats(0, 20, allow_nan=False),
    total=st.integers(1, 10**7),
    per_epoch=st.integers(1, 10**5),
    step=st.integers(0, 10**8),
)
def test_property_probabilities_valid(sizes, strategy, alpha, total, per_epoch, step):
    sampler = make_sampler(
        strategy,
        sizes,
        total_steps=total,
        steps_per_epoch=per_epoch,
        alpha=alpha if strategy == "temperature" else None,
    )
    p = sampler.probabilities(step)
    assert np.all(p >= 0) and np.all(np.isfinite(p))
    assert p.sum() == pytest.approx(1.0, abs=1e-9)
    assert 0 <= sampler.sample(step) < len(sizes)


@settings(max_examples=200, deadline=None)
@given(per_epoch=st.integers(1, 10**5), epochs=st.integers(2, 500), data=st.data())
def test_property_annealing_endpoints(per_epoch, epochs, data):
    # total_steps anywhere in ((E-1)*per_epoch, E*per_epoch] gives exactly E epochs.
    total = data.draw(st.integers((epochs - 1) * per_epoch + 1, epochs * per_epoch))
    assert annealing_alpha(0, total, per_epoch) == 1.0
    assert annealing_alpha(total - 1, total, per_epoch) == 0.2
    mid = data.draw(st.integers(0, total - 1))
    assert 0.2 <= annealing_alpha(mid, total, per_epoch) <= 1.0
    assert annealing_alpha(mid, total, per_epoch) >= annealing_alpha(min(mid + per_epoch, total - 1), total, per_epoch)


@settings(max_examples=60, deadline=None)
@given(
    sizes=task_sizes_st,
    strategy=st.sampled_from(STRATEGIES),
    seed=st.integers(0, 2**32),
    start=st.integers(0, 10**6),
    resume_at=st.integers(0, 40),
)
def test_property_resumed_sequence_equal(sizes, strategy, seed, start, resume_at):
    kwargs = {"total_steps": 2 * 10**6, "steps_per_epoch": 1_000} if strategy == "annealed" else {}
    if strategy == "temperature":
        kwargs = {"alpha": 0.7}
    first = make_sampler(strategy, sizes, seed=seed, **kwargs)
    full = first.sequence(start, start + 40)
    resumed = make_sampler(strategy, sizes, seed=seed, **kwargs)
    resumed.load_state_dict(first.state_dict())
    assert resumed.sequence(start + resume_at, start + 40) == full[resume_at:]


# ---------------------------------------------------------------- select_uncertain


def reference_scores(logits, num_classes):
    """Independent numpy version of the MT-Uncertainty score of classification tasks."""
    u = []
    for out, c in zip(logits, num_classes):
        x = out.double().numpy()
        p = np.exp(x - x.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        h = -(p * np.log(np.where(p > 0, p, 1.0))).sum(axis=1)
        u.append(h / math.log(c))
    means = np.array([v.mean() for v in u])
    return [v * m / means.max() for v, m in zip(u, means)]


def test_select_uncertain_uniform_logits_score_highest():
    logits = [
        torch.tensor([[5.0, 0.0, 0.0], [0.0, 0.0, 0.0], [2.0, 1.0, 0.0]]),  # 3 classes
        torch.tensor([[0.0, 0.0], [9.0, -9.0]]),  # 2 classes
    ]
    picked = select_uncertain(logits, [3, 2], top_b=2)
    # Task 0's uniform example has u=1 and task 0's mean is higher, so it wins;
    # task 1's uniform example (u=1) is second, scaled by its lower task mean.
    assert picked == [(0, 1), (1, 0)]
    scores = reference_scores(logits, [3, 2])
    assert scores[0][1] == pytest.approx(1.0)
    # Task 1's uniform example is scaled by m_1 / m_0 (task 0 has the larger mean).
    u0 = reference_scores(logits[:1], [3])[0]
    u1 = reference_scores(logits[1:], [2])[0]
    assert scores[1][0] == pytest.approx(u1.mean() / u0.mean())
    ranked = sorted(
        ((s, t, j) for t, v in enumerate(scores) for j, s in enumerate(v)),
        key=lambda x: -x[0],
    )
    assert select_uncertain(logits, [3, 2], top_b=5) == [(t, j) for _, t, j in ranked]


def test_select_uncertain_task_scaling_factor():
    # Both tasks have a perfectly uniform example (u=1), but task 0's mean is
    # about 0.5 against task 1's 1.0, so task 0's uniform example is scaled to ~0.5.
    logits = [torch.tensor([[0.0, 0.0], [30.0, -30.0]]), torch.zeros(2, 2)]
    assert select_uncertain(logits, [2, 2], top_b=3) == [(1, 0), (1, 1), (0, 0)]
    ref = reference_scores(logits, [2, 2])
    assert ref[0][0] == pytest.approx(0.5, abs=1e-6)


def test_select_uncertain_ties_are_stable():
    logits = [torch.zeros(3, 4), torch.zeros(2, 4)]
    assert select_uncertain(logits, [4, 4], top_b=5) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]


def test_select_uncertain_matches_reference_on_random_logits():
    gen = torch.Generator().manual_seed(0)
    logits = [
        torch.randn(8, 3, generator=gen) * 3,
        torch.randn(5, 2, generator=gen),
        torch.randn(6, 7, generator=gen) * 2,
    ]
    scores = reference_scores(logits, [3, 2, 7])
    flat = np.concatenate(scores)
    pairs = [(t, j) for t, v in enumerate(scores) for j in range(len(v))]
    expected = [pairs[i] for i in np.argsort(-flat, kind="stable")[:10]]
    assert select_uncertain(logits, [3, 2, 7], top_b=10) == expected


def test_select_uncertain_regression_keeps_its_proportional_share():
    gen = torch.Generator().manual_seed(0)
    cls = [torch.randn(32, 2, generator=gen), torch.randn(32, 3, generator=gen)]
    reg = torch.randn(32, generator=gen)  # regression predictions, shape (B,)
    picked = select_uncertain([cls[0], reg, cls[1]], [2, 1, 3], top_b=32, is_regression=[False, True, False])
    # 32 * 32 / 96 = 10.67 -> 11 regression rows (the largest remainder), in candidate order, last.
    assert picked[-11:] == [(1, j) for j in range(11)]
    # The other 21 are the top classification rows by score, ranked without the regression task.
    scores = reference_scores(cls, [2, 3])
    pairs = [(t, j) for t in (0, 2) for j in range(32)]
    expected = [pairs[i] for i in np.argsort(-np.concatenate(scores), kind="stable")[:21]]
    assert picked[:21] == expected
    # (B, 1) regression outputs are accepted too.
    assert picked == select_uncertain(
        [cls[0], reg[:, None], cls[1]], [2, 1, 3], top_b=32, is_regression=[False, True, False]
    )


def test_select_uncertain_regression_is_not_starved_by_confident_classifiers():
    # The case that starved STS-B with a median stand-in score: the top b rows of five tasks'
    # candidates are the upper tail of the classification scores, above any typical value.
    gen = torch.Generator().manual_seed(1)
    cls = [torch.randn(32, 2, generator=gen) * 4 for _ in range(4)]
    outs = cls[:3] + [torch.randn(32, generator=gen)] + cls[3:]
    regression = [False, False, False, True, False]
    picked = select_uncertain(outs, [2, 2, 2, 1, 2], top_b=32, is_regression=regression)
    assert sum(t == 3 for t, _ in picked) == 6  # 32 * 32 / 160 = 6.4
    assert len(set(picked)) == 32


def test_select_uncertain_all_regression_splits_by_size():
    outs = [torch.randn(3), torch.randn(2)]
    # 4 * 3/5 = 2.4 and 4 * 2/5 = 1.6: floors 2 and 1, the remaining row to the larger remainder.
    assert select_uncertain(outs, [1, 1], top_b=4, is_regression=[True, True]) == [(0, 0), (0, 1), (1, 0), (1, 1)]


@pytest.mark.parametrize(
    "logits, num_classes, top_b, kwargs, match",
    [
        ([torch.zeros(2, 2), torch.zeros(3, 2)], [2, 2], 6, {}, "top_b=6 exceeds the 5"),
        ([torch.zeros(2, 2)], [2], 0, {}, "top_b"),
        ([torch.zeros(2, 2)], [2, 2], 1, {}, "num_classes"),
        ([torch.zeros(2, 3)], [2], 1, {}, r"shape \(B, 2\)"),
        ([torch.zeros(2, 1)], [1], 1, {}, "is_regression"),
        ([torch.zeros(2, 2)], [2], 1, {"is_regression": [False, True]}, "is_regression"),
        ([torch.zeros(2, 2)], [1], 1, {"is_regression": [True]}, "regression"),
        ([torch.tensor([[0.0, float("nan")]])], [2], 1, {}, "NaN"),
        ([], [], 1, {}, "empty"),
    ],
)
def test_select_uncertain_rejects_bad_input(logits, num_classes, top_b, kwargs, match):
    with pytest.raises(ValueError, match=match):
        select_uncertain(logits, num_classes, top_b, **kwargs)


# ---------------------------------------------------------------- schedule


def test_schedule_rows_and_format():
    sampler = build("annealed")
    rows = schedule(sampler, 10_000)  # default: one row per epoch
    assert [r["step"] for r in rows] == [0, 2_000, 4_000, 6_000, 8_000]
    assert [r["epoch"] for r in rows] == [1, 2, 3, 4, 5]
    assert [r["alpha"] for r in rows] == pytest.approx([1.0, 0.8, 0.6, 0.4, 0.2])
    assert set(rows[0]) == {"step", "epoch", "alpha"} | {f"p_{t}" for t in SIZES}
    text = format_schedule(rows)
    lines = text.splitlines()
    assert lines[0].split() == list(rows[0])
    assert set(lines[1]) <= {"-", " "}
    assert len(lines) == 2 + len(rows)
    assert lines[-1].split()[2] == "0.2000"


def test_schedule_without_alpha_and_custom_every():
    rows = schedule(build("round_robin"), 10, every=3)
    assert [r["step"] for r in rows] == [0, 3, 6, 9]
    assert "alpha" not in rows[0]
    assert len(format_schedule(rows).splitlines()) == 2 + 4
    assert format_schedule([]) == ""


@pytest.mark.parametrize("strategy", ["annealed", "round_robin"])
def test_plot_schedule_writes_png(tmp_path, strategy):
    path = plot_schedule(build(strategy), 10_000, tmp_path / "sub" / "schedule.png")
    data = path.read_bytes()
    assert len(data) > 1_000
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
