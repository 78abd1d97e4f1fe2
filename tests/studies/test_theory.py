"""specrepro.studies.theory: the theory_speculative notebook's closed-form tables beside Monte Carlo; each driver draws
from the generator it is given, so the same seed gives the same table."""
from __future__ import annotations

import numpy as np
import pytest

import simulations as sim
from specrepro.studies import theory
from tests.stats import N_SIGMA


def test_expected_tokens_check_agrees_with_the_closed_form():
    rows = theory.expected_tokens_check([1, 4], [0.3, 0.8], 20_000, np.random.default_rng(0))
    assert [(r["gamma"], r["alpha"]) for r in rows] == [(1, 0.3), (1, 0.8), (4, 0.3), (4, 0.8)]
    assert all(abs(r["z_score"]) < 5 and r["n_steps"] == 20_000 for r in rows)
    assert rows[3]["tau_closed_form"] == pytest.approx((1 - 0.8**5) / 0.2)
    again = theory.expected_tokens_check([1, 4], [0.3, 0.8], 20_000, np.random.default_rng(0))
    assert again == rows


def test_optimal_gamma_and_walltime_checks():
    rows = theory.optimal_gamma_check([0.05, 0.2], [0.7, 0.9], 50_000, np.random.default_rng(1))
    assert len(rows) == 4 and all(r["speedup_at_monte_carlo_gamma"] >= 0.97 * r["speedup_at_optimum"] for r in rows)
    wall = theory.walltime_check([0.05], [1, 3], [0.4, 0.8], 20_000, np.random.default_rng(2))
    assert [(r["gamma"], r["alpha"]) for r in wall] == [(1, 0.4), (1, 0.8), (3, 0.4), (3, 0.8)]
    assert all(r["monte_carlo"] == pytest.approx(r["walltime_factor"], rel=0.05) for r in wall)


def test_closed_form_tables():
    ops = theory.operations_table([1, 3])
    assert [r["operations_c_hat_0"] for r in ops if r["alpha"] == 0.0] == [2.0, 4.0]
    assert all(r["slides_example_alpha0_c_hat0"] == "" for r in ops if r["alpha"] != 0.0)
    implied = theory.implied_cost_table()
    assert len(implied) == len(sim.SLIDES_TABLE2)
    for r in implied:
        if r["implied_c"] >= 0:
            assert float(sim.expected_speedup(r["alpha"], r["gamma"], r["implied_c"])) == pytest.approx(r["speedup"])
        else:
            assert r["optimal_gamma_at_implied_c"] == "n/a"
    surface = theory.speedup_surface_table([(0.01, 1.0), (0.1, 2.0)])
    assert len(surface) == 8
    assert all(r["speedup_at_optimum"] >= r["speedup_gamma_4"] - 1e-12 for r in surface)


def test_replayed_traces_and_column():
    rows, token_mean = theory.replayed_traces(np.arange(1, 4), 50_000, np.random.default_rng(3))
    assert [r["trace"] for r in rows] == ["i.i.d."] * 3 + ["bursty"] * 3
    assert token_mean["i.i.d."] == pytest.approx(0.65, abs=0.01)
    iid = [r for r in rows if r["trace"] == "i.i.d."]
    assert all(abs(r["tau_replayed"] - r["tau_closed_form_at_token_mean"]) < 5 * r["standard_error"] for r in iid)
    assert theory.column(rows, "gamma", trace="bursty") == [1, 2, 3]


def test_moe_tables():
    routers = theory.routers(8, (1.0,))
    assert list(routers) == ["uniform", "Zipf s = 1.0"] and routers["uniform"] is None
    tokens = np.arange(1, 6)
    rows = theory.expected_experts_check(8, 2, tokens, routers, 20_000, np.random.default_rng(0))
    assert len(rows) == 10 and all(abs(r["z_score"]) < 5 for r in rows)
    uniform = [r for r in rows if r["router"] == "uniform"]
    assert uniform[4]["experts_closed_form"] == pytest.approx(8 * (1 - 0.75**5)) and uniform[4]["blog"] == "6.101"
    beta = theory.moe_beta_table(8, 2, tokens, routers)
    assert beta[0]["beta"] == pytest.approx(1.0) and [r["blog"] for r in beta if r["blog"]] == ["3.05"]
    speed = theory.moe_speedup_table(8, 2, np.arange(1, 4), (0.8,), 0.01)
    assert [r["gamma"] for r in speed] == [1, 2, 3]
    assert all(r["speedup_moe"] <= r["speedup_beta_1"] for r in speed)  # a β above 1 only costs


def test_energy_tables():
    table, fit = sim.MJSD_TABLE1, sim.fit_mjsd_table1(sim.MJSD_TABLE1)
    rows = theory.energy_table1(table, fit)
    assert [r["batch_size"] for r in rows] == list(table.batch_size)
    for r in rows:
        assert r["energy_per_input_J (fit)"] == pytest.approx(r["energy_per_run_J (fit)"] / r["batch_size"])
        assert r["energy_per_run_J (fit)"] == pytest.approx(r["energy_per_run_J (paper)"], rel=0.15)
    powers = theory.fitted_powers(fit)
    assert powers["P_flop_over_P_mem"] == pytest.approx(powers["P_flop_W"] / powers["P_mem_W"])
    assert 0 < powers["memory_share_b16"] < powers["memory_share_b1"] < 1  # larger batches spend more on FLOPs
    table2 = theory.energy_vs_speedup_table2()
    assert len(table2) == 2 * len(sim.MJSD_TABLE2) and [r["method"] for r in table2[:2]] == ["speculative", "mjsd"]
    # each row is drawn at its pair's draft/target parameter ratio (the paper gives no time ratio c)
    assert {r["model"]: r["c_by_parameters"] for r in table2} == {
        "OPT": pytest.approx(125e6 / 13e9), "Llama-2": pytest.approx(68e6 / 13e9)}
    predicted = theory.predicted_saving_ratio(fit, [0.0, 0.1])
    assert [r["c"] for r in predicted] == [0.0, 0.1] and predicted[0]["beta_time"] == float(fit.time_beta(5))


def test_ppd_tree_theory_tables():
    anchors = sim.ppd.PAPER_TOPK_ANCHORS
    topk, rank_probs = theory.illustrative_topk(anchors)
    assert topk.shape == rank_probs.shape == (3, 10) and topk[0, 0] == pytest.approx(anchors[1][1])
    sources = theory.topk_source_table(topk, anchors)
    assert len(sources) == 30 and sources[0]["source"] == "paper (Table 3)" and sources[1]["source"] == "interpolated"
    assert sources[20]["source"] == "extrapolated" and sources[20]["paper_value"] == ""
    sizes = np.array([3, 8, 16])
    curves = theory.accept_length_curves(rank_probs, sizes, 3, 2, np.random.default_rng(0))
    assert np.isnan(curves["static"][0]) and np.isnan(curves["random"][0]) and not np.isnan(curves["dynamic"][0])
    assert (curves["dynamic"][1:] >= curves["static"][1:] - 1e-12).all()  # the optimal tree is never worse
    mc = theory.accept_length_monte_carlo(rank_probs, [16], 3, 20_000, np.random.default_rng(1))
    tau, mean, sem = mc[16]
    assert tau == pytest.approx(curves["dynamic"][2]) and abs(mean - tau) < N_SIGMA * sem
    shapes = theory.tree_shape_table(rank_probs, 3)
    assert [r["model"] for r in shapes] == list(sim.ppd.PAPER_TABLE1)
    rows, speeds = theory.best_tree_sizes(np.arange(4, 41, 4), curves_for(rank_probs), theory.latency_curves())
    assert len(rows) == len(sim.ppd.PAPER_TABLE1) + 2 and rows[0]["paper_chosen_n"] == 285
    assert all(r["speedup_at_best"] == pytest.approx(speeds[r["latency_curve"]].max()) for r in rows)


def curves_for(rank_probs):
    return sim.ppd.accept_length_curve(rank_probs, np.arange(4, 41, 4), 3, "dynamic")


def test_mentored_tables():
    p = np.array([[0.6, 0.3, 0.1], [0.2, 0.2, 0.6]])
    top = theory.truncate_top(p, 2)
    assert np.allclose(top, [[2 / 3, 1 / 3, 0.0], [0.25, 0.0, 0.75]]) or np.allclose(top, [[2 / 3, 1 / 3, 0.0],
                                                                                             [0.0, 0.25, 0.75]])
    accept = np.array([[0.1, 0.3], [0.5, 0.7]])  # [nD, B]
    rows = theory.mentored_acceptance_table(np.array([0.0, 0.1]), accept, accept, accept)
    assert [r["mean_accept"] for r in rows] == pytest.approx([0.2, 0.6])
    toy = theory.three_token_example((0.0, 0.1, float(np.log(1.25))))
    assert toy[0]["solver"] == pytest.approx(0.8) and toy[-1]["solver"] == pytest.approx(1.0)
    tokens, speed, speed_rows = theory.mentored_speed(np.array([0.0, 0.1]), np.array([0.5, 0.9]), (1, 3), 0.1)
    assert tokens.shape == speed.shape == (2, 2) and tokens[0, 0] == pytest.approx(1.5)
    assert list(speed_rows[0]) == ["D", "accept_mean", "tokens_gamma1", "speedup_gamma1", "tokens_gamma3",
                                   "speedup_gamma3"]
