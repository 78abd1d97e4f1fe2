"""Analytic simulators of speculative decoding: closed forms and Monte Carlo, numpy/scipy only.

Importing this package must not import torch (tested): it runs where no model does.

- :mod:`simulations.speculative`: expected tokens, speedup, walltime and operation factors,
  optimal γ, the β bound (slides 003 §3, survey blog 004).
- :mod:`simulations.moe`: expected experts loaded and β for MoE verification (survey blog 004).
- :mod:`simulations.energy`: E = P_flop·T_flop + P_mem·T_mem fitted to MJSD Table 1 (paper 000).
- :mod:`simulations.montecarlo`: the accept/reject process and replay of acceptance traces.
- :mod:`simulations.mentored`: KL-bounded mentored decoding (mentored blog 001).
- :mod:`simulations.ppd`: dynamic sparse tree theory of parallel prompt decoding (PPD paper 002).
"""

from . import energy, mentored, montecarlo, moe, ppd, speculative
from .energy import (
    MJSD_TABLE1,
    MJSD_TABLE2,
    MJSD_TABLE2_COLUMNS,
    BatchEnergyFit,
    BatchEnergyTable,
    EnergyFit,
    energy_model,
    energy_saving_over_speedup,
    fit_energy_model,
    fit_mjsd_table1,
    split_time_by_batch,
)
from .montecarlo import (
    Estimate,
    alpha_by_position,
    alpha_from_accept_lengths,
    empirical_optimal_gamma,
    estimate_mean,
    estimate_speedup,
    replay_outcomes,
    replay_probabilities,
    simulate_bursty_outcomes,
    simulate_tokens_per_step,
    speedup_by_gamma,
)
from .moe import (
    expected_experts,
    expected_experts_weighted,
    inclusion_probabilities,
    moe_beta,
    simulate_experts,
    zipf_popularity,
)
from .speculative import (
    SLIDES_TABLE2,
    SLIDES_TABLE2_COLUMNS,
    SLIDES_TABLE3,
    SLIDES_TABLE3_COLUMNS,
    BetaCurve,
    acceptance_rate,
    expected_speedup,
    expected_tokens,
    expected_tokens_by_position,
    implied_cost_ratio,
    max_beta,
    operations_factor,
    optimal_gamma,
    walltime_factor,
)

__all__ = [
    # modules
    "energy", "mentored", "montecarlo", "moe", "ppd", "speculative",
    # speculative (closed forms)
    "BetaCurve", "acceptance_rate", "expected_speedup", "expected_tokens", "expected_tokens_by_position",
    "implied_cost_ratio", "max_beta", "operations_factor", "optimal_gamma", "walltime_factor",
    "SLIDES_TABLE2", "SLIDES_TABLE2_COLUMNS", "SLIDES_TABLE3", "SLIDES_TABLE3_COLUMNS",
    # moe
    "expected_experts", "expected_experts_weighted", "inclusion_probabilities", "moe_beta",
    "simulate_experts", "zipf_popularity",
    # energy
    "MJSD_TABLE1", "MJSD_TABLE2", "MJSD_TABLE2_COLUMNS", "BatchEnergyFit", "BatchEnergyTable",
    "EnergyFit", "energy_model", "energy_saving_over_speedup",
    "fit_energy_model", "fit_mjsd_table1", "split_time_by_batch",
    # montecarlo
    "Estimate", "alpha_by_position", "alpha_from_accept_lengths", "empirical_optimal_gamma",
    "estimate_mean", "estimate_speedup", "replay_outcomes", "replay_probabilities",
    "simulate_bursty_outcomes", "simulate_tokens_per_step", "speedup_by_gamma",
]
