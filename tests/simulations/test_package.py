"""The simulations package as a whole: every simulator's argument validation, and that importing the package stays
free of torch."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import simulations as sim
from simulations import montecarlo

ROOT = Path(__file__).resolve().parents[2]

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
