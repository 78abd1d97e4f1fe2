"""simulations/moe.py: expected experts loaded and β for MoE verification (survey blog 004), against Monte Carlo.

Monte Carlo tolerances are N_SIGMA standard errors (tests/stats.py), with fixed seeds.
"""
from __future__ import annotations

import numpy as np
import pytest

import simulations as sim
from tests.stats import N_SIGMA

# --------------------------------------------------------------------------- MoE


def test_mixtral_example_from_the_survey_blog():
    # 8 experts, top-2, 5 tokens: 6.10 experts (from (6/8)^5, not the printed (2/8)^5), β ≈ 3.05.
    assert round(sim.expected_experts(8, 2, 5), 2) == 6.10
    assert sim.expected_experts(8, 2, 5) == pytest.approx(8 * (1 - (6 / 8) ** 5))
    assert sim.expected_experts(8, 2, 1) == pytest.approx(2.0)
    assert round(sim.moe_beta(8, 2, 5), 2) == 3.05
    assert sim.expected_experts(8, 2, 0) == 0.0


@pytest.mark.parametrize("E,k,T", [(8, 2, 5), (8, 2, 1), (16, 4, 3), (64, 8, 8)])
def test_expected_experts_against_uniform_router(E, k, T):
    counts = sim.simulate_experts(E, k, T, 20_000, rng=np.random.default_rng(21))
    if T == 1:
        assert np.all(counts == k)  # one token loads exactly k distinct experts
    est = sim.estimate_mean(counts)
    assert est.agrees_with(sim.expected_experts(E, k, T), N_SIGMA), est


def test_skewed_router_against_exact_inclusion_probabilities():
    popularity = sim.zipf_popularity(8, s=1.2)
    pi = sim.inclusion_probabilities(popularity, 2)
    assert pi.sum() == pytest.approx(2.0)
    np.testing.assert_allclose(sim.inclusion_probabilities(np.ones(8), 2), np.full(8, 2 / 8))
    for T in (1, 3, 5):
        counts = sim.simulate_experts(8, 2, T, 30_000, popularity=popularity,
                                      rng=np.random.default_rng(22 + T))
        est = sim.estimate_mean(counts)
        assert est.agrees_with(sim.expected_experts_weighted(popularity, 2, T), N_SIGMA), (T, est)
    # Skew concentrates the load: fewer distinct experts than the uniform router.
    assert sim.expected_experts_weighted(popularity, 2, 5) < sim.expected_experts(8, 2, 5)


def test_zero_popularity_experts_are_never_loaded():
    popularity = np.array([1, 1, 1, 0, 0, 0, 0, 0.0])
    counts = sim.simulate_experts(8, 2, 6, 2_000, popularity=popularity, rng=1)
    assert counts.max() <= 3
    assert sim.expected_experts_weighted(popularity, 2, 6) <= 3.0
