"""The documents' formulas, restated here so that the theory tables are checked against the document, not
against the library that wrote them. Each docstring names where its document states it."""

from __future__ import annotations

FORMULA_RTOL = 1e-5  # the notebooks write 6 significant digits


def expected_tokens(alpha: float, gamma: int) -> float:
    """τ = (1 − α^{γ+1}) / (1 − α): slides Fig. 2; survey blog, Analysis (γ + 1 at α = 1)."""
    return gamma + 1.0 if alpha == 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)


def expected_speedup(alpha: float, gamma: int, c: float, beta: float = 1.0) -> float:
    """E(speedup) = (1 − α^{k+1}) / ((1 − α)(kc + β)), k = γ: survey blog, Batch Size (β = 1: its Analysis)."""
    return expected_tokens(alpha, gamma) / (gamma * c + beta)


def walltime_factor(alpha: float, gamma: int, c: float) -> float:
    """(cγ + 1)(1 − α) / (1 − α^{γ+1}): slides §3.3, with the exponent the text extraction lost."""
    return (c * gamma + 1) / expected_tokens(alpha, gamma)


def operations_factor(alpha: float, gamma: int, c_hat: float) -> float:
    """(1 − α)(γĉ + γ + 1) / (1 − α^{γ+1}): slides §3.4, same fix."""
    return (gamma * c_hat + gamma + 1) / expected_tokens(alpha, gamma)


def best_speedup(alpha: float, c: float, beta: float = 1.0, largest: int = 200) -> float:
    """The largest E(speedup) over γ = 1 … ``largest`` (slides §3.5, Fig. 3)."""
    return max(expected_speedup(alpha, g, c, beta) for g in range(1, largest + 1))


def expected_experts(experts: int, top_k: int, tokens: int) -> float:
    """E(1 − ((E − k)/E)^T): survey blog, Mixture of Experts (its example prints (2/8)^5 for (6/8)^5)."""
    return experts * (1 - ((experts - top_k) / experts) ** tokens)
