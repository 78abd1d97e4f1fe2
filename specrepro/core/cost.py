"""The cost model: what a speculative step yields (τ), what it costs, and the tree size that trades one for the other.

Every prediction in the package comes from here, built on the pure simulators (``simulations``, numpy only):

- ``tau(α, γ)``: expected tokens per step, (1 − α^{γ+1}) / (1 − α), γ + 1 at α = 1 (slides §3.1, Leviathan et
  al. Eq. (1); survey blog *Analysis*); ``tau_by_position(α_1..α_G)``: 1 + Σ_{i≤γ} Π_{j≤i} α_j for γ = 1..G
  when the rate depends on the draft position;
- ``step_cost(γ, c, β)``: γc + β(γ+1) target decode steps (survey blog *Batch Size*), ``step_seconds(γ, c, L_fp)``
  the same in seconds, γ·c·L_fp(1) + L_fp(γ+1), ``seconds_per_token`` its ratio to τ, and ``expected_speedup``
  τ / (γc + β);
- ``best_tree_size``: the hardware-aware size of a token tree (PPD paper §4.2), the n maximising
  ``tree_speedup`` = τ(n)·L_fp(1) / L_fp(n), which the tree drafters' ``choose_tree_size`` call.
"""
from __future__ import annotations

from typing import Callable, Iterable

import numpy as np

from simulations.ppd import scan_tree_sizes, theoretical_speedup
from simulations.speculative import expected_speedup, expected_tokens, expected_tokens_by_position, verification_cost

__all__ = ["tau", "tau_by_position", "step_cost", "step_seconds", "seconds_per_token", "expected_speedup",
           "tree_speedup", "best_tree_size", "TreePoint"]

TreePoint = tuple[float, float, float]  # (τ(n), L_fp of the tree forward in seconds, predicted speedup)


def tau(alpha, gamma):
    """Expected tokens per step of γ drafts at acceptance rate α: (1 − α^{γ+1}) / (1 − α), γ + 1 at α = 1.

    A float for scalar arguments, an array where they broadcast (``simulations.speculative.expected_tokens``).
    """
    out = expected_tokens(alpha, gamma)
    return float(out) if np.ndim(out) == 0 else out


def tau_by_position(alphas) -> np.ndarray:
    """τ [G] for γ = 1..G drafts from per-position rates α_i = P(draft i accepted | drafts 1..i−1 were) [G]:
    1 + Σ_{i≤γ} Π_{j≤i} α_j (``simulations.speculative.expected_tokens_by_position``)."""
    alphas = np.asarray(alphas, dtype=float)
    return np.asarray(expected_tokens_by_position(alphas, np.arange(1, alphas.size + 1)), dtype=float)


def step_cost(gamma, c, beta):
    """Cost of one step in target decode steps: γ draft steps (γc) and one verification of γ+1 tokens (β, or a
    measured ``simulations.BetaCurve`` read at γ+1). Survey blog *Batch Size*, the denominator of E[speedup]."""
    return np.asarray(gamma) * c + verification_cost(beta, gamma)


def step_seconds(gamma: int, c: float, l_fp: Callable[[int], float]) -> float:
    """Seconds of one step on a device: γ draft steps γ·c·L_fp(1) and one target forward over γ+1 tokens
    L_fp(γ+1) (``step_cost`` with β(n) = L_fp(n)/L_fp(1), times L_fp(1)); γ = 0 is a plain decode step."""
    return gamma * c * l_fp(1) + l_fp(gamma + 1)


def seconds_per_token(gamma: int, alpha: float, c: float, l_fp: Callable[[int], float]) -> float:
    """Expected seconds per generated token with γ drafts per step: ``step_seconds`` / τ(α, γ)."""
    return step_seconds(gamma, c, l_fp) / tau(alpha, gamma)


def tree_speedup(tau_n: float, latency_s: float, decode_s: float) -> float:
    """Predicted speedup of a tree step: τ(n) tokens per forward of ``latency_s`` against one token per plain
    decode step of ``decode_s`` (PPD §4.2, Fig. 8(b): τ(n) / L_fp(n) relative to vanilla decoding)."""
    return float(theoretical_speedup(tau_n, latency_s, decode_s))


def best_tree_size(speed: Callable[[int], TreePoint | None], sizes: Iterable[int],
                   patience: int | None = None) -> tuple[int, dict[int, TreePoint]]:
    """The hardware-aware tree size (PPD §4.2; also Medusa's choice of tree): the n of ``sizes`` maximising the
    predicted speedup. ``speed(n)`` gives (τ(n), L_fp, ``tree_speedup``) or None once a tree no longer fits the
    profile's measured range; ``patience`` stops the scan that many sizes after the best so far.

    Returns (n, {n: (τ, L_fp, speedup)} for every n scanned) (``simulations.ppd.scan_tree_sizes``)."""
    return scan_tree_sizes(speed, sizes, patience)

