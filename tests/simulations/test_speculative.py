"""simulations/speculative.py: the closed forms (expected tokens, speedup, walltime and operation factors, optimal γ,
the β bound, the acceptance rate) and the documents' worked numbers.

Monte Carlo tolerances are N_SIGMA standard errors (tests/stats.py), with fixed seeds.
"""
from __future__ import annotations

import numpy as np
import pytest

import simulations as sim
from tests.stats import N_SIGMA

# --------------------------------------------------------------------------- closed forms


def test_expected_tokens_edges_and_geometric_sum():
    # τ = Σ_{i=0}^{γ} α^i: γ+1 at α = 1, 1 at α = 0 or γ = 0 (slides §3.1).
    assert sim.expected_tokens(1.0, 7) == 8.0
    assert sim.expected_tokens(0.0, 7) == 1.0
    assert sim.expected_tokens(0.6, 0) == 1.0
    alphas = np.linspace(0, 1, 11)[:, None]  # [A, 1]
    gammas = np.arange(0, 12)[None, :]  # [1, G]
    direct = np.array([[sum(a**i for i in range(g + 1)) for g in gammas[0]] for a in alphas[:, 0]])
    np.testing.assert_allclose(sim.expected_tokens(alphas, gammas), direct, rtol=1e-12)
    # Continuous at α → 1 (the expm1 form does not cancel catastrophically).
    assert sim.expected_tokens(1 - 1e-12, 10) == pytest.approx(11.0, rel=1e-9)


def test_speedup_walltime_and_operations_factors_agree():
    alpha = np.linspace(0, 1, 21)[:, None]
    gamma = np.arange(0, 9)[None, :]
    c = 0.05
    tau = sim.expected_tokens(alpha, gamma)
    # Slides §3.3: walltime factor is the reciprocal of the β = 1 speedup.
    np.testing.assert_allclose(sim.walltime_factor(alpha, gamma, c),
                               1 / sim.expected_speedup(alpha, gamma, c), rtol=1e-12)
    np.testing.assert_allclose(sim.expected_speedup(alpha, gamma, c, beta=2.0),
                               tau / (gamma * c + 2.0), rtol=1e-12)
    # Slides §3.4: α = 0, ĉ = 0 costs γ + 1 times the operations (the slides' own example).
    np.testing.assert_allclose(sim.operations_factor(0.0, gamma, 0.0), gamma + 1.0)
    np.testing.assert_allclose(sim.operations_factor(alpha, gamma, 0.1),
                               (gamma * 0.1 + gamma + 1) / tau, rtol=1e-12)


def test_survey_blog_beta_bound_example():
    # Survey blog, Batch Size: k = 5, c = 0.01, α = 2/3 gives β ≲ 2.69.
    bound = sim.max_beta(2 / 3, 5, 0.01)
    assert round(bound, 2) == 2.69
    # At the bound the speedup is exactly 1; below it, more.
    assert sim.expected_speedup(2 / 3, 5, 0.01, beta=bound) == pytest.approx(1.0, rel=1e-12)
    assert sim.expected_speedup(2 / 3, 5, 0.01, beta=bound - 0.1) > 1.0


def test_optimal_gamma_is_the_exhaustive_argmax_and_monotone():
    alphas = np.linspace(0.05, 0.95, 19)
    for c in (0.01, 0.05, 0.2):
        got = sim.optimal_gamma(alphas, c, gamma_max=200)
        for a, g in zip(alphas, got):
            speedups = [sim.expected_speedup(a, k, c) for k in range(1, 201)]
            assert g == 1 + int(np.argmax(speedups))
        assert np.all(np.diff(got) >= 0)  # better drafts → longer drafts (slides §3.5)
    # Cheaper drafts → longer drafts.
    by_c = sim.optimal_gamma(0.8, np.array([0.01, 0.02, 0.05, 0.1, 0.2, 0.5]))
    assert np.all(np.diff(by_c) <= 0)
    # At α = 1 the speedup grows without bound: the cap is returned.
    assert sim.optimal_gamma(1.0, 0.01, gamma_max=50) == 50


def test_implied_cost_ratio_inverts_the_speedup():
    c = sim.implied_cost_ratio(0.8, 5, sim.expected_speedup(0.8, 5, 0.07, beta=1.2), beta=1.2)
    assert c == pytest.approx(0.07)
    # Slides Table 2 is stored as printed: 12 rows, γ in {3, 5, 7}, α and speed in range.
    rows = np.array([r[3:] for r in sim.SLIDES_TABLE2], dtype=float)
    assert rows.shape == (12, 3) and set(rows[:, 0]) == {3, 5, 7}
    assert np.all((rows[:, 1] > 0.5) & (rows[:, 1] < 0.85) & (rows[:, 2] > 1))


def test_optimal_gamma_with_beta_shifts_to_longer_drafts():
    # A costlier verification is amortised over more tokens: γ* grows with β.
    got = sim.optimal_gamma(0.8, 0.05, beta=np.array([1.0, 2.0, 3.0]))
    assert np.all(np.diff(got) > 0) and got[0] == sim.optimal_gamma(0.8, 0.05)


def test_expected_tokens_by_position_reduces_to_iid():
    np.testing.assert_allclose(sim.expected_tokens_by_position(np.full(6, 0.7), np.arange(7)),
                               sim.expected_tokens(0.7, np.arange(7)), rtol=1e-12)
    assert sim.expected_tokens_by_position([0.9, 0.5, 0.1], 3) == pytest.approx(
        1 + 0.9 + 0.45 + 0.045)


def test_acceptance_rate_is_one_minus_tvd_and_matches_the_accept_rule():
    rng = np.random.default_rng(13)
    p = rng.dirichlet(np.ones(5))  # [V]
    q = rng.dirichlet(np.ones(5))
    alpha = sim.acceptance_rate(p, q)
    assert alpha == pytest.approx(1 - 0.5 * np.abs(p - q).sum())
    # Slides Algorithm 1: draw x ~ q, accept when u < p(x)/q(x).
    n = 200_000
    x = rng.choice(5, size=n, p=q)
    accepted = rng.random(n) < p[x] / q[x]
    assert sim.estimate_mean(accepted).agrees_with(alpha, N_SIGMA)
