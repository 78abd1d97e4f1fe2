"""The within-noise decision rule (specrepro.metrics.noise): hand-computed cases, and its power both ways."""
import numpy as np
import pytest

from specrepro.metrics.noise import (NoiseVerdict, largest_within_noise, mean_nll, noise_band, paired_bootstrap_ci,
                                     quality_drop, run_matrix, within_noise)


def simulated(rng, prompts=12, lossless_runs=6, variant_runs=3, shift=0.0, sd=0.4):
    """Per-prompt mean NLLs: a prompt effect shared by every run, independent noise per (run, prompt), and the
    variant's runs shifted by ``shift`` nats (0: drawn from the lossless runs' distribution)."""
    difficulty = rng.normal(2.5, 0.5, size=prompts)  # [P]
    lossless = difficulty + rng.normal(0, sd, size=(lossless_runs, prompts))  # [R, P]
    variant = difficulty + shift + rng.normal(0, sd, size=(variant_runs, prompts))  # [k, P]
    return lossless, variant


def test_band_and_drop_by_hand():
    lossless = np.array([[1.0, 2.0, 3.0],
                         [1.2, 2.2, 3.2],  # +0.2 on every prompt
                         [0.9, 2.0, 3.0]])  # -0.1 on the first prompt only
    # pairs: (0, 1) -0.2, (0, 2) +0.1/3, (1, 2) +0.2 + 0.1/3
    assert noise_band(lossless) == pytest.approx(0.2 + 0.1 / 3)
    variant = np.array([[1.5, 2.5, 3.5]])
    assert quality_drop(lossless, variant) == pytest.approx(2.5 - (6.0 + 6.6 + 5.9) / 9)
    assert quality_drop(lossless, variant, higher_is_better=True) == pytest.approx(-(2.5 - (6.0 + 6.6 + 5.9) / 9))
    v = within_noise(lossless, variant)
    assert isinstance(v, NoiseVerdict) and not v.within and (v.lossless_runs, v.variant_runs, v.prompts) == (3, 1, 3)
    assert within_noise(lossless, lossless[1]).within  # a lossless run itself is within its own band
    assert within_noise(lossless, variant, higher_is_better=True).within  # better than lossless: no drop


def test_pairing_cancels_prompt_difficulty():
    """Prompts of very different difficulty, runs that differ only by a tiny constant: the paired band is tiny,
    so a variant 0.05 nats worse on every prompt is caught although it is far inside the prompts' spread."""
    difficulty = np.array([1.0, 4.0, 2.0, 6.0])
    lossless = np.stack([difficulty, difficulty + 0.01, difficulty - 0.01])
    assert noise_band(lossless) == pytest.approx(0.02)
    assert not within_noise(lossless, difficulty + 0.05).within
    assert within_noise(lossless, difficulty + 0.015).within


def test_power_both_ways():
    """Same distribution: accepted in most seeds; shifted by 0.6 nats (about 4 standard errors of a run's mean):
    rejected in most. The rule is not a coin: a small shift is rejected more often than none."""
    rng = np.random.default_rng(0)
    trials = 300
    accepted_null = np.mean([within_noise(*simulated(rng)).within for _ in range(trials)])
    accepted_small = np.mean([within_noise(*simulated(rng, shift=0.2)).within for _ in range(trials)])
    accepted_far = np.mean([within_noise(*simulated(rng, shift=0.6)).within for _ in range(trials)])
    assert accepted_null >= 0.95, accepted_null
    assert accepted_far <= 0.05, accepted_far
    assert accepted_far < accepted_small < accepted_null
    # a higher-is-better metric (ROUGE-L): the same data negated, so the far variant scores lower and is a drop;
    # one that scores higher is never a drop
    rouge_far = np.mean([within_noise(*(-x for x in simulated(rng, shift=0.6)), higher_is_better=True).within
                         for _ in range(trials)])
    rouge_better = np.mean([within_noise(*(-x for x in simulated(rng, shift=-0.6)), higher_is_better=True).within
                            for _ in range(trials)])
    assert rouge_far <= 0.05 and rouge_better == 1.0, (rouge_far, rouge_better)


def test_bootstrap_interval_covers_the_shift():
    rng = np.random.default_rng(1)
    covered = 0
    for _ in range(100):
        lossless, variant = simulated(rng, prompts=20, shift=0.3)
        low, high = paired_bootstrap_ci(lossless, variant, resamples=400, seed=int(rng.integers(1 << 30)))
        assert low <= quality_drop(lossless, variant) <= high
        covered += low <= 0.3 <= high
    assert covered >= 80  # percentile bootstrap on 20 prompts under-covers a little, but not much


def test_largest_within_noise_stops_at_the_first_failure():
    assert largest_within_noise({0.01: True, 0.03: True, 0.1: False, 0.3: True}) == 0.03
    assert largest_within_noise({0.3: True, 0.01: True, 0.1: True}) == 0.3  # order of the mapping does not matter
    assert largest_within_noise({0.01: False, 0.1: True}) is None
    assert largest_within_noise({}) is None
    v = NoiseVerdict(drop=0.1, band=0.2, within=True, lossless_runs=2, variant_runs=1, prompts=3)
    assert largest_within_noise({1.0: v}) == 1.0
    with pytest.raises(ValueError, match="finite"):
        largest_within_noise({float("nan"): True})


def test_run_matrix_pairs_by_prompt_and_drops_empty_generations():
    records = [{"method": m, "repeat": r, "prompt_id": p, "nll_sum": s, "nll_tokens": n}
               for m, r, p, s, n in [("ar", 0, "b", 4.0, 2), ("ar", 0, "a", 3.0, 3), ("ar", 1, "a", 6.0, 3),
                                     ("ar", 1, "b", 2.0, 1), ("spec", 0, "a", 1.0, 1), ("spec", 0, "b", 0.0, 0),
                                     ("other", 0, "a", 9.0, 1)]]
    runs, prompts, x = run_matrix(records, ["spec", "ar"], mean_nll)
    assert runs == [("spec", 0), ("ar", 0), ("ar", 1)]
    assert prompts == ["a"]  # "b" has no NLL in spec's run (empty generation)
    np.testing.assert_allclose(x, [[1.0], [1.0], [2.0]])
    with pytest.raises(ValueError, match="no records"):
        run_matrix(records, ["ar", "missing"], mean_nll)


def test_bad_input_gets_one_clear_error():
    with pytest.raises(ValueError, match="at least 2 runs"):
        noise_band(np.ones((1, 4)))
    with pytest.raises(ValueError, match="pair them by prompt"):
        quality_drop(np.ones((2, 4)), np.ones((1, 3)))
    with pytest.raises(ValueError, match="not finite"):
        within_noise(np.ones((2, 3)), np.array([1.0, np.nan, 1.0]))
    with pytest.raises(ValueError, match="at least one prompt"):
        noise_band(np.ones((2, 0)))
    with pytest.raises(ValueError, match="level"):
        paired_bootstrap_ci(np.ones((2, 3)), np.ones(3), level=1.0)
