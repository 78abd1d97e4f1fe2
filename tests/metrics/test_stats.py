"""The package's estimators of a speedup and its one interval (specrepro.core.stats): each estimator pinned on a
hand-made example where all three differ (so a swap fails), the layout they read, and the paired bootstrap's
pairing, coverage, determinism and bad input."""
import numpy as np
import pytest

from specrepro.core import stats

# Three runs, each (method, baseline) x (tokens, seconds): twice and three times as fast on two short prompts, half
# as fast on a long one (a run stalled by something else on the machine, say).
RUNS = np.array([[[10, 1.0], [10, 2.0]],
                 [[10, 1.0], [10, 3.0]],
                 [[100, 50.0], [100, 25.0]]])  # [N=3, 2, 2]


def test_the_three_estimators_by_hand():
    assert stats.paired_ratios(RUNS) == pytest.approx([2.0, 3.0, 0.5])
    # pooled: (120 tokens / 52 s) over (120 tokens / 30 s): the long run dominates
    assert stats.pooled_ratio(RUNS) == pytest.approx(30 / 52)
    assert stats.median_of_ratios(RUNS) == pytest.approx(2.0)  # the stalled run barely counts
    assert stats.mean_of_ratios(RUNS) == pytest.approx((2.0 + 3.0 + 0.5) / 3)  # every run weighs the same
    assert stats.median_of_ratios(RUNS[:2]) == pytest.approx(2.5)  # an even count: the middle two's mean
    assert stats.POOLED_RATIO == "pooled tokens/s ratio" and stats.MEDIAN_OF_RATIOS == "median of paired ratios"
    assert stats.MEAN_OF_RATIOS == "mean of paired ratios"


def test_the_layout_leading_axes_and_totals():
    """Any leading axes index runs ([P, S] as [N]); a caller holding totals passes them as [2, 2]; the same runs in
    another memory layout (a bootstrap resample is not C-contiguous) give the same float, not merely a close one."""
    x = np.random.default_rng(0).uniform(0.1, 3.0, size=(7, 3, 2, 2))  # [P, S, 2, 2]
    flat = x.reshape(-1, 2, 2)  # [N, 2, 2]
    for estimator in (stats.pooled_ratio, stats.median_of_ratios, stats.mean_of_ratios):
        assert estimator(x) == pytest.approx(estimator(flat), rel=1e-12)
    assert stats.pooled_ratio(x) == stats.pooled_ratio(np.asfortranarray(x))
    seeds_outer = np.moveaxis(np.ascontiguousarray(np.moveaxis(x, 1, 0)), 0, 1)  # [P, S, 2, 2], S outer in memory
    assert stats.pooled_ratio(x) == stats.pooled_ratio(seeds_outer)
    totals = flat.sum(axis=0)  # [2, 2]
    assert stats.pooled_ratio(totals) == pytest.approx(stats.pooled_ratio(x), rel=1e-12)
    with pytest.raises(ValueError, match=r"\[\.\.\., 2, 2\]"):
        stats.pooled_ratio(np.ones((4, 2)))
    with pytest.raises(ValueError, match="no run"):
        stats.median_of_ratios(np.ones((0, 2, 2)))


def test_pairing_cancels_prompt_difficulty():
    """Prompts differ by ±3 nats but the method shifts every one by +0.1: paired, the interval is tight around 0.1."""
    rng = np.random.default_rng(0)
    difficulty = rng.normal(0, 3, size=20)  # [P]
    x = np.stack([difficulty, difficulty + 0.1 + rng.normal(0, 0.01, 20)], axis=-1)[:, None]  # [P, S=1, M=2]
    low, high = stats.paired_bootstrap(x, lambda s: float(np.mean(s[..., 1] - s[..., 0])))
    assert 0.09 < low < 0.1 < high < 0.11


def test_a_speedup_interval_is_paired():
    """Every prompt runs twice as fast as its baseline, whatever its own speed: every resample's pooled ratio is 2."""
    base = np.random.default_rng(2).uniform(0.5, 5.0, size=(9, 2))  # [P, S] baseline seconds for 10 tokens
    x = np.stack([np.stack([np.full_like(base, 10), base / 2], -1),
                  np.stack([np.full_like(base, 10), base], -1)], axis=-2)  # [P, S, 2, 2]
    assert stats.paired_bootstrap(x, stats.pooled_ratio, resamples=50) == pytest.approx((2.0, 2.0))


def test_coverage():
    """Over 200 simulated studies (12 prompts × 3 seeds, noise sd 1): the 95% interval covers the true mean in ≥ 90%
    of them."""
    rng = np.random.default_rng(1)
    covered = 0
    for _ in range(200):
        x = rng.normal(0.0, 1.0, size=(12, 3))  # [P, S]
        low, high = stats.paired_bootstrap(x, lambda s: float(np.mean(s)), resamples=300,
                                           seed=int(rng.integers(1 << 30)))
        covered += low <= 0.0 <= high
    assert covered >= 180, covered


def test_determinism_level_and_resamples():
    """The same seed gives the same interval; a Generator is drawn from (the same as its seed); the level widens
    the interval and ``resamples`` is the number of statistics computed."""
    x = np.random.default_rng(3).uniform(0.5, 3.0, size=(10, 2, 2, 2))  # [P, S, 2, 2]
    first = stats.paired_bootstrap(x, stats.pooled_ratio, resamples=200, seed=5)
    assert stats.paired_bootstrap(x, stats.pooled_ratio, resamples=200, seed=5) == first
    assert stats.paired_bootstrap(x, stats.pooled_ratio, resamples=200, seed=np.random.default_rng(5)) == first
    assert stats.paired_bootstrap(x, stats.pooled_ratio, resamples=200, seed=6) != first
    narrow = stats.paired_bootstrap(x, stats.pooled_ratio, resamples=200, seed=5, level=0.5)
    assert first[0] < narrow[0] <= narrow[1] < first[1]
    calls = []
    stats.paired_bootstrap(x, lambda s: calls.append(s.shape) or 1.0, resamples=17)
    assert calls == [(10, 2, 2, 2)] * 17


def test_bad_input_gets_one_clear_error():
    with pytest.raises(ValueError, match="not finite"):
        stats.paired_bootstrap(np.array([1.0, np.nan]), np.mean)
    with pytest.raises(ValueError, match="level"):
        stats.paired_bootstrap(np.ones(3), np.mean, level=1.0)
    with pytest.raises(ValueError, match="resamples"):
        stats.paired_bootstrap(np.ones(3), np.mean, resamples=0)
    with pytest.raises(ValueError, match="at least one prompt"):
        stats.paired_bootstrap(np.ones((0, 2)), np.mean)


def test_verdicts_use_this_interval():
    from specrepro.metrics import verdict
    assert verdict.paired_bootstrap is stats.paired_bootstrap and verdict.LEVEL == stats.LEVEL
