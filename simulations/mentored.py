"""Mentored decoding: the KL-bounded optimal lossy acceptance rule for one token (blog 001).

Notation. specrepro writes **p = target, q = draft**. The blog *An optimal lossy variant of
speculative decoding* (seed 001) swaps them. The mapping used in every docstring below:

=====================  ==========================  ========================================
blog                   specrepro (this module)     meaning
=====================  ==========================  ========================================
``q_i``                ``p[i]``                    target probability of token i
``p_i``                ``q[i]``                    draft probability of token i
``r_i``                ``accept[i]`` (r)           probability of accepting drafted token i
``s_i``                ``residual[i]`` (s)         distribution sampled on rejection
``π_i``                ``pi[i]``                   resulting distribution of the emitted token
``Σ_i p_i r_i``        ``accept_prob``             probability that the draft token is kept
``α`` (in ]0, 1])      ``blog_alpha``              upper clip: ``r = min(1, p / (α q))``
``β`` (≥ 1)            ``blog_beta``               lower clip: ``s ∝ max(0, p / β − q)``
``D``                  ``bound``                   bound on KL(target ‖ π)
=====================  ==========================  ========================================

Problem (blog §"Mentored decoding", constraint direction as in the seeds' "Known traps")::

    maximise  A = Σ_i q_i r_i
    over      r ∈ [0, 1]^V, s ∈ simplex
    s.t.      π = q ∘ r + (1 − A) s,   KL(p ‖ π) = Σ_i p_i ln(p_i / π_i) ≤ D.

Why the solution has the blog's form. For a fixed π the largest A is Σ_i min(q_i, π_i)
(accept x with r = min(1, π/q) and put the rest of π in s), so the problem is
"minimise TV(q, π) subject to KL(p ‖ π) ≤ D": concave objective, convex constraint. Its KKT
conditions give, with ρ_i = q_i / p_i (draft/target ratio) and clip levels lo = 1/β ≤ 1 ≤ hi = 1/α,

    π_i = p_i · clip(ρ_i, lo, hi)          for p_i > 0,

i.e. blog ``r_i = min(1, q_i / (α p_i))`` and ``s_i ∝ max(0, q_i / β − p_i)`` in its letters.
The total mass moved up from the low-ratio tokens equals TV(q, π) = 1 − A, hence A = 1 − Σ_i
(lo p_i − q_i)^+.

Tokens the target gives probability 0 (set Z, draft mass m0 = Σ_{p_i=0} q_i). KL(p ‖ π) does
not see π on Z, so π_Z only costs mass taken from the other tokens. The KKT multiplier of
Σπ = 1 is then either > 1 — regime ``CLIPPED``, the blog's: π_Z = 0, such tokens are never
accepted — or exactly 1 — regime ``TARGET_ZERO``, which the blog's α-parametrisation misses: the
upper clip is off (α → 0), π = max(q, lo·p) on the target's support, and every drafted token with
p = 0 is accepted with the same probability θ = (m0 − Σ(lo p − q)^+) / m0. The second regime
exists only when m0 > 0, for D between D1 = KL at α = 1/max ρ and KL(p ‖ q); there the blog's rule
(p = 0 tokens always rejected, acceptance frozen at 1 − m0 − …) is strictly suboptimal, and the
optimal acceptance probability is continuous in D up to the blog's shortcut "KL(p ‖ q) ≤ D ⇒
accept everything" (regime ``ACCEPT_ALL``, π = q). Example: p = (½, ½, 0), q = (0.4, 0.4, 0.2) has
A*(D) = 1.8 − e^{−D} for 0 ≤ D ≤ ln 1.25, where the blog's family gives 0.8 until it jumps to 1.
``tests/simulations/test_mentored.py`` checks all of this against a generic constrained optimiser.

Algorithm (blog §"Solving the optimization problem"): sort tokens by ρ, precompute partial sums of
p, q and p·ln(p/q) in that order (the blog's ``Σ_{i≤j} q_i ln(q_i/p_i)`` in its letters), after
which the added mass, removed mass and KL for any (lo, hi) cost O(log V) (one ``searchsorted``).
Binary search on the blog's α in the ``CLIPPED`` regime (KL decreases in α, β follows from α by
normalisation); binary search on β in the ``TARGET_ZERO`` regime. The search keeps the feasible
end, so the returned rule always satisfies KL(p ‖ π) ≤ D up to rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "CLIPPED", "TARGET_ZERO", "ACCEPT_ALL",
    "MentoredSolution", "solve", "apply", "verify", "kl_divergence",
    "expected_tokens_per_step", "walltime_improvement", "random_pair", "acceptance_curve",
]

CLIPPED = 0      # blog's regime: π = p·clip(q/p, 1/β, 1/α), tokens with p = 0 rejected
TARGET_ZERO = 1  # α → 0: π = max(q, p/β) on p > 0, tokens with p = 0 accepted with prob. θ
ACCEPT_ALL = 2   # KL(p ‖ q) ≤ D: π = q, every draft token accepted

_ROW_TOL = 1e-6     # how far a row may be from summing to 1
_BISECT_STEPS = 200  # enough to shrink any interval in [0, 1] to adjacent doubles


@dataclass(frozen=True)
class MentoredSolution:
    """The optimal one-token rule. Leading shape ``[...]`` is ``()`` for 1-D input, ``(B,)`` for 2-D."""

    accept: np.ndarray       # r: [..., V]  probability of keeping a drafted token (blog r_i)
    residual: np.ndarray     # s: [..., V]  distribution sampled on rejection (blog s_i)
    pi: np.ndarray           # π: [..., V]  distribution of the emitted token
    accept_prob: np.ndarray  # [...]  A = Σ q r  (blog Σ p_i r_i)
    kl: np.ndarray           # [...]  KL(p ‖ π), ≤ bound
    bound: np.ndarray        # [...]  D
    blog_alpha: np.ndarray   # [...]  α ∈ [0, 1]; 0 = no upper clip (TARGET_ZERO, ACCEPT_ALL)
    blog_beta: np.ndarray    # [...]  β ≥ 1; inf = no lower clip (ACCEPT_ALL)
    zero_target_accept: np.ndarray  # [...]  θ, acceptance prob. of drafted tokens with p = 0
    regime: np.ndarray       # [...]  CLIPPED, TARGET_ZERO or ACCEPT_ALL


def kl_divergence(p: np.ndarray, pi: np.ndarray) -> np.ndarray:
    """KL(p ‖ π) = Σ_{p_i>0} p_i ln(p_i / π_i) over the last axis; inf where π_i = 0 < p_i."""
    p = np.asarray(p, dtype=np.float64)
    pi = np.asarray(pi, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * (np.log(p) - np.log(pi)), 0.0)
    return terms.sum(axis=-1)


# ----------------------------------------------------------------------------------- validation

def _check_distributions(p, q) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    if p.shape != q.shape:
        raise ValueError(f"shape mismatch: target p has shape {p.shape}, draft q has {q.shape}")
    if p.ndim not in (1, 2) or p.shape[-1] == 0:
        raise ValueError(f"p and q must have shape [V] or [B, V] with V ≥ 1, got {p.shape}")
    for name, x in (("target p", p), ("draft q", q)):
        if not np.all(np.isfinite(x)):
            raise ValueError(f"{name} has non-finite entries")
        if np.any(x < 0):
            raise ValueError(f"{name} has negative entries (min {x.min():.3g})")
        sums = x.sum(axis=-1)
        if np.any(np.abs(sums - 1.0) > _ROW_TOL):
            worst = float(np.max(np.abs(sums - 1.0)))
            raise ValueError(f"rows of {name} must sum to 1 (tolerance {_ROW_TOL}); off by {worst:.3g}")
    # Rows are within 1e-6 of 1: renormalise exactly so that π sums to 1 to rounding.
    return p / p.sum(axis=-1, keepdims=True), q / q.sum(axis=-1, keepdims=True)


def _check_bound(bound, batch: int) -> np.ndarray:
    d = np.asarray(bound, dtype=np.float64)
    if d.ndim > 1 or (d.ndim == 1 and d.shape[0] != batch):
        raise ValueError(f"bound D must be a scalar or have shape [{batch}], got {d.shape}")
    if np.any(np.isnan(d)):
        raise ValueError("bound D is NaN")
    if np.any(d < 0):
        raise ValueError(f"bound D must be ≥ 0, got {d.min():.3g}")
    return np.broadcast_to(d, (batch,)).copy()


# ------------------------------------------------------------------------ sorted precomputation

class _SortedRows:
    """Per-row partial sums in increasing order of ρ = q/p (the blog's vectorised precomputation).

    Tokens with p = 0 go last with ρ = +inf and zero weight, so they never enter a partial sum.
    ``P[k], Q[k], S[k]``: sums of p, q and p·ln(p/q) over the first k sorted tokens (k = 0..V).
    """

    def __init__(self, p: np.ndarray, q: np.ndarray):  # p, q: [B, V]
        support = p > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            rho = np.where(support, q / p, np.inf)                       # [B, V]
            plogpq = np.where(support & (q > 0), p * np.log(p / q), 0.0)  # q = 0 < p: ρ = 0, never in S
        order = np.argsort(rho, axis=-1, kind="stable")
        self.rho = np.take_along_axis(rho, order, axis=-1)               # [B, V] ascending
        zeros = np.zeros((p.shape[0], 1))
        qs = np.where(support, q, 0.0)
        p_sorted, q_sorted = np.take_along_axis(p, order, -1), np.take_along_axis(qs, order, -1)     # [B, V]
        self.P = np.concatenate([zeros, np.cumsum(p_sorted, -1)], -1)                                 # [B, V+1]
        self.Q = np.concatenate([zeros, np.cumsum(q_sorted, -1)], -1)                                 # [B, V+1]
        # Sums over the last V − k sorted tokens, summed from the top (not 1 − P: the upper clip multiplies them by
        # hi, up to 1e9 where p is tiny, which would bring P's rounding up to a visible share of the mass).
        self.P_tail = np.concatenate([np.cumsum(p_sorted[:, ::-1], -1)[:, ::-1], zeros], -1)         # [B, V+1]
        self.Q_tail = np.concatenate([np.cumsum(q_sorted[:, ::-1], -1)[:, ::-1], zeros], -1)         # [B, V+1]
        self.S = np.concatenate([zeros, np.cumsum(np.take_along_axis(plogpq, order, -1), -1)], -1)  # [B, V+1]
        self.n_support = support.sum(axis=-1)                            # [B]
        # added(ρ_j) at each breakpoint: mass Σ_{ρ_i<ρ_j}(ρ_j p_i − q_i), non-decreasing in j.
        with np.errstate(invalid="ignore"):
            self.added_at = np.where(np.isfinite(self.rho), self.rho * self.P[:, 1:] - self.Q[:, 1:], np.inf)

    def _count(self, values: np.ndarray, x: np.ndarray, side: str) -> np.ndarray:
        # Row-wise searchsorted: O(B log V), the point of sorting once.
        return np.array([np.searchsorted(v, xi, side=side) for v, xi in zip(values, x)], dtype=np.int64)

    def _take(self, arr: np.ndarray, k: np.ndarray) -> np.ndarray:
        return np.take_along_axis(arr, k[:, None], axis=-1)[:, 0]

    def removed(self, hi: np.ndarray) -> np.ndarray:
        """Mass Σ_{ρ_i>hi} (q_i − hi·p_i) cut from the high-ratio tokens by the upper clip."""
        k = self._count(self.rho, hi, "right")  # tokens with ρ ≤ hi
        p_above = self._take(self.P_tail, k)
        q_above = self._take(self.Q_tail, k)
        with np.errstate(invalid="ignore"):
            return np.where(p_above > 0, np.maximum(q_above - hi * p_above, 0.0), 0.0)

    def lower_level(self, mass: np.ndarray) -> np.ndarray:
        """The lo with Σ_{ρ_i<lo} (lo·p_i − q_i) = mass (mass ≥ 0), solved exactly on its segment."""
        k = self._count(self.added_at, mass, "right")  # breakpoints with added ≤ mass; ≥ 1
        k = np.clip(k, 1, self.n_support)
        return (mass + self._take(self.Q, k)) / self._take(self.P, k)

    def added(self, lo: np.ndarray) -> np.ndarray:
        """Mass Σ_{ρ_i<lo} (lo·p_i − q_i) raised on the low-ratio tokens by the lower clip."""
        k = self._count(self.rho, lo, "left")
        return np.maximum(lo * self._take(self.P, k) - self._take(self.Q, k), 0.0)

    def kl(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """KL(p ‖ p·clip(ρ, lo, hi)) = −P_below ln lo − P_above ln hi + Σ_middle p ln(p/q)."""
        k_lo = self._count(self.rho, lo, "left")    # ρ < lo
        k_hi = self._count(self.rho, hi, "right")   # ρ ≤ hi
        p_below = self._take(self.P, k_lo)
        p_above = self._take(self.P_tail, k_hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            below = np.where(p_below > 0, -p_below * np.log(lo), 0.0)
            above = np.where(np.isfinite(hi) & (p_above > 0), -p_above * np.log(hi), 0.0)
        kl = below + above + self._take(self.S, k_hi) - self._take(self.S, k_lo)
        # At lo = 0 the tokens the draft never proposes (q = 0 < p, ρ = 0) keep π = 0 while p > 0: KL is infinite.
        # (ρ < lo misses them there, and the partial sums of p·ln(p/q) skip them.)
        p_unproposed = self._take(self.P, self._count(self.rho, np.zeros_like(lo), "right"))  # mass with ρ ≤ 0
        return np.where((lo <= 0) & (p_unproposed > 0), np.inf, kl)


def _bisect(kl_of, feasible: np.ndarray, infeasible: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """Shrink [infeasible, feasible] where kl_of is monotone; return the end with kl ≤ bound."""
    feasible, infeasible = feasible.copy(), infeasible.copy()
    for _ in range(_BISECT_STEPS):
        mid = 0.5 * (feasible + infeasible)
        ok = kl_of(mid) <= bound
        feasible = np.where(ok, mid, feasible)
        infeasible = np.where(ok, infeasible, mid)
        if np.all(np.abs(feasible - infeasible) <= 4 * np.finfo(float).eps * np.abs(feasible)):
            break
    return feasible


# -------------------------------------------------------------------------------------- solver

def _accept_and_residual(pi: np.ndarray, q: np.ndarray, accept_all: np.ndarray):
    """The rule that turns drafts from q into samples of π: r = min(1, π/q) (1 where the row accepts everything),
    A = Σ q r, and the residual s = (π − q r)/(1 − A), set to π when A = 1 (never used). Rows [B, V]."""
    with np.errstate(divide="ignore", invalid="ignore"):
        accept = np.where(q > 0, np.minimum(1.0, pi / q), (pi > 0).astype(float))
    accept = np.where(accept_all[:, None], 1.0, accept)  # [B, V]
    accept_prob = (q * accept).sum(-1)  # [B]
    leftover = pi - q * accept
    residual = np.where((1.0 - accept_prob)[:, None] > 1e-12, np.maximum(leftover, 0.0), pi)
    return accept, accept_prob, residual / residual.sum(-1, keepdims=True)


def solve(p, q, bound, *, blog_family: bool = False) -> MentoredSolution:
    """Optimal mentored-decoding rule (r, s) for target ``p`` and draft ``q`` under KL(p ‖ π) ≤ D.

    Args:
        p: target distribution(s), ``[V]`` or ``[B, V]`` (blog's ``q``).
        q: draft distribution(s), same shape (blog's ``p``).
        bound: D ≥ 0, scalar or ``[B]`` (blog's ``D``); ``np.inf`` allowed.
        blog_family: restrict to the blog's family (α ∈ ]0, 1], tokens with p = 0 never accepted
            unless KL(p ‖ q) ≤ D). Same answer except in the TARGET_ZERO range, where it is
            suboptimal; kept to show that gap.

    Returns a :class:`MentoredSolution`. Limiting cases: D = 0 gives the standard speculative rule
    r = min(1, p/q), s = norm(max(0, p − q)), π = p (blog α = β = 1); KL(p ‖ q) ≤ D gives r = 1,
    π = q. Convention for never-drafted tokens (q_i = 0): r_i = 1 if π_i > 0 else 0. When A = 1
    the residual is never used and is set to π.

    Raises:
        ValueError: shape mismatch, negative or non-finite entries, rows not summing to 1
            (tolerance 1e-6), D < 0 or NaN, or D of the wrong shape.
    """
    p, q = _check_distributions(p, q)
    single = p.ndim == 1
    p2, q2 = np.atleast_2d(p), np.atleast_2d(q)              # [B, V]
    batch = p2.shape[0]
    d = _check_bound(bound, batch)                            # [B]

    support = p2 > 0
    k0 = kl_divergence(p2, q2)                                # [B]  KL(p ‖ q), may be inf
    m0 = np.where(support, 0.0, q2).sum(-1)                   # [B]  draft mass where p = 0
    rows = _SortedRows(p2, q2)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = np.where(support, q2 / p2, np.nan)              # [B, V]
    rho_min, rho_max = np.nanmin(rho, -1), np.nanmax(rho, -1)

    lo = np.ones(batch)
    hi = np.ones(batch)
    regime = np.full(batch, CLIPPED)
    accept_all = d >= k0
    exact = (d == 0) & ~accept_all
    regime[accept_all] = ACCEPT_ALL

    # D1: KL at the smallest useful α (hi = max ρ, nothing cut from the top); π_Z = 0 there.
    hi_top = np.maximum(rho_max, 1.0)
    lo_top = rows.lower_level(m0 + rows.removed(hi_top))
    d1 = rows.kl(lo_top, np.full(batch, np.inf))
    todo = ~accept_all & ~exact

    # Step 1 — CLIPPED (D < D1): binary search on the blog's α ∈ [1/max ρ, 1], β from α.
    clipped = todo & (d < d1)
    if np.any(clipped):
        rows_c, m0_c = _subset(rows, clipped), m0[clipped]

        def lo_of(alpha):  # β from α: the mass cut above 1/α (plus m0) is raised below 1/β
            return rows_c.lower_level(m0_c + rows_c.removed(1.0 / alpha))

        alpha = _bisect(lambda a: rows_c.kl(lo_of(a), 1.0 / a),
                        np.ones(clipped.sum()), 1.0 / hi_top[clipped], d[clipped])
        hi[clipped], lo[clipped] = 1.0 / alpha, lo_of(alpha)

    # Step 2 — TARGET_ZERO (D1 ≤ D < KL(p‖q), only when m0 > 0): α = 0, binary search on β.
    tz = todo & ~clipped
    if blog_family:  # the blog's α bottoms out at 1/max ρ: acceptance stays at its D1 value
        lo[tz], hi[tz] = lo_top[tz], hi_top[tz]
        tz = np.zeros_like(tz)
    if np.any(tz):
        rows_t = _subset(rows, tz)
        inf = np.full(tz.sum(), np.inf)
        lam = _bisect(lambda x: rows_t.kl(x, inf), lo_top[tz], np.minimum(rho_min[tz], lo_top[tz]), d[tz])
        lo[tz], hi[tz] = lam, np.inf
        regime[tz] = TARGET_ZERO

    # Step 3 — π from the clip levels, then r = min(1, π/q) and s = (π − q r)/(1 − A).
    with np.errstate(invalid="ignore"):
        pi = np.where(support, p2 * np.clip(np.nan_to_num(rho, nan=0.0), lo[:, None], hi[:, None]), 0.0)
    theta = np.zeros(batch)
    if np.any(tz):
        added = rows.added(lo)
        theta = np.where(tz & (m0 > 0), np.clip((m0 - added) / np.where(m0 > 0, m0, 1.0), 0.0, 1.0), 0.0)
        pi = np.where(tz[:, None] & ~support, theta[:, None] * q2, pi)
    pi = np.where(exact[:, None], p2, pi)
    pi = np.where(accept_all[:, None], q2, pi)
    pi = pi / pi.sum(-1, keepdims=True)
    theta = np.where(accept_all & (m0 > 0), 1.0, theta)

    accept, accept_prob, residual = _accept_and_residual(pi, q2, accept_all)

    alpha_out = np.where(np.isfinite(hi), 1.0 / hi, 0.0)
    beta_out = 1.0 / lo
    alpha_out[accept_all], beta_out[accept_all] = 0.0, np.inf
    out = dict(
        accept=accept, residual=residual, pi=pi, accept_prob=accept_prob, kl=kl_divergence(p2, pi),
        bound=d, blog_alpha=alpha_out, blog_beta=beta_out, zero_target_accept=theta, regime=regime,
    )
    if single:
        out = {k: v[0] for k, v in out.items()}
    return MentoredSolution(**out)


def _subset(rows: _SortedRows, mask: np.ndarray) -> _SortedRows:
    sub = object.__new__(_SortedRows)
    for name in ("rho", "P", "Q", "P_tail", "Q_tail", "S", "n_support", "added_at"):
        setattr(sub, name, getattr(rows, name)[mask])
    return sub


# ------------------------------------------------------------------------------ sampling rules

def apply(accept, residual, draft_token, u_accept, u_residual):
    """Emit one token with the rule (r, s): keep the draft token x if u_accept < r[x], else s.

    Pure numpy; randomness is passed in (two uniforms in [0, 1) per row).

    Args:
        accept: r, ``[V]`` or ``[B, V]``.
        residual: s, same shape.
        draft_token: x drafted from q, ``[]`` or ``[B]`` (int).
        u_accept, u_residual: uniforms, ``[]`` or ``[B]``.

    Returns ``(token, accepted)`` with the leading shape of ``draft_token``. Sampling from s uses
    the inverse CDF, so tokens with s_i = 0 are never drawn.
    """
    r = np.atleast_2d(np.asarray(accept, dtype=np.float64))     # [B, V]
    s = np.atleast_2d(np.asarray(residual, dtype=np.float64))   # [B, V]
    x = np.atleast_1d(np.asarray(draft_token, dtype=np.int64))  # [B]
    ua = np.atleast_1d(np.asarray(u_accept, dtype=np.float64))  # [B]
    ur = np.atleast_1d(np.asarray(u_residual, dtype=np.float64))
    if r.shape != s.shape:
        raise ValueError(f"shape mismatch: accept {r.shape}, residual {s.shape}")
    batch = max(r.shape[0], x.shape[0])
    r, s = np.broadcast_to(r, (batch, r.shape[1])), np.broadcast_to(s, (batch, s.shape[1]))
    x, ua, ur = (np.broadcast_to(a, (batch,)) for a in (x, ua, ur))
    if np.any((x < 0) | (x >= r.shape[1])):
        raise ValueError("draft_token out of range")
    keep = ua < r[np.arange(batch), x]
    cdf = np.cumsum(s, axis=-1)                                  # [B, V]
    fallback = (cdf <= (ur * cdf[:, -1])[:, None]).sum(axis=-1)  # = searchsorted(cdf, u·total, "right")
    fallback = np.minimum(fallback, r.shape[1] - 1)
    token = np.where(keep, x, fallback)
    if np.ndim(draft_token) == 0 and np.ndim(accept) == 1:
        return int(token[0]), bool(keep[0])
    return token, keep


def verify(p, q, draft_tokens, u_accept, u_sample, bound):
    """One mentored speculative step for a single sequence (batch 1): ``(n_accepted, next_token)``.

    Args:
        p: target distributions ``[γ+1, V]`` at the γ draft positions and the bonus position.
        q: draft distributions ``[γ, V]``.
        draft_tokens: ``[γ]`` int.
        u_accept: ``[γ]`` uniforms for the accept tests.
        u_sample: one uniform for the token emitted after the accepted prefix: from the residual s
            at the first rejection, else the bonus token from p[γ] (the target itself, as in the
            blog's step 5; mentored decoding changes only the accept test and residual).
        bound: D for every position.

    Note: with D > 0 the emitted sequence follows π per position, not p.
    """
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    gamma = q.shape[0]
    if p.ndim != 2 or q.ndim != 2 or p.shape != (gamma + 1, q.shape[1]):
        raise ValueError(f"need p [γ+1, V] and q [γ, V]; got {p.shape} and {q.shape} (batch 1 only)")
    if gamma == 0:
        return 0, _inverse_cdf(p[0], u_sample)
    sol = solve(p[:gamma], q, bound)
    for i in range(gamma):
        x = int(draft_tokens[i])
        if not u_accept[i] < sol.accept[i, x]:
            return i, _inverse_cdf(sol.residual[i], u_sample)
    return gamma, _inverse_cdf(p[gamma], u_sample)


def _inverse_cdf(dist: np.ndarray, u: float) -> int:
    cdf = np.cumsum(dist)
    return int(min(np.searchsorted(cdf, u * cdf[-1], side="right"), dist.shape[-1] - 1))


# ----------------------------------------------------------------------- speed vs quality helpers

def expected_tokens_per_step(accept_prob, gamma):
    """(1 − a^{γ+1}) / (1 − a): tokens per target call with i.i.d. per-token acceptance a.

    Leviathan et al. (slides 003, eq. for E[#tokens]); γ + 1 at a = 1. Broadcasts.
    """
    a = np.asarray(accept_prob, dtype=np.float64)
    g = np.asarray(gamma, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (1.0 - a ** (g + 1)) / (1.0 - a)
    return np.where(np.isclose(a, 1.0), g + 1, out)


def walltime_improvement(accept_prob, gamma, cost_ratio):
    """(1 − a^{γ+1}) / ((1 − a)(γ c + 1)): expected speedup over plain sampling (slides 003 §3.3)."""
    return expected_tokens_per_step(accept_prob, gamma) / (np.asarray(gamma) * cost_ratio + 1.0)


def random_pair(rng: np.random.Generator, batch: int, vocab: int, *, logit_scale: float = 3.0,
                target_temperature: float = 0.8, draft_temperature: float = 1.3,
                draft_noise: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Synthetic (p, q) rows, ``[batch, vocab]`` each: a peaked target and a flatter, noisier draft.

    Logits z ~ N(0, logit_scale²); p = softmax(z / T_p); q = softmax((z + draft_noise·ε) / T_q)
    with ε ~ N(0, 1). An illustration of "a big model and a small one", not a measurement.
    """
    z = logit_scale * rng.standard_normal((batch, vocab))
    zd = z + draft_noise * rng.standard_normal((batch, vocab))
    return _softmax(z / target_temperature), _softmax(zd / draft_temperature)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def acceptance_curve(p, q, bounds, *, blog_family: bool = False, max_elements: int = 4_000_000) -> np.ndarray:
    """Optimal acceptance probability for each D in ``bounds``: ``[len(bounds)]`` or ``[len(bounds), B]``.

    Batched :func:`solve` calls over (D, row) pairs, at most ``max_elements`` entries per call.
    """
    bounds = np.asarray(bounds, dtype=np.float64).ravel()
    p2, q2 = np.atleast_2d(np.asarray(p, dtype=np.float64)), np.atleast_2d(np.asarray(q, dtype=np.float64))
    n_rows, vocab = p2.shape
    per_call = max(1, max_elements // (n_rows * vocab))  # bounds per solve call
    out = []
    for start in range(0, bounds.size, per_call):
        chunk = bounds[start:start + per_call]
        rep_p = np.broadcast_to(p2, (chunk.size, n_rows, vocab)).reshape(-1, vocab)  # [nD·B, V]
        rep_q = np.broadcast_to(q2, (chunk.size, n_rows, vocab)).reshape(-1, vocab)
        sol = solve(rep_p, rep_q, np.repeat(chunk, n_rows), blog_family=blog_family)
        out.append(sol.accept_prob.reshape(chunk.size, n_rows))
    accept = np.concatenate(out)
    return accept[:, 0] if np.ndim(p) == 1 else accept
