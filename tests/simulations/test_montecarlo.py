"""simulations/montecarlo.py: the accept/reject process, its estimators and trace replay against the closed forms.

Monte Carlo tolerances are N_SIGMA standard errors (tests/stats.py) computed from each sample's own variance, with
fixed seeds, so a failure means a wrong formula rather than bad luck.
"""
from __future__ import annotations

import numpy as np
import pytest

import simulations as sim
from tests.stats import N_SIGMA

# --------------------------------------------------------------------------- Monte Carlo


@pytest.mark.parametrize("alpha,gamma", [(0.3, 1), (0.6, 4), (0.8, 7), (0.95, 10)])
def test_expected_tokens_against_monte_carlo(alpha, gamma):
    tokens = sim.simulate_tokens_per_step(alpha, gamma, 40_000, rng=np.random.default_rng(11))
    assert tokens.min() >= 1 and tokens.max() <= gamma + 1
    est = sim.estimate_mean(tokens)
    assert est.agrees_with(sim.expected_tokens(alpha, gamma), N_SIGMA), est


def test_monte_carlo_degenerate_alphas_are_exact():
    assert np.all(sim.simulate_tokens_per_step(1.0, 5, 100, rng=0) == 6)
    assert np.all(sim.simulate_tokens_per_step(0.0, 5, 100, rng=0) == 1)


def test_positional_alphas_against_monte_carlo_and_estimator():
    alphas = np.array([0.9, 0.8, 0.6, 0.5, 0.3])
    tokens = sim.simulate_tokens_per_step(alphas, 5, 60_000, rng=np.random.default_rng(3))
    est = sim.estimate_mean(tokens)
    assert est.agrees_with(sim.expected_tokens_by_position(alphas, 5), N_SIGMA), est
    # α_i = #{n ≥ i} / #{n ≥ i−1} recovers the per-position rates (binomial standard errors).
    accepted = tokens - 1
    got = sim.alpha_by_position(accepted, 5)
    reached = np.array([np.count_nonzero(accepted >= i) for i in range(5)])
    sem = np.sqrt(alphas * (1 - alphas) / reached)
    assert np.all(np.abs(got - alphas) <= N_SIGMA * sem), (got, alphas)


def test_alpha_from_accept_lengths_recovers_iid_alpha():
    alpha, gamma = 0.72, 4
    accepted = sim.simulate_tokens_per_step(alpha, gamma, 50_000, rng=np.random.default_rng(5)) - 1
    got = sim.alpha_from_accept_lengths(accepted, gamma)
    trials = accepted.sum() + np.count_nonzero(accepted < gamma)
    assert abs(got - alpha) <= N_SIGMA * np.sqrt(alpha * (1 - alpha) / trials)


def test_replay_cuts_a_trace_into_steps():
    trace = [1, 1, 0, 1, 1, 1, 1, 0, 0, 1, 1, 1]
    # γ = 2: [1 1]+bonus, [0], [1 1]+bonus, [1 1]+bonus, [0], [0], [1 1]+bonus, tail [1] dropped.
    np.testing.assert_array_equal(sim.replay_outcomes(trace, 2), [3, 1, 3, 3, 1, 1, 3])
    np.testing.assert_array_equal(sim.replay_outcomes(trace, 1), [2, 2, 1] + [2] * 4 + [1, 1] + [2] * 3)
    np.testing.assert_array_equal(sim.replay_outcomes([1, 1, 1], 5), np.zeros(0))


def test_replayed_trace_checks_tokens_speedup_and_optimal_gamma():
    # One i.i.d. trace, replayed at every γ, checks τ(γ), the speedup and the optimal γ.
    alpha, c, gamma_max = 0.8, 0.05, 16
    trace = np.random.default_rng(7).random(400_000) < alpha
    gammas = np.arange(1, gamma_max + 1)
    for g in (1, 4, 9, 16):
        est = sim.estimate_mean(sim.replay_outcomes(trace, g))
        assert est.agrees_with(sim.expected_tokens(alpha, g), N_SIGMA), (g, est)
    mean, sem = sim.speedup_by_gamma(trace, gammas, c, beta=1.3)
    assert np.all(np.abs(mean - sim.expected_speedup(alpha, gammas, c, beta=1.3)) <= N_SIGMA * sem)
    # The closed-form optimum's replayed speedup is within noise of the best replayed one.
    mean, sem = sim.speedup_by_gamma(trace, gammas, c)
    g_star = sim.optimal_gamma(alpha, c, gamma_max=gamma_max)
    best = int(np.argmax(mean))
    assert mean[g_star - 1] >= mean[best] - N_SIGMA * np.hypot(sem[g_star - 1], sem[best])
    assert abs(sim.empirical_optimal_gamma(trace, c, gamma_max) - g_star) <= 2


def test_replayed_probabilities_match_the_mean_alpha_when_shuffled():
    # Per-token acceptance probabilities min(1, p/q) in random order behave like i.i.d. α = mean.
    probs = np.random.default_rng(8).beta(4, 2, size=200_000)
    tokens = sim.replay_probabilities(probs, 5, rng=np.random.default_rng(9))
    est = sim.estimate_mean(tokens)
    assert est.agrees_with(sim.expected_tokens(probs.mean(), 5), N_SIGMA), est


def test_bursty_trace_keeps_its_mean_but_not_the_iid_tau():
    trace = sim.simulate_bursty_outcomes([0.95, 0.35], 0.02, 200_000, rng=np.random.default_rng(10))
    # Long-run acceptance is the mean of the two states (the chain spends half its time in each;
    # the standard error is inflated by the correlation, so the bound is loose on purpose).
    assert abs(trace.mean() - 0.65) < 0.03
    # Hard stretches cut many short steps and easy ones few long steps, so most steps fall in
    # hard stretches: tokens per step fall well below the i.i.d. τ at the per-token mean.
    est = sim.estimate_mean(sim.replay_outcomes(trace, 8))
    assert est.mean < sim.expected_tokens(trace.mean(), 8) - N_SIGMA * est.sem
    # With switch probability 1/2 the states are independent draws: back to the i.i.d. formula.
    trace = sim.simulate_bursty_outcomes([0.95, 0.35], 0.5, 200_000, rng=np.random.default_rng(10))
    est = sim.estimate_mean(sim.replay_outcomes(trace, 8))
    assert est.agrees_with(sim.expected_tokens(0.65, 8), N_SIGMA), est


def test_expected_speedup_against_simulated_speedup():
    for alpha, gamma, c, beta in [(0.5, 3, 0.1, 1.0), (0.85, 6, 0.02, 2.0)]:
        tokens = sim.simulate_tokens_per_step(alpha, gamma, 40_000, rng=np.random.default_rng(12))
        est = sim.estimate_speedup(tokens, gamma, c, beta)
        assert est.agrees_with(sim.expected_speedup(alpha, gamma, c, beta), N_SIGMA), est
