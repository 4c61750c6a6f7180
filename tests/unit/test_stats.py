"""The statistics of a sweep (distbench/sweep/stats.py): intervals, paired ratios, verdicts."""

import numpy as np

from distbench.sweep import stats


def test_bootstrap_interval_of_five_is_their_min_max():
    """Documented property (docs/statistics.md): with 5 values the 95 % interval of the median is min-max."""
    s = stats.summarize([3.0, 1.0, 2.0, 5.0, 4.0])
    assert (s.median, s.lo, s.hi, s.min, s.max, s.n) == (3.0, 1.0, 5.0, 1.0, 5.0, 5)
    assert stats.summarize([1.0, 2.0, 3.0, 4.0]).has_interval is False  # too few for a 95 % interval
    assert stats.summarize([]) is None


def _paired(true_ratio: float, noise: float, repeats: int, rng, drift=None) -> tuple[dict, dict]:
    """Per-round samples/s of a reference A (100) and B (true_ratio x 100), each with its own relative noise, and a
    round-wide drift multiplying both sides of a round."""
    drift = drift if drift is not None else [1.0] * repeats
    a = {r: 100.0 * drift[r] * (1 + rng.normal(0, noise)) for r in range(repeats)}
    b = {r: 100.0 * true_ratio * drift[r] * (1 + rng.normal(0, noise)) for r in range(repeats)}
    return a, b


def _called_different(true_ratio: float, seed: int) -> bool:
    a, b = _paired(true_ratio, 0.05, 5, np.random.default_rng(seed))
    return stats.distinguishable(stats.summarize(stats.paired_ratios(b, a)))


def test_a_true_20_percent_difference_with_5_percent_noise_is_distinguishable():
    assert _called_different(1.2, seed=0)
    assert sum(_called_different(1.2, seed) for seed in range(200)) >= 0.95 * 200  # power, not one lucky draw
    a, b = _paired(1.2, 0.05, 5, np.random.default_rng(0))
    text = stats.verdict("horovod x2", "ddp x2", stats.summarize(stats.paired_ratios(b, a)))
    assert text.startswith("horovod x2 is 1.") and "x ddp x2 (95 % CI 1." in text


def test_a_1_percent_difference_with_5_percent_noise_is_no_measurable_difference():
    assert not _called_different(1.01, seed=0)
    assert sum(_called_different(1.01, seed) for seed in range(200)) <= 0.15 * 200
    a, b = _paired(1.01, 0.05, 5, np.random.default_rng(0))
    assert "no measurable difference (0." in stats.verdict("b", "a", stats.summarize(stats.paired_ratios(b, a)))


def test_paired_ratios_cancel_a_drift_injected_into_both_sides_of_a_round():
    drift = [1.0, 0.6, 1.4, 0.75, 1.25]  # the machine slows and speeds up by far more than the difference
    a, b = _paired(0.9, 0.005, 5, np.random.default_rng(1), drift)
    paired = stats.summarize(stats.paired_ratios(b, a))
    assert paired.lo > 0.87 and paired.hi < 0.93 and stats.distinguishable(paired)
    # the same numbers unpaired: the drift swamps the difference
    unpaired = stats.ratio_of_medians(list(b.values()), list(a.values()))
    assert not stats.distinguishable(unpaired)


def test_too_few_rounds_give_no_verdict_of_difference():
    text = stats.verdict("ddp x2", "single x1", stats.summarize([1.4]))
    assert "too few for an interval" in text and "--repeats" in text


def test_an_interval_just_below_1_is_not_printed_as_reaching_it():
    ratio = stats.Summary(0.82, 0.74, 0.998, 0.74, 0.998, 3)
    assert stats.verdict("a", "b", ratio) == "a is 0.82x b (95 % CI 0.740-0.998)"
    assert stats.Summary(1.0, 0.97, 1.04, 0.97, 1.04, 5).interval() == "0.97-1.04"
