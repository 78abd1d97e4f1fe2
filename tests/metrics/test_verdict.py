"""One verdict per claim (specrepro.metrics.verdict): the three outcomes by hand, the verdicts' power on the paired
bootstrap's intervals, and bad input (the interval itself: tests/metrics/test_stats.py)."""
import numpy as np
import pytest

from specrepro.core.stats import paired_bootstrap
from specrepro.metrics.verdict import FAILS, HOLDS, UNDECIDED, all_of, at_least, at_most


def test_outcomes_by_hand():
    assert at_least("c", "s", "n", 1.5, (1.35, 1.6), 1.3).verdict == HOLDS
    assert at_least("c", "s", "n", 1.1, (1.0, 1.2), 1.3).verdict == FAILS
    assert at_least("c", "s", "n", 1.3, (1.2, 1.4), 1.3).verdict == UNDECIDED
    assert at_most("c", "s", "n", 0.0, (-0.02, 0.04), 0.05).verdict == HOLDS
    assert at_most("c", "s", "n", 0.2, (0.1, 0.3), 0.05).verdict == FAILS
    assert at_most("c", "s", "n", 0.05, (0.0, 0.1), 0.05).verdict == UNDECIDED
    holds, fails, open_ = (at_least(f"x{i}", "s", "n", 1, iv, 0.5) for i, iv in
                           enumerate([(0.6, 0.7), (0.1, 0.2), (0.4, 0.6)]))
    assert all_of("a", "s", [holds, holds]).verdict == HOLDS
    assert all_of("a", "s", [holds, open_]).verdict == UNDECIDED
    assert all_of("a", "s", [open_, fails]).verdict == FAILS


def test_power():
    """Over 200 simulated studies (12 prompts × 3 seeds, noise sd 1; the interval's coverage on the same studies:
    test_stats.py): an effect of 1.0 against a threshold of 0 is declared to hold in ≥ 90%, and a null effect (at
    the threshold) is declared to hold in ≤ 10%. ``paired_bootstrap`` as verdict.py re-exports it."""
    rng = np.random.default_rng(1)
    stat = lambda s: float(np.mean(s))  # noqa: E731
    held_effect = held_null = 0
    for _ in range(200):
        x = rng.normal(0.0, 1.0, size=(12, 3))  # [P, S]
        low, high = paired_bootstrap(x, stat, resamples=300, seed=int(rng.integers(1 << 30)))
        held_null += at_least("c", "s", "n", stat(x), (low, high), 0.0).verdict == HOLDS
        y = x + 1.0
        held_effect += at_least("c", "s", "n", stat(y), paired_bootstrap(y, stat, resamples=300), 0.0).verdict == HOLDS
    assert held_effect >= 180, held_effect
    assert held_null <= 20, held_null


def test_bad_input_gets_one_clear_error():
    with pytest.raises(ValueError, match="low <= high"):
        at_least("c", "s", "n", 1.0, (2.0, 1.0), 1.0)
    with pytest.raises(ValueError, match="one word"):
        at_most("two words", "s", "n", 1.0, (0.0, 1.0), 1.0)


def test_decide_on_few_prompts_is_undecided_whatever_the_interval():
    from specrepro.metrics.verdict import MIN_PROMPTS, decide
    x = np.full((MIN_PROMPTS - 1, 2), 3.0)  # [P, S]: 3 on every prompt and seed, a zero-width interval
    v = decide("c", "x >= 1.5", x, lambda s: float(s.mean()), 1.5)
    assert v.verdict == UNDECIDED and v.estimate == 3.0 and "fewer than" in v.rule and v.n.endswith("× 2 seeds")
    assert decide("c", "x >= 1.5", np.full((MIN_PROMPTS, 2), 3.0), lambda s: float(s.mean()), 1.5).verdict == HOLDS
    assert decide("c", "x <= 1.5", np.full((MIN_PROMPTS, 2), 3.0), lambda s: float(s.mean()), 1.5,
                  "at_most").verdict == FAILS
    with pytest.raises(ValueError, match="side"):
        decide("c", "s", np.ones(MIN_PROMPTS), np.mean, 1.0, "above")


def test_a_claim_timed_under_load_is_noisy_and_a_compound_one_is_decided_again_from_its_parts():
    from specrepro.metrics.verdict import NOISY, combine, under_load
    speed = at_least("speed", "s", "n", 1.5, (1.4, 1.6), 1.3, timed=True)
    quality_ok = at_most("nll", "s", "n", 0.0, (-0.02, 0.04), 0.05)
    quality_bad = at_most("nll", "s", "n", 0.2, (0.1, 0.3), 0.05)
    assert under_load(speed, 0.4) == speed  # below BUSY_CORES: as decided
    noisy = under_load(speed, 1.2)
    assert noisy.verdict == NOISY and "1.20 cores busy" in noisy.rule and noisy.estimate == speed.estimate
    assert under_load(quality_bad, 1.2) == quality_bad  # nothing timed: the load says nothing about it
    both = all_of("both", "s", [speed, quality_ok])
    assert both.timed and both.verdict == HOLDS and under_load(both, 1.2).verdict == NOISY
    failed = all_of("both", "s", [speed, quality_bad])
    assert failed.verdict == FAILS and under_load(failed, 1.2).verdict == FAILS  # fails on what was not timed
    assert combine([HOLDS, NOISY]) == NOISY and combine([NOISY, FAILS]) == FAILS and combine([UNDECIDED, NOISY]) == NOISY
    assert "parts" not in speed.row() and speed.row()["timed"] is True
