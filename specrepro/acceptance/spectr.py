"""SpecTr's k-sequential selection (K-SEQ) over multi-draft trees: lossless, with the signature of ``acceptance.base``.

Sun et al. 2023, *SpecTr: Fast Speculative Decoding via Optimal Transport* (NeurIPS), the draft-selection
algorithm K-SEQ and its use in SpecTr over k i.i.d. draft sequences; a baseline of the MJSD paper (seed 000,
§5 "Baselines", Table 5: γ = 4, m ∈ {2, 4} drafts).

One level. k candidates X_1..X_k are i.i.d. draws from the draft row q; p is the target row. With a division
factor ρ ∈ [1, k] and

    β(ρ) = Σ_x min(q(x), p(x)/ρ)                     (one candidate's acceptance probability)

try the candidates in turn and accept X_i with probability min(1, p(X_i) / (ρ·q(X_i))). If all k are rejected
(probability (1 − β)^k) draw from the residual

    p_res(x) = [p(x) − min(q(x), p(x)/ρ) · (1 − (1 − β)^k) / β] / (1 − β)^k.

A token x is emitted by an acceptance with probability min(q, p/ρ)(x) · Σ_{i<k} (1 − β)^i, so the output is
exactly p whenever p_res ≥ 0, which holds when (1 − (1 − β)^k)/β ≤ ρ. K-SEQ takes the smallest such ρ, the
root ρ* of the paper's equation

    g(ρ) = ρ·β(ρ) − (1 − (1 − β(ρ))^k) = 0,

whose acceptance probability 1 − (1 − β(ρ*))^k is within a factor 1 − 1/e of the optimal transport plan's.
g is non-decreasing (ρ·β(ρ) = Σ min(ρq, p) grows with ρ, β(ρ) shrinks), g(1) ≤ 0 ≤ g(k) (Bernoulli), so the
root is bracketed in [1, k] and bisection finds it; ``solve_rho`` returns the upper end of the final bracket,
on the valid side (g ≥ 0), within ``RHO_TOLERANCE`` of the root. k = 1 gives ρ = 1 and speculative sampling.

A tree. ``MultiDraftDrafter`` lays m i.i.d. chains out as m root branches, repeated tokens allowed. Level by
level, the candidates are the next tokens of every chain whose prefix equals the accepted path so far: m at
the first level, then the chains that agree with the accepted token (k shrinks). Given the accepted tokens,
those chains' next tokens are still i.i.d. from q(·|path), so each level is one K-SEQ draw from p(·|path) and
the committed tokens follow p. The verdict's path is the root path of the first chain still matching, whose
ancestors carry the accepted tokens.

K-SEQ needs candidates with one shared q row. Rows that differ by more than ``SpecTrParams.iid_atol`` (max
absolute difference) get one clear ValueError rather than a silently wrong law: a tree of siblings sampled
without replacement, or deterministic top-k siblings, belongs to ``tree_sampling`` instead. ``MultiDraftDrafter``
computes each shared prefix's draft row once and gives it to every chain through that prefix, so its siblings'
rows are equal exactly, in any dtype. (Computed once per chain, the rows came from forwards over different
numbers of positions, which in bf16 round apart by ~1e-2.)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..core.tree import root_path
from ..core.warping import sample
from .base import TreeRule, TreeVerdict, check_tree_inputs

RHO_TOLERANCE = 1e-12  # bisection stops once the bracket on ρ ∈ [1, k] is this narrow (absolute)


@dataclass(frozen=True)
class SpecTrParams:
    """Parameters of the K-SEQ tree rule."""

    iid_atol: float = 1e-4  # candidates' q rows may differ by this much (max |Δ|) and still count as one row

    def __post_init__(self):
        if not self.iid_atol >= 0:
            raise ValueError(f"iid_atol must be >= 0, got {self.iid_atol}")


def acceptance_probability(
    p: torch.Tensor,  # [V]
    q: torch.Tensor,  # [V]
    rho: float,
) -> float:
    """β(ρ) = Σ_x min(q(x), p(x)/ρ): the probability that one candidate drawn from q is accepted."""
    return float(torch.minimum(q.double(), p.double() / rho).sum())


def solve_rho(
    p: torch.Tensor,  # [V] target row
    q: torch.Tensor,  # [V] draft row the k candidates were drawn from
    k: int,
) -> float:
    """ρ* ∈ [1, k] with g(ρ) = ρ·β(ρ) − (1 − (1 − β(ρ))^k) = 0 (SpecTr, K-SEQ), on the valid side g(ρ*) ≥ 0.

    Only tokens with q > 0 matter (the others add 0 to β and to Σ min(ρq, p)). Sorted by r = p/q, they split
    [1, k] into segments where β(ρ) = A + B/ρ with constants A = Σ_{r ≥ ρ} q, B = Σ_{r < ρ} p. g is evaluated at
    every breakpoint at once to find the segment holding the root; bisection on that segment's closed form, in
    float64 scalars, then narrows the bracket to ``RHO_TOLERANCE``. (numpy on the CPU: one sort and a few
    vector operations, cheap for a 32k vocabulary and free of per-operation overhead for a toy one.)
    """
    if k < 1:
        raise ValueError(f"K-SEQ needs k >= 1 candidates, got {k}")
    if k == 1:
        return 1.0  # g(ρ) = β(ρ)·(ρ − 1): ρ* = 1, speculative sampling
    p, q = p.double().cpu().numpy(), q.double().cpu().numpy()  # [V], [V]
    support = q > 0
    ratio = p[support] / q[support]  # [S] r = p/q
    order = np.argsort(ratio, kind="stable")
    ratio, p_sorted, q_sorted = ratio[order], p[support][order], q[support][order]  # [S] ascending r
    p_below = np.concatenate([[0.0], np.cumsum(p_sorted)])  # [S+1]: p_below[j] = Σ p over the j smallest ratios
    q_above = q_sorted.sum() - np.concatenate([[0.0], np.cumsum(q_sorted)])  # [S+1]: Σ q over the rest

    def segment(rho):  # rho [R] -> A [R], B [R]
        below = np.searchsorted(ratio, rho)  # [R]: how many ratios are < ρ
        return q_above[below], p_below[below]

    def g(rho, a, b):  # arrays or floats alike
        return rho * a + b - 1.0 + (1.0 - a - b / rho) ** k

    grid = np.concatenate([[1.0], ratio[(ratio > 1) & (ratio < k)], [float(k)]])  # [R] ascending
    valid = g(grid, *segment(grid)) >= 0  # [R]
    first = int(valid.argmax()) if valid.any() else grid.size - 1
    if first == 0:
        return 1.0
    lo, hi = float(grid[first - 1]), float(grid[first])
    a, b = (float(x[0]) for x in segment(np.array([(lo + hi) / 2])))
    while hi - lo > RHO_TOLERANCE:
        mid = (lo + hi) / 2
        if g(mid, a, b) >= 0:
            hi = mid
        else:
            lo = mid
    return hi


def kseq_residual(
    p: torch.Tensor,  # [V] float64 target row
    q: torch.Tensor,  # [V] float64 draft row
    rho: float,
    k: int,
) -> torch.Tensor:  # [V] float64
    """p_res ∝ p − min(q, p/ρ) · Σ_{i<k} (1 − β)^i: the law of the next token once all k candidates are rejected.

    Σ_{i<k} (1 − β)^i is (1 − (1 − β)^k)/β written without the division (β may be 0). Tiny negatives left by
    rounding at ρ* are clipped. If nothing is left (β = 1, so rejection had probability 0), p itself is returned,
    as the chain rule does.
    """
    accepted = torch.minimum(q, p / rho)  # [V]
    beta = float(accepted.sum())
    geometric = sum((1.0 - beta) ** i for i in range(k))
    left = (p - accepted * geometric).clamp_min(0.0)  # [V]
    mass = left.sum()
    return left / mass if mass > 0 else p


def kseq_tree(
    p: torch.Tensor,  # [N+1, V]
    q: torch.Tensor,  # [N, V]
    tokens: torch.Tensor,  # [N]
    parents: torch.Tensor,  # [N]
    uniforms: torch.Tensor,  # [N+1]
    params: SpecTrParams = SpecTrParams(),
) -> TreeVerdict:
    """Lossless. SpecTr's draft selection with K-SEQ at every level of a multi-draft tree (module docstring).

    At each level the candidates are the children of every node whose root path carries the accepted tokens,
    in index order (chain order for ``MultiDraftDrafter``); candidate c is accepted when
    ``u_c·ρ·q(x_c) < p(x_c)`` (probability min(1, p/(ρq)), written as the chain rule writes it), ρ = ρ*(p row,
    q row, k). When all are rejected the next token comes from the K-SEQ residual, when there are none (a leaf)
    from the p row after the path; both with uniforms[N].
    """
    n = check_tree_inputs(p, q, tokens, parents, uniforms)
    p, q = p.double(), q.double()  # [N+1, V], [N, V]
    u, tok, par = uniforms.double().tolist(), tokens.tolist(), parents.tolist()  # [N+1], [N], [N]
    path: list[int] = []
    matching = {-1}  # nodes whose root paths carry the accepted tokens (the root, to begin with)
    while True:
        row = p[path[-1] + 1 if path else 0]  # [V] target row after the accepted path
        candidates = [c for c in range(n) if par[c] in matching]  # index order: chain order
        if not candidates:
            return TreeVerdict(path, sample(row, u[n]))
        k, q_row = len(candidates), _shared_row(q, candidates, params.iid_atol)  # q_row [V]
        rho = solve_rho(row, q_row, k)
        xs = torch.tensor([tok[c] for c in candidates], device=p.device)  # [k]
        p_x, q_x = row[xs].tolist(), q_row[xs].tolist()  # [k], [k]
        accepted = next((i for i, c in enumerate(candidates) if u[c] * rho * q_x[i] < p_x[i]), None)
        if accepted is None:
            return TreeVerdict(path, sample(kseq_residual(row, q_row, rho, k), u[n]))
        matching = {c for c in candidates if tok[c] == tok[candidates[accepted]]}
        path = root_path(parents, min(matching))


def _shared_row(
    q: torch.Tensor,  # [N, V]
    candidates: list[int],
    atol: float,
) -> torch.Tensor:  # [V]
    """The one q row the candidates were drawn from; one clear error if their rows disagree."""
    rows = q[candidates]  # [k, V]
    gap = float((rows - rows[0]).abs().max())
    if gap > atol:
        raise ValueError(f"K-SEQ needs i.i.d. candidates drawn from one q row; nodes {candidates} have rows that "
                         f"differ by up to {gap:.3g} > iid_atol = {atol:g} (siblings drawn without replacement or "
                         f"deterministic siblings need the 'exact' rule, tree_sampling)")
    return rows[0]


SPECTR_RULE = TreeRule("spectr", lossless=True, fn=kseq_tree, params=SpecTrParams())
