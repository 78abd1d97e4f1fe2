"""How many experts a mixture-of-experts layer loads when it verifies several tokens at once.

Survey blog (``004_8417a3a73169c52c.txt``), section *Mixture of Experts*: at small batch a
routed MoE layer is memory bound, so its cost is roughly the number of distinct experts whose
weights are loaded. Verifying T = γ + 1 tokens loads more experts than decoding one, which
breaks "The Assumption" (β ≈ 1). The blog estimates β as the ratio of expected experts loaded
for T tokens and for one token.

Notation: E experts per layer, each token routed to k distinct experts (the blog's k_exp), T
tokens passed through the layer together.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from . import _checks

# Above this many ordered k-subsets, `expected_experts_weighted` refuses to enumerate them.
_MAX_ORDERED_SELECTIONS = 2_000_000
# `simulate_experts` draws at most this many Gumbel keys at once (8 MB of float64).
_CHUNK_KEYS = 1_000_000


def expected_experts(E, k, T):
    """Expected number of distinct experts loaded for T tokens routed uniformly to k of E.

    Survey blog *Mixture of Experts*: E · (1 − ((E − k)/E)^T). An expert is missed by one token
    with probability (E − k)/E, by all T independently with ((E − k)/E)^T; linearity of
    expectation over the E indicators gives the sum. The blog's Mixtral example (E = 8, k = 2,
    T = 5) prints (2/8)^5, a typo: its 6.101 follows from (6/8)^5, the formula it derived.

    Args:
        E: experts per layer, whole number ≥ 1 (array-like).
        k: experts per token, whole number with 1 ≤ k ≤ E (array-like).
        T: tokens routed together, whole number ≥ 0 (array-like).
    """
    E = _checks.integer("E", E, minimum=1)
    k = _checks.integer("k", k, minimum=1)
    T = _checks.integer("T", T, minimum=0)
    if np.any(k > E):
        raise ValueError(f"k must be <= E, got k = {np.max(k).item()} with E = {np.min(E).item()}")
    miss = (E - k) / E
    return _checks.scalar_result(np.asarray(E * (1.0 - miss**T)))


def moe_beta(E, k, T):
    """β estimate for MoE verification: expected experts for T tokens over those for one.

    Survey blog *Mixture of Experts*: "the memory ratio of matmuls for MoE with 5 tokens to 1 is
    an estimate for β"; Mixtral (E = 8, k = 2, T = 5) gives 6.10 / 2 ≈ 3.05. It counts expert
    weight loads only (attention and dense layers are taken as free), so it is the MoE-layer
    part of β.

    Args:
        E: experts per layer, ≥ 1.
        k: experts per token, 1 ≤ k ≤ E.
        T: tokens verified together (γ + 1 for speculative decoding), ≥ 1.
    """
    _checks.integer("T", T, minimum=1)
    return _checks.scalar_result(np.asarray(expected_experts(E, k, T) / expected_experts(E, k, 1)))


def _popularity(popularity, E: int | None = None) -> np.ndarray:
    weights = _checks.nonnegative("popularity", popularity)
    if weights.ndim != 1 or weights.size == 0:
        raise ValueError(f"popularity must be a non-empty 1-D array [E], got shape {weights.shape}")
    if E is not None and weights.size != E:
        raise ValueError(f"popularity must have E = {E} entries, got {weights.size}")
    if weights.sum() <= 0:
        raise ValueError("popularity must have a positive entry, got all zeros")
    return weights / weights.sum()


def inclusion_probabilities(popularity, k):
    """P(expert i is among one token's k experts) under weighted sampling without replacement.

    The router model of :func:`simulate_experts`: the token picks its first expert with
    probability ∝ popularity, its second among the rest ∝ popularity, and so on (successive
    sampling). Computed exactly by enumerating the E!/(E − k)! ordered selections, so only for
    small layers (Mixtral: 8 · 7 = 56). Uniform popularity gives k/E for every expert.

    Args:
        popularity: 1-D array [E] of non-negative weights (normalised here).
        k: experts per token, 1 ≤ k ≤ number of experts with positive weight.

    Returns:
        array [E] of inclusion probabilities (they sum to k).
    """
    weights = _popularity(popularity)
    E = weights.size
    k = _checks.scalar_int("k", k, minimum=1)
    if k > np.count_nonzero(weights):
        raise ValueError(f"k must be <= the number of experts with positive popularity "
                         f"({np.count_nonzero(weights)}), got {k}")
    if math.perm(E, k) > _MAX_ORDERED_SELECTIONS:
        raise ValueError(f"E = {E}, k = {k} has {math.perm(E, k)} ordered selections, too many to "
                         f"enumerate; use simulate_experts instead")
    included = np.zeros(E)
    for order in itertools.permutations(range(E), k):
        prob, left = 1.0, 1.0
        for expert in order:
            if left <= 0.0:
                prob = 0.0
                break
            prob *= weights[expert] / left
            left -= weights[expert]
        included[list(order)] += prob
    return included


def expected_experts_weighted(popularity, k, T):
    """Expected distinct experts for T tokens when the router prefers some experts.

    Extends the survey blog's E(1 − ((E − k)/E)^T) (section *Mixture of Experts*) to a skewed
    router: with π_i = P(expert i is among one token's k), tokens independent,
    E[experts] = Σ_i (1 − (1 − π_i)^T). Uniform popularity recovers :func:`expected_experts`.
    Skew makes tokens share their favourite experts, so fewer distinct experts are loaded.

    Args:
        popularity: 1-D array [E] of non-negative weights.
        k: experts per token.
        T: tokens routed together, whole number ≥ 0 (array-like).
    """
    pi = inclusion_probabilities(popularity, k)  # [E]
    T = _checks.integer("T", T, minimum=0)
    miss = (1.0 - pi) ** T[..., None]  # [..., E]
    return _checks.scalar_result(np.asarray((1.0 - miss).sum(axis=-1)))


def simulate_experts(E, k, T, n_trials, popularity=None, rng=0):
    """Monte Carlo router: distinct experts loaded when T tokens each pick k of E experts.

    Checks the survey blog's expected-experts formula (section *Mixture of Experts*) and its
    skewed extension :func:`expected_experts_weighted`. Each token picks k distinct experts
    without replacement, successively, with probability ∝ ``popularity`` among those left
    (uniform when None). Sampling uses the Gumbel-top-k trick: the k largest of
    log(popularity) + Gumbel noise are such a sample, which vectorises over tokens and trials.

    Args:
        E: experts per layer, ≥ 1.
        k: experts per token, 1 ≤ k ≤ E.
        T: tokens per trial, ≥ 0.
        n_trials: independent trials, ≥ 1.
        popularity: None (uniform) or 1-D array [E] of non-negative weights.
        rng: numpy Generator or int seed.

    Returns:
        int array [n_trials]: distinct experts loaded in each trial.
    """
    E = _checks.scalar_int("E", E, minimum=1)
    k = _checks.scalar_int("k", k, minimum=1)
    T = _checks.scalar_int("T", T, minimum=0)
    n_trials = _checks.scalar_int("n_trials", n_trials, minimum=1)
    if k > E:
        raise ValueError(f"k must be <= E = {E}, got {k}")
    weights = np.full(E, 1.0 / E) if popularity is None else _popularity(popularity, E)
    if k > np.count_nonzero(weights):
        raise ValueError(f"k must be <= the number of experts with positive popularity "
                         f"({np.count_nonzero(weights)}), got {k}")
    rng = _checks.generator(rng)
    with np.errstate(divide="ignore"):
        log_w = np.log(weights)  # [E]; -inf for experts that are never picked
    # Trials are drawn in chunks of about _CHUNK_KEYS random keys to bound memory.
    chunk = max(1, _CHUNK_KEYS // max(1, T * E))
    counts = []
    for start in range(0, n_trials, chunk):
        n = min(chunk, n_trials - start)
        keys = log_w + rng.gumbel(size=(n, T, E))  # [N, T, E]
        chosen = np.argpartition(-keys, k - 1, axis=-1)[..., :k]  # [N, T, k]
        loaded = np.zeros((n, E), dtype=bool)  # [N, E]
        trial = np.broadcast_to(np.arange(n)[:, None, None], chosen.shape)
        loaded[trial, chosen] = True
        counts.append(loaded.sum(axis=-1))
    return np.concatenate(counts)


def zipf_popularity(E, s=1.0):
    """Expert popularity ∝ 1 / rank^s: a simple skewed router for the Monte Carlo check.

    Not from a document; s = 0 is uniform, larger s is more skewed.
    """
    E = _checks.scalar_int("E", E, minimum=1)
    s = float(_checks.nonnegative("s", s))
    weights = 1.0 / np.arange(1, E + 1) ** s
    return weights / weights.sum()
