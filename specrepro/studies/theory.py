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
            rows.append({"c": c, "alpha": a, "optimal_gamma": g,
                         "speedup_at_optimum": float(sim.expected_speedup(a, g, c)),
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
            rows += [{"c": c, "gamma": gamma, "alpha": float(a),
                      "walltime_factor": float(sim.walltime_factor(a, gamma, c)), "monte_carlo": m}
                     for a, m in zip(alphas, mc)]
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


def replayed_traces(gammas: Sequence[int], n_trace: int,
                    rng: np.random.Generator) -> tuple[list[dict], dict[str, float]]:
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
        rows += [{"router": name, "T": int(t), "beta": float(b),
                  "blog": "3.05" if (popularity is None and t == 5) else ""} for t, b in zip(tokens, beta)]
    return rows


def moe_speedup_table(experts: int, k: int, gammas: np.ndarray, alphas: Sequence[float], c: float) -> list[dict]:
    """Per α and γ: expected speedup with the MoE β(γ+1) of a uniform router against β = 1."""
    beta = sim.moe_beta(experts, k, gammas + 1)
    rows = []
    for a in alphas:
        with_moe, dense = sim.expected_speedup(a, gammas, c, beta), sim.expected_speedup(a, gammas, c)
        rows += [{"alpha": a, "gamma": int(g), "moe_beta": float(b), "speedup_moe": float(s),
                  "speedup_beta_1": float(d)} for g, b, s, d in zip(gammas, beta, with_moe, dense)]
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


# MJSD §5 "Datasets and Models": the draft/target pairs behind each Table 2 row. The paper gives no time ratio c for
# them, so the parameter ratio stands in for it (a lower bound on the time ratio of a draft that runs on the same GPU).
MJSD_TABLE2_PAIRS = {"OPT": ("OPT-125m", "OPT-13B", 125e6 / 13e9),
                     "Llama-2": ("Llama-68M", "Llama-2-13B", 68e6 / 13e9)}


def energy_vs_speedup_table2() -> list[dict]:
    """MJSD Table 2: per row and method (speculative, MJSD), the energy saving (greedy J/token over the method's)
    beside the printed speedup, their ratio, and the draft/target parameter ratio that stands in for c
    (``MJSD_TABLE2_PAIRS``)."""
    rows = []
    for printed in sim.MJSD_TABLE2:
        r = dict(zip(sim.MJSD_TABLE2_COLUMNS, printed))
        draft, target, c_params = MJSD_TABLE2_PAIRS[r["model"]]
        for method in ("speculative", "mjsd"):
            saving = r["energy_greedy_J"] / r[f"energy_{method}_J"]
            rows.append({"dataset": r["dataset"], "model": r["model"], "method": method,
                         "speedup (paper)": r[f"speedup_{method}"], "energy_saving (paper)": saving,
                         "saving_over_speedup (paper)": saving / r[f"speedup_{method}"],
                         "pair (paper §5)": f"{draft} / {target}", "c_by_parameters": c_params})
    return rows


def predicted_saving_ratio(fit, costs: Sequence[float], gamma: int = 4) -> list[dict]:
    """Energy saving / speedup that the Table 1 fit predicts at γ for each cost ratio c (energy cost c_E = c), with
    the fit's time and energy β of verifying γ + 1 tokens."""
    return [{"gamma": gamma, "c": c, "c_energy": c, "beta_time": float(fit.time_beta(gamma + 1)),
             "beta_energy": float(fit.energy_beta(gamma + 1)),
             "saving_over_speedup (Table 1 fit)": float(sim.energy_saving_over_speedup(gamma, c, c, fit))}
            for c in costs]


# ------------------------------------------------------------------ theory_ppd: the PPD paper's tree theory


def illustrative_topk(anchors: dict[int, dict[int, float]]) -> tuple[np.ndarray, np.ndarray]:
    """(top-k accuracy [3, 10], rank probabilities [3, 10]) for the tree theory: the paper's printed top-1/top-5 at
    distances 1 and 2 interpolated over k, distance 3 extrapolated as anchor₂² / anchor₁ (illustrative, not data)."""
    anchor3 = {k: anchors[2][k] ** 2 / anchors[1][k] for k in (1, 5)}
    topk = np.stack([sim.ppd.topk_from_anchors(anchors[1][1], anchors[1][5]),
                     sim.ppd.topk_from_anchors(anchors[2][1], anchors[2][5]),
                     sim.ppd.topk_from_anchors(anchor3[1], anchor3[5])])  # [3, 10]
    return topk, sim.ppd.rank_probabilities(topk)


def topk_source_table(topk: np.ndarray, anchors: dict[int, dict[int, float]]) -> list[dict]:
    """Per distance and k, the accuracy fed to the theory and where it comes from (printed, interpolated or
    extrapolated)."""
    rows = []
    for d in range(topk.shape[0]):
        for k in range(topk.shape[1]):
            printed = anchors.get(d + 1, {}).get(k + 1)
            source = ("paper (Table 3)" if printed is not None
                      else ("extrapolated" if d == 2 and k + 1 in (1, 5) else "interpolated"))
            rows.append({"distance": d + 1, "top_k": k + 1, "accuracy_used": topk[d, k],
                         "paper_value": "" if printed is None else printed, "source": source})
    return rows


def accept_length_curves(rank_probs: np.ndarray, sizes: np.ndarray, m: int, random_draws: int,
                         rng: np.random.Generator) -> dict[str, np.ndarray]:
    """τ = 1 + R(T) [len(sizes)] of the dynamic, static and random (mean of ``random_draws`` trees) trees of each
    size; NaN where a static or random tree cannot be built (n < m + 1)."""
    ppd = sim.ppd
    return {"dynamic": ppd.accept_length_curve(rank_probs, sizes, m, "dynamic"),
            "static": np.array([ppd.accept_length(ppd.static_tree(rank_probs, n, m), rank_probs) if n >= m + 1
                                else np.nan for n in sizes]),
            "random": np.array([ppd.accept_length_curve(rank_probs, [n], m, "random", rng, random_draws)[0]
                                if n >= m + 1 else np.nan for n in sizes])}


def accept_length_monte_carlo(rank_probs: np.ndarray, sizes: Sequence[int], m: int, n_steps: int,
                              rng: np.random.Generator) -> dict[int, tuple[float, float, float]]:
    """n -> (theory τ, Monte Carlo τ, its standard error) of the optimal dynamic tree, ``n_steps`` simulated steps."""
    out = {}
    for n in sizes:
        tree = sim.ppd.optimal_tree(rank_probs, n, m)
        accepted, _ = sim.ppd.simulate_steps(tree, rank_probs, n_steps, rng)
        out[n] = (sim.ppd.accept_length(tree, rank_probs), 1 + accepted.mean(), accepted.std() / np.sqrt(accepted.size))
    return out


def tree_shape_table(rank_probs: np.ndarray, m: int) -> list[dict]:
    """PPD Table 1's S_tr, S_input and τ beside the optimal dynamic tree at each row's input length (the steady
    state of its states and each state's two-step tokens F)."""
    rows = []
    for model, row in sim.ppd.PAPER_TABLE1.items():
        n = max(row["s_input"])
        tree = sim.ppd.optimal_tree(rank_probs, n, m)
        pi = sim.ppd.steady_state(sim.ppd.transition_matrix(tree, rank_probs))
        rows.append({"model": model, "n": n, "paper_S_tr": str(row["s_tr"]),
                     "ours_S_tr": str(tuple(s.n_candidates for s in tree.states)),
                     "paper_S_input": str(row["s_input"]), "ours_S_input": str(tuple(s.size for s in tree.states)),
                     "paper_tau": row["tau"], "ours_tau": sim.ppd.accept_length(tree, rank_probs),
                     "ours_steady_state": str(tuple(round(float(x), 3) for x in pi)),
                     "ours_F_per_state": str(tuple(round(float(x), 3)
                                                  for x in sim.ppd.two_step_tokens(tree, rank_probs)))})
    return rows


def latency_curves() -> dict:
    """name -> L_fp(n): a line through each Table 1 row's vanilla and PPD latencies, and two illustrative rooflines."""
    curves = {}
    for model, row in sim.ppd.PAPER_TABLE1.items():
        slope = (row["latency"] / row["vanilla_latency"] - 1.0) / (max(row["s_input"]) - 1)
        curves[f"{model} (Table 1, linear)"] = sim.ppd.linear_latency(row["vanilla_latency"], slope)
    curves["roofline, knee 32 (illustrative)"] = sim.ppd.roofline_latency(0.026, knee=32, slope=1 / 64)
    curves["roofline, knee 128 (illustrative)"] = sim.ppd.roofline_latency(0.026, knee=128, slope=1 / 256)
    return curves


def best_tree_sizes(sizes: np.ndarray, tau: np.ndarray, curves: dict) -> tuple[list[dict], dict[str, np.ndarray]]:
    """(rows, name -> speedup [len(sizes)]): per latency curve, the size maximising τ(n)·L(1)/L(n), its speedup and τ,
    beside the size the paper uses (max S_input) where the curve is a Table 1 row's."""
    rows, speeds = [], {}
    for name, latency in curves.items():
        best_n, speed = sim.ppd.best_tree_size(sizes, tau, latency)
        paper = next((r for m_, r in sim.ppd.PAPER_TABLE1.items() if name.startswith(m_)), None)
        speeds[name] = speed
        rows.append({"latency_curve": name, "best_n": best_n, "speedup_at_best": float(speed.max()),
                     "tau_at_best": float(tau[list(sizes).index(best_n)]),
                     "paper_chosen_n": "" if paper is None else max(paper["s_input"])})
    return rows, speeds


# ------------------------------------------------------------------ theory_mentored: the mentored blog's one token


def truncate_top(p: np.ndarray, k: int) -> np.ndarray:
    """``p`` [B, V] kept on each row's top-k tokens and renormalised."""
    drop = np.argsort(-p, axis=1)[:, k:]
    out = p.copy()
    np.put_along_axis(out, drop, 0.0, axis=1)
    return out / out.sum(axis=1, keepdims=True)


def mentored_acceptance_table(bounds: np.ndarray, accept: np.ndarray, accept_top: np.ndarray,
                              accept_top_blog: np.ndarray) -> list[dict]:
    """Per bound D: mean and 10%/90% quantiles of the acceptance [nD, B] over contexts, and the top-k target's mean
    acceptance, the exact optimum and the blog's α-family."""
    return [{"D": d, "mean_accept": accept[j].mean(), "q10_accept": np.quantile(accept[j], 0.1),
             "q90_accept": np.quantile(accept[j], 0.9), "top50_mean_accept_optimum": accept_top[j].mean(),
             "top50_mean_accept_blog_family": accept_top_blog[j].mean()} for j, d in enumerate(bounds)]


def three_token_example(bounds: Sequence[float]) -> list[dict]:
    """p = (1/2, 1/2, 0), q = (0.4, 0.4, 0.2): the closed-form optimum min(1, 1.8 − e^{−D}) beside the solver, the
    blog's α-family, the acceptance of the p = 0 token and the solver's regime; raises if solver and closed form
    part by more than 1e-9."""
    p3, q3 = np.array([0.5, 0.5, 0.0]), np.array([0.4, 0.4, 0.2])
    rows = []
    for d in bounds:
        opt, blog = sim.mentored.solve(p3, q3, d), sim.mentored.solve(p3, q3, d, blog_family=True)
        rows.append({"D": d, "closed_form_1.8-exp(-D)": min(1.0, 1.8 - np.exp(-d)), "solver": float(opt.accept_prob),
                     "blog_family": float(blog.accept_prob), "theta_accept_p0_token": float(opt.zero_target_accept),
                     "regime": ["CLIPPED", "TARGET_ZERO", "ACCEPT_ALL"][int(opt.regime)]})
        if abs(rows[-1]["solver"] - rows[-1]["closed_form_1.8-exp(-D)"]) >= 1e-9:
            raise AssertionError(f"solver and closed form part at D = {d}: {rows[-1]}")
    return rows


def mentored_speed(bounds: np.ndarray, accept_mean: np.ndarray, gammas: Sequence[int],
                   c: float) -> tuple[np.ndarray, np.ndarray, list[dict]]:
    """(tokens [G, nD], walltime improvement [G, nD], rows): expected tokens per target call and walltime
    improvement at cost ratio c against the bound, per γ, with i.i.d. per-token acceptance ``accept_mean`` [nD]."""
    tokens = np.stack([sim.mentored.expected_tokens_per_step(accept_mean, g) for g in gammas])  # [G, nD]
    speed = np.stack([sim.mentored.walltime_improvement(accept_mean, g, c) for g in gammas])  # [G, nD]
    rows = []
    for j, d in enumerate(bounds):
        row = {"D": d, "accept_mean": accept_mean[j]}
        for i, g in enumerate(gammas):
            row[f"tokens_gamma{g}"], row[f"speedup_gamma{g}"] = tokens[i, j], speed[i, j]
        rows.append(row)
    return tokens, speed, rows
