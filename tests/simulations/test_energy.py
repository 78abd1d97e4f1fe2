"""simulations/energy.py: E = P_flop·T_flop + P_mem·T_mem, MJSD Table 1 and its worked fit (paper 000)."""
from __future__ import annotations

import numpy as np
import pytest

import simulations as sim

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
