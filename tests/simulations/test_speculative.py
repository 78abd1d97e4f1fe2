"""The analytic simulators: closed forms against Monte Carlo, the documents' worked numbers,
argument validation, and that importing the package stays free of torch.

Monte Carlo tolerances are N_SIGMA standard errors computed from each sample's own variance,
with fixed seeds, so a failure means a wrong formula rather than bad luck (a 5σ miss has
probability below 1e-6 per comparison).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import simulations as sim
from simulations import montecarlo

N_SIGMA = 5.0
ROOT = Path(__file__).resolve().parents[2]


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


# --------------------------------------------------------------------------- energy


def test_mjsd_table1_is_self_consistent():
    t = sim.MJSD_TABLE1
    b = t.column("batch_size")
    # About 3,000 runs in every row (the paper fixes the number of runs).
    np.testing.assert_allclose(t.n_runs, 3_000, rtol=0.01)
    np.testing.assert_allclose(t.column("time_s") / t.column("time_per_run_s"), 3_000, rtol=0.01)
    # Per input = per run / batch size, up to the table's rounding.
    np.testing.assert_allclose(t.column("energy_per_input_J"), t.column("energy_per_run_J") / b,
                               rtol=0.01)
    np.testing.assert_allclose(t.column("time_per_input_s"), t.column("time_per_run_s") / b,
                               rtol=0.02)


def test_energy_fit_recovers_known_powers():
    rng = np.random.default_rng(31)
    t_flop, t_mem = rng.uniform(0, 1, 20), rng.uniform(0, 1, 20)
    energy = sim.energy_model(120.0, 300.0, t_flop, t_mem)
    fit = sim.fit_energy_model(t_flop, t_mem, energy)
    assert fit.p_flop == pytest.approx(120.0) and fit.p_mem == pytest.approx(300.0)
    assert fit.r_squared == pytest.approx(1.0)


def test_mjsd_table1_worked_fit():
    fit = sim.fit_mjsd_table1()
    t = sim.MJSD_TABLE1
    b = t.column("batch_size")
    # Memory time dominates a run (T_mem ≫ T_flop, MJSD §4) ...
    assert fit.t_mem > 10 * 16 * fit.t_flop_per_input
    # ... the line through Energy/run fits to within 1.1 J (the table prints 3 digits) ...
    assert np.max(np.abs(fit.energy_per_run(b) - t.column("energy_per_run_J"))) < 1.1
    assert fit.powers.r_squared > 0.95
    # ... and memory energy is most of a run's energy at small batch, less so at b = 16.
    share = fit.memory_share(b)
    assert share[0] > 0.9 and np.all(np.diff(share) < 0)
    assert fit.energy_beta(1.0) == pytest.approx(1.0)


def test_energy_saving_over_speedup_is_the_ratio_of_costs():
    fit = sim.fit_mjsd_table1()
    # With a free draft, the ratio is β_T / β_E at batch γ + 1; both exceed 1 and β_E > β_T
    # because energy per run grows faster with batch size than time per run does in Table 1.
    ratio = sim.energy_saving_over_speedup(4, 0.0, 0.0, fit)
    assert ratio == pytest.approx(fit.time_beta(5.0) / fit.energy_beta(5.0))
    assert fit.energy_beta(5.0) > fit.time_beta(5.0) > 1.0
    # MJSD Table 2 as stored: energy falls and speed rises for every row.
    for row in sim.MJSD_TABLE2:
        row = dict(zip(sim.MJSD_TABLE2_COLUMNS, row))
        assert row["energy_mjsd_J"] < row["energy_speculative_J"] < row["energy_greedy_J"]
        assert row["speedup_mjsd"] > row["speedup_speculative"] > 1.0


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize("call,match", [
    (lambda: sim.expected_tokens(1.5, 3), r"alpha must lie in \[0, 1\], got 1.5"),
    (lambda: sim.expected_tokens(-0.1, 3), r"alpha .* got -0.1"),
    (lambda: sim.expected_tokens([0.5, np.nan], 3), r"alpha must be finite, got nan"),
    (lambda: sim.expected_tokens(0.5, -1), r"gamma must be >= 0, got -1"),
    (lambda: sim.expected_tokens(0.5, 2.5), r"gamma must be a whole number, got 2.5"),
    (lambda: sim.expected_tokens("high", 3), r"alpha must be a number"),
    (lambda: sim.expected_speedup(0.5, 3, -0.1), r"c must be >= 0, got -0.1"),
    (lambda: sim.expected_speedup(0.5, 3, 0.1, beta=0), r"beta must be > 0, got 0"),
    (lambda: sim.expected_speedup(0.5, 3, np.inf), r"c must be finite, got inf"),
    (lambda: sim.operations_factor(0.5, 3, -1), r"c_hat must be >= 0"),
    (lambda: sim.optimal_gamma(0.5, 0.1, gamma_max=0), r"gamma_max must be >= 1, got 0"),
    (lambda: sim.max_beta(2.0, 5, 0.01), r"alpha must lie in \[0, 1\], got 2.0"),
    (lambda: sim.expected_experts(8, 9, 5), r"k must be <= E"),
    (lambda: sim.expected_experts(8, 2, -1), r"T must be >= 0, got -1"),
    (lambda: sim.moe_beta(8, 2, 0), r"T must be >= 1, got 0"),
    (lambda: sim.simulate_experts(8, 2, 5, 10, popularity=np.ones(7)), r"popularity must have E = 8"),
    (lambda: sim.simulate_experts(8, 2, 5, 10, rng=None), r"rng must be a numpy.random.Generator"),
    (lambda: sim.simulate_tokens_per_step(0.5, 3, 0, rng=0), r"n_steps must be >= 1, got 0"),
    (lambda: sim.simulate_tokens_per_step([0.5, 0.5], 3, 10, rng=0), r"alpha must be a scalar or"),
    (lambda: sim.replay_outcomes([1, 0, 2], 3), r"outcomes must contain only 0 and 1"),
    (lambda: sim.alpha_by_position([0, 4], 3), r"accept_lengths must be <= gamma = 3, got 4"),
    (lambda: sim.fit_energy_model([1, 2], [1], [1, 2]), r"one length"),
    (lambda: sim.acceptance_rate([0.5, 0.6], [0.5, 0.5]), r"p must sum to 1"),
])
def test_invalid_arguments_raise_clear_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --------------------------------------------------------------------------- imports


def test_importing_simulations_does_not_import_torch_or_matplotlib():
    code = ("import sys, simulations; "
            "heavy = [m for m in ('torch', 'matplotlib', 'transformers') if m in sys.modules]; "
            "assert not heavy, heavy")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_public_names_are_exported():
    for name in ("expected_tokens", "optimal_gamma", "walltime_factor", "operations_factor",
                 "expected_speedup", "max_beta", "expected_experts", "moe_beta",
                 "simulate_experts", "simulate_tokens_per_step", "fit_energy_model",
                 "MJSD_TABLE1", "fit_mjsd_table1"):
        assert name in sim.__all__ and hasattr(sim, name)
    assert montecarlo.replay_outcomes is sim.replay_outcomes
