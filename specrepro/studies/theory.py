"""The table-building and Monte Carlo drivers of ``notebooks/theory_speculative.ipynb``: the slides' (seed 003) and
the survey blog's (seed 004) closed forms beside Monte Carlo, from ``simulations`` (numpy only, as here).

Each driver takes the notebook's one generator and draws from it in the order the notebook did, so a table made
with the same seed is the same table. Notation: α = acceptance rate, γ = draft length, c = cost ratio,
β = verification cost factor, τ = tokens per step.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import simulations as sim


def expected_tokens_check(gammas: Sequence[int], alphas: Sequence[float], n_steps: int,
                          rng: np.random.Generator) -> list[dict]:
    """Slides Fig. 2: per (γ, α), τ(α, γ) in closed form beside the Monte Carlo mean of ``n_steps`` simulated steps,
    its standard error and z-score."""
    rows = []
    for gamma in gammas:
        estimates = [sim.estimate_mean(sim.simulate_tokens_per_step(a, gamma, n_steps, rng)) for a in alphas]
        for a, e in zip(alphas, estimates):
            tau = float(sim.expected_tokens(a, gamma))
            rows.append({"gamma": gamma, "alpha": float(a), "tau_closed_form": tau, "tau_monte_carlo": e.mean,
                         "standard_error": e.sem, "z_score": (e.mean - tau) / e.sem, "n_steps": e.n})
    return rows


def optimal_gamma_check(costs: Sequence[float], alphas: Sequence[float], n_trace: int,
                        rng: np.random.Generator) -> list[dict]:
    """Slides Fig. 3: per (c, α), the optimal γ in closed form and its speedup beside the argmax over γ ≤ 60 of
    one replayed i.i.d. trace of ``n_trace`` outcomes per α (shared across c) and the speedup at that γ."""
    traces = {a: rng.random(n_trace) < a for a in alphas}
    rows = []
    for c in costs:
        for a in alphas:
            g, g_mc = int(sim.optimal_gamma(a, c)), sim.empirical_optimal_gamma(traces[a], c, gamma_max=60)
            rows.append({"c": c, "alpha": a, "optimal_gamma": g, "speedup_at_optimum": float(sim.expected_speedup(a, g, c)),
                         "monte_carlo_optimal_gamma": g_mc,
                         "speedup_at_monte_carlo_gamma": float(sim.expected_speedup(a, g_mc, c))})
    return rows


def walltime_check(costs: Sequence[float], gammas: Sequence[int], alphas: Sequence[float], n_steps: int,
                   rng: np.random.Generator) -> list[dict]:
    """Slides §3.3: per (c, γ, α), the walltime factor in closed form beside 1 / the Monte Carlo speedup."""
    rows = []
    for c in costs:
        for gamma in gammas:
            mc = [1 / sim.estimate_speedup(sim.simulate_tokens_per_step(a, gamma, n_steps, rng), gamma, c).mean
                  for a in alphas]
            rows += [{"c": c, "gamma": gamma, "alpha": float(a), "walltime_factor": float(sim.walltime_factor(a, gamma, c)),
                      "monte_carlo": m} for a, m in zip(alphas, mc)]
    return rows


def operations_table(gammas: Sequence[int], alphas: Sequence[float] = (0.0, 0.5, 0.7, 0.9)) -> list[dict]:
    """Slides §3.4: the operations factor at ĉ = 0 and 0.05, with the slides' example γ + 1 at α = 0, ĉ = 0."""
    return [{"gamma": gamma, "alpha": a, "operations_c_hat_0": float(sim.operations_factor(a, gamma, 0.0)),
             "operations_c_hat_0.05": float(sim.operations_factor(a, gamma, 0.05)),
             "slides_example_alpha0_c_hat0": (gamma + 1) if a == 0.0 else ""} for gamma in gammas for a in alphas]


def implied_cost_table() -> list[dict]:
    """Slides Table 2 as printed, τ(α, γ), the cost ratio c that the β = 1 closed form needs to match each speed, and
    the optimal γ at that c (n/a where c < 0)."""
    rows = []
    for printed in sim.SLIDES_TABLE2:
        r = dict(zip(sim.SLIDES_TABLE2_COLUMNS, printed))
        c = float(sim.implied_cost_ratio(r["alpha"], r["gamma"], r["speedup"]))
        rows.append({**r, "tau_closed_form": float(sim.expected_tokens(r["alpha"], r["gamma"])), "implied_c": c,
                     "optimal_gamma_at_implied_c": int(sim.optimal_gamma(r["alpha"], c)) if c >= 0 else "n/a"})
    return rows


def speedup_surface_table(panels: Sequence[tuple[float, float]],
                          alphas: Sequence[float] = (0.5, 0.7, 0.8, 0.9)) -> list[dict]:
    """Survey blog, E(speedup) with c and β: per (c, β) panel and α, the optimal γ, its speedup and γ = 4's."""
    rows = []
    for c, beta in panels:
        for a in alphas:
            g = int(sim.optimal_gamma(a, c, beta=beta))
            rows.append({"c": c, "beta": beta, "alpha": a, "optimal_gamma": g,
                         "speedup_at_optimum": float(sim.expected_speedup(a, g, c, beta)),
                         "speedup_gamma_4": float(sim.expected_speedup(a, 4, c, beta))})
    return rows


def replayed_traces(gammas: Sequence[int], n_trace: int, rng: np.random.Generator) -> tuple[list[dict], dict[str, float]]:
    """(rows, {trace: per-token mean α}): an i.i.d. trace at α = 0.65 and a bursty one (two regimes, 0.95 and 0.35,
    switching with probability 0.02) replayed at each γ, τ with its standard error beside the closed form at the
    trace's per-token mean, and α measured from the γ = 4 accept lengths (§3.1's check of the i.i.d. model)."""
    traces = {"i.i.d.": rng.random(n_trace) < 0.65,
              "bursty": sim.simulate_bursty_outcomes([0.95, 0.35], 0.02, n_trace, rng)}
    rows = []
    for name, trace in traces.items():
        estimates = [sim.estimate_mean(sim.replay_outcomes(trace, g)) for g in gammas]
        alpha_run = sim.alpha_from_accept_lengths(sim.replay_outcomes(trace, 4) - 1, 4)
        rows += [{"trace": name, "gamma": int(g), "tau_replayed": e.mean, "standard_error": e.sem,
                  "tau_closed_form_at_token_mean": float(sim.expected_tokens(trace.mean(), g)),
                  "alpha_from_gamma4_accept_lengths": alpha_run} for g, e in zip(gammas, estimates)]
    return rows, {name: float(trace.mean()) for name, trace in traces.items()}


def column(rows: Sequence[dict], key: str, **match) -> list:
    """``key`` of the rows whose fields equal ``match``, in order: one curve of a table for a chart."""
    return [r[key] for r in rows if all(r[k] == v for k, v in match.items())]


# ------------------------------------------------------------------ theory_moe: the survey blog's Mixture of Experts


def routers(experts: int, skews: Sequence[float]) -> dict[str, np.ndarray | None]:
    """name -> expert popularity: the uniform router (None) and a Zipf router ∝ 1/rank^s per skew s."""
    return {"uniform": None, **{f"Zipf s = {s}": sim.zipf_popularity(experts, s) for s in skews}}


def expected_experts_check(experts: int, k: int, tokens: Sequence[int], routers: dict, n_trials: int,
                           rng: np.random.Generator) -> list[dict]:
    """Per router and T tokens routed together: distinct experts loaded in closed form beside a Monte Carlo router
    of ``n_trials`` trials, with the blog's numbers (uniform router: 2 at T = 1, 6.101 at T = 5)."""
    rows = []
    for name, popularity in routers.items():
        closed = (sim.expected_experts(experts, k, tokens) if popularity is None
                  else sim.expected_experts_weighted(popularity, k, tokens))
        estimates = [sim.estimate_mean(sim.simulate_experts(experts, k, t, n_trials, popularity=popularity, rng=rng))
                     for t in tokens]
        for t, x, e in zip(tokens, closed, estimates):
            rows.append({"router": name, "T": int(t), "experts_closed_form": float(x),
                         "experts_monte_carlo": e.mean, "standard_error": e.sem,
                         "z_score": (e.mean - x) / e.sem if e.sem > 0 else 0.0,
                         "blog": {1: "2", 5: "6.101"}.get(int(t), "") if popularity is None else ""})
    return rows


def moe_beta_table(experts: int, k: int, tokens: Sequence[int], routers: dict) -> list[dict]:
    """Per router and T: β = experts(T) / experts(1) of verifying T tokens together, with the blog's 3.05 at T = 5."""
    rows = []
    for name, popularity in routers.items():
        beta = (sim.moe_beta(experts, k, tokens) if popularity is None
                else sim.expected_experts_weighted(popularity, k, tokens) / k)
        rows += [{"router": name, "T": int(t), "beta": float(b), "blog": "3.05" if (popularity is None and t == 5) else ""}
                 for t, b in zip(tokens, beta)]
    return rows


def moe_speedup_table(experts: int, k: int, gammas: np.ndarray, alphas: Sequence[float], c: float) -> list[dict]:
    """Per α and γ: expected speedup with the MoE β(γ+1) of a uniform router against β = 1."""
    beta = sim.moe_beta(experts, k, gammas + 1)
    rows = []
    for a in alphas:
        with_moe, dense = sim.expected_speedup(a, gammas, c, beta), sim.expected_speedup(a, gammas, c)
        rows += [{"alpha": a, "gamma": int(g), "moe_beta": float(b), "speedup_moe": float(s), "speedup_beta_1": float(d)}
                 for g, b, s, d in zip(gammas, beta, with_moe, dense)]
    return rows


# ------------------------------------------------------------------ theory_energy: the MJSD paper's energy tables


def energy_table1(table, fit) -> list[dict]:
    """MJSD Table 1 as printed (batch size, energy and time, per run and per input) beside the Eq. 2 fit ``fit``
    (``simulations.fit_mjsd_table1``) and its memory share of the energy."""
    rows = []
    for i, batch in enumerate(table.batch_size):
        rows.append({"batch_size": batch, "energy_J (paper)": table.energy_J[i],
                     "energy_per_run_J (paper)": table.energy_per_run_J[i],
                     "energy_per_run_J (fit)": float(fit.energy_per_run(batch)),
                     "energy_per_input_J (paper)": table.energy_per_input_J[i],
                     "energy_per_input_J (fit)": float(fit.energy_per_run(batch)) / batch,
                     "time_s (paper)": table.time_s[i], "time_per_run_s (paper)": table.time_per_run_s[i],
                     "time_per_run_s (fit)": float(fit.time_per_run(batch)),
                     "time_per_input_s (paper)": table.time_per_input_s[i],
                     "memory_energy_share (fit)": float(fit.memory_share(batch))})
    return rows


def fitted_powers(fit) -> dict:
    """MJSD Eq. 2 fitted to Table 1: the times and powers of E = P_flop·T_flop + P_mem·T_mem, their ratios, the
    memory share at b = 1 and 16, and the fit's quality."""
    return {"T_mem_s_per_run": fit.t_mem, "t_flop_s_per_run_per_input": fit.t_flop_per_input,
            "P_mem_W": fit.powers.p_mem, "P_flop_W": fit.powers.p_flop,
            "P_flop_over_P_mem": fit.powers.p_flop / fit.powers.p_mem,
            "T_flop_over_T_mem_at_b1": fit.t_flop_per_input / fit.t_mem,
            "memory_share_b1": float(fit.memory_share(1)), "memory_share_b16": float(fit.memory_share(16)),
            "r_squared_energy": fit.powers.r_squared, "max_abs_residual_J": max(abs(r) for r in fit.powers.residuals)}


def energy_vs_speedup_table2() -> list[dict]:
    """MJSD Table 2: per row and method (speculative, MJSD), the energy saving (greedy J/token over the method's)
    beside the printed speedup, and their ratio."""
    rows = []
    for printed in sim.MJSD_TABLE2:
        r = dict(zip(sim.MJSD_TABLE2_COLUMNS, printed))
        for method in ("speculative", "mjsd"):
            saving = r["energy_greedy_J"] / r[f"energy_{method}_J"]
            rows.append({"dataset": r["dataset"], "model": r["model"], "method": method,
                         "speedup (paper)": r[f"speedup_{method}"], "energy_saving (paper)": saving,
                         "saving_over_speedup (paper)": saving / r[f"speedup_{method}"]})
    return rows


def predicted_saving_ratio(fit, costs: Sequence[float], gamma: int = 4) -> list[dict]:
    """Energy saving / speedup that the Table 1 fit predicts at γ for each cost ratio c (energy cost c_E = c), with
    the fit's time and energy β of verifying γ + 1 tokens."""
    return [{"gamma": gamma, "c": c, "c_energy": c, "beta_time": float(fit.time_beta(gamma + 1)),
             "beta_energy": float(fit.energy_beta(gamma + 1)),
             "saving_over_speedup (Table 1 fit)": float(sim.energy_saving_over_speedup(gamma, c, c, fit))}
            for c in costs]
