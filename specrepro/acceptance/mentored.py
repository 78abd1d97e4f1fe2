"""Mentored decoding as a chain rule: the KL-bounded optimal lossy acceptance (blog 001). LOSSY unless D = 0.

Blog *An optimal lossy variant of speculative decoding* (seed 001, §"Mentored decoding" and §"Solving the
optimization problem"). Per verified position, accept the drafted token with the largest probability any rule
can have while the emitted token's law π stays within D nats of the target: KL(p ‖ π) ≤ D (the direction of the
seeds README's trap). D = 0 is speculative sampling (π = p, lossless); D > 0 trades fidelity for acceptance.

Letters. specrepro writes **p = target, q = draft**; the blog swaps them and uses α, β for its two constants:

=====================  ==========================  ============================================
blog                   here                        meaning
=====================  ==========================  ============================================
``q_i``                ``p[i]``                    target probability of token i
``p_i``                ``q[i]``                    draft probability of token i
``r_i``                ``accept[i]`` (r)           probability of keeping a drafted token i
``s_i``                ``residual[i]`` (s)         distribution drawn from on rejection
``π_i``                π                           law of the emitted token, q∘r + (1 − A)s
``Σ_i p_i r_i``        ``accept_prob`` (A)         probability that the drafted token is kept
``α`` (in ]0, 1])      1 / ``hi``                  upper clip: r = min(1, p / (α q))
``β`` (≥ 1)            1 / ``lo``                  lower clip: s ∝ max(0, p / β − q)
``D``                  ``kl_bound``                bound on KL(target ‖ π)
=====================  ==========================  ============================================

Problem: maximise A = Σ_i q_i r_i over r ∈ [0, 1]^V and s in the simplex, subject to KL(p ‖ π) ≤ D. With
ρ = q / p (draft/target ratio) the optimum is π = p · clip(ρ, lo, hi), lo ≤ 1 ≤ hi, then r = min(1, π / q) and
s ∝ (π − q r)^+. Three regimes, as in the numpy reference ``simulations.mentored`` (whose docstring derives
them and whose tests check them against a generic optimiser):

- CLIPPED (the blog's): binary search on α = 1/hi ∈ [1/max ρ, 1]; lo follows from hi because the mass cut above
  hi (plus the draft's mass m0 on tokens the target gives 0, never accepted here) is raised below lo;
- TARGET_ZERO (m0 > 0, D between the KL at α = 1/max ρ and KL(p ‖ q); the blog misses it): no upper clip, binary
  search on lo; drafted tokens with p = 0 are accepted with one common probability θ;
- ACCEPT_ALL (the blog's shortcut KL(p ‖ q) ≤ D): r = 1, π = q.

Cost per row (the blog's vectorised precomputation): one sort by ρ and partial sums of p, q and p·ln(p/q) in that
order; the KL of any clip levels then costs O(log V) (``torch.searchsorted``). The binary search tries 64 levels
per step (``GRID``), so ~9 steps of a few kernel calls reach adjacent doubles, batched over rows, float64, on p's
device; the search keeps the feasible end, so the bound holds up to rounding.

One correction to the reference: when the draft gives 0 to a token the target allows (ρ = 0) and m0 = 0, the
reference evaluates the KL at lo = 0 as finite and returns π = q with KL(p ‖ π) = ∞; here that KL is ∞, so such
rows stay in the CLIPPED regime and meet the bound.

The rule (``mentored``) verifies a chain: draft i is kept with probability r_i(x_i) (uniforms[i]); at the first
rejection the next token is drawn from s_i (uniforms[N]); after N acceptances the bonus comes from p's last row,
as in speculative sampling. The blog's first shortcut saves solves: r ≥ min(1, p/q) always, so a draft that
speculative sampling's own test keeps (u·q(x) < p(x)) is kept without solving its row; only the others are solved,
in one batch. At D = 0 the solved rows are r = min(1, p/q) and s ∝ (p − q)^+ on the rows as given, so the verdict
is ``speculative_sampling``'s with the same uniforms.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..core.warping import sample
from .base import TreeRule, TreeVerdict, check_chain_inputs

GRID = 64  # levels tried per search step: the bracket shrinks 65-fold, so ~9 steps reach adjacent doubles
SEARCH_STEPS = 200  # cap (a bracket reaching down to 0 may need more steps than one inside [1e-3, 1])
_NO_REJECTION = 1e-12  # 1 − A below this: rejection never happens in practice, the residual is set to π


@dataclass(frozen=True)
class MentoredParams:
    """The blog's bound D on KL(target ‖ emitted law) per verified position, in nats."""

    kl_bound: float = 0.1  # D: 0 is speculative sampling (lossless); larger keeps more drafts and drifts from p

    def __post_init__(self):
        if isinstance(self.kl_bound, bool) or not isinstance(self.kl_bound, (int, float)) \
                or not 0.0 <= self.kl_bound < math.inf:
            raise ValueError(f"kl_bound (D, a bound on KL(p ‖ π) in nats) must be a finite number >= 0, "
                             f"got {self.kl_bound!r}")


class RowSolution(NamedTuple):
    accept: torch.Tensor  # [R, V] r: probability of keeping a drafted token (blog r_i)
    residual: torch.Tensor  # [R, V] s: distribution drawn from on rejection (blog s_i)
    accept_prob: torch.Tensor  # [R] A = Σ q r (blog Σ_i p_i r_i)
    pi: torch.Tensor  # [R, V] π, the law of the emitted token the rule keeps within KL(p ‖ π) ≤ D (as the twin's)


class _SortedRows:
    """Partial sums of p, q and p·ln(p/q) in increasing order of ρ = q/p, per row (the blog's precomputation).

    Tokens with p = 0 go last with ρ = +inf and weight 0. ``P[:, k]``, ``Q[:, k]``, ``S[:, k]``: sums over the first
    k sorted tokens, k = 0..V. Every query takes K candidate levels per row, x [R, K], and answers [R, K].
    """

    def __init__(self, p: torch.Tensor, q: torch.Tensor, rho: torch.Tensor, plogpq: torch.Tensor):
        # p, q [R, V] float64 rows summing to 1; rho [R, V] = q/p, +inf where p = 0; plogpq [R, V] = p ln(p/q), 0 where
        # q = 0 (those tokens have ρ = 0, below any lo > 0, so they never enter a partial sum of S)
        support = p > 0
        self.rho, order = torch.sort(rho, dim=-1, stable=True)  # [R, V] ascending
        zero = p.new_zeros(p.shape[0], 1)
        p_sorted, q_sorted = p.gather(-1, order), torch.where(support, q, 0.0).gather(-1, order)  # [R, V]
        self.P = torch.cat([zero, p_sorted.cumsum(-1)], -1)  # [R, V+1]
        self.Q = torch.cat([zero, q_sorted.cumsum(-1)], -1)  # [R, V+1]
        # The sums over the last V − k sorted tokens, summed from the top: the upper clip multiplies them by hi, which
        # reaches 1e9 where p is tiny, and 1 − P[:, k] would bring P's rounding (~1e-16) up to 1e-7 of mass, so that π
        # missed summing to 1 by 4e-6 and broke its bound by as much (seen on 49,152-token rows at D = 3)
        self.P_tail = torch.cat([p_sorted.flip(-1).cumsum(-1).flip(-1), zero], -1)  # [R, V+1]
        self.Q_tail = torch.cat([q_sorted.flip(-1).cumsum(-1).flip(-1), zero], -1)  # [R, V+1]
        self.S = torch.cat([zero, plogpq.gather(-1, order).cumsum(-1)], -1)  # [R, V+1]
        self.n_support = support.sum(-1, keepdim=True)  # [R, 1]
        self.has_zero_ratio = (support & (q == 0)).any(-1, keepdim=True)  # [R, 1] q = 0 < p somewhere
        # added mass at each breakpoint ρ_j: Σ_{ρ_i<ρ_j} (ρ_j p_i − q_i), non-decreasing in j
        self.added_at = torch.where(self.rho.isfinite(), self.rho * self.P[:, 1:] - self.Q[:, 1:], torch.inf)

    def subset(self, rows: torch.Tensor) -> "_SortedRows":
        sub = object.__new__(_SortedRows)
        for name in ("rho", "P", "Q", "P_tail", "Q_tail", "S", "n_support", "has_zero_ratio", "added_at"):
            setattr(sub, name, getattr(self, name)[rows])
        return sub

    def removed(self, hi: torch.Tensor) -> torch.Tensor:  # [R, K] -> [R, K]
        """Mass Σ_{ρ_i>hi} (q_i − hi·p_i) the upper clip cuts from the high-ratio tokens."""
        k = torch.searchsorted(self.rho, hi, right=True)  # tokens with ρ ≤ hi
        p_above = self.P_tail.gather(-1, k)
        q_above = self.Q_tail.gather(-1, k)
        return torch.where(p_above > 0, (q_above - hi * p_above).clamp_min(0.0), 0.0)

    def lower_level(self, mass: torch.Tensor) -> torch.Tensor:  # [R, K] -> [R, K]
        """The lo with Σ_{ρ_i<lo} (lo·p_i − q_i) = mass ≥ 0, exact on its segment between breakpoints."""
        k = torch.searchsorted(self.added_at, mass, right=True)
        k = torch.minimum(k.clamp_min(1), self.n_support)
        return (mass + self.Q.gather(-1, k)) / self.P.gather(-1, k)

    def added(self, lo: torch.Tensor) -> torch.Tensor:  # [R, K] -> [R, K]
        """Mass Σ_{ρ_i<lo} (lo·p_i − q_i) the lower clip raises on the low-ratio tokens."""
        k = torch.searchsorted(self.rho, lo)
        return (lo * self.P.gather(-1, k) - self.Q.gather(-1, k)).clamp_min(0.0)

    def kl(self, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:  # [R, K], [R, K] -> [R, K]
        """KL(p ‖ p·clip(ρ, lo, hi)) = −P_below ln lo − P_above ln hi + Σ_middle p ln(p/q); ∞ if π_i = 0 < p_i."""
        k_lo = torch.searchsorted(self.rho, lo)  # ρ < lo
        k_hi = torch.searchsorted(self.rho, hi, right=True)  # ρ ≤ hi
        p_below = self.P.gather(-1, k_lo)
        p_above = self.P_tail.gather(-1, k_hi)
        below = torch.where(p_below > 0, -p_below * lo.log(), 0.0)
        above = torch.where(hi.isfinite() & (p_above > 0), -p_above * hi.log(), 0.0)
        kl = below + above + self.S.gather(-1, k_hi) - self.S.gather(-1, k_lo)
        # lo = 0 leaves the tokens with ρ = 0 at π = 0 < p: the reference misses this infinity
        return torch.where((lo <= 0) & self.has_zero_ratio, torch.inf, kl)


def _search(kl_of, feasible: torch.Tensor, infeasible: torch.Tensor, bound: torch.Tensor) -> torch.Tensor:
    """The blog's binary search, GRID points per step: shrink [infeasible, feasible] (columns [R, 1]) where
    kl_of is monotone, and return the end with kl_of ≤ bound. GRID = 1 is plain bisection; 64 makes one step
    worth six halvings for the same few kernel calls, which is what a row's cost is made of."""
    eps = torch.finfo(torch.float64).eps
    frac = torch.arange(1, GRID + 1, dtype=torch.float64, device=feasible.device) / (GRID + 1)  # [K]
    for _ in range(SEARCH_STEPS):
        grid = feasible + (infeasible - feasible) * frac  # [R, K], from the feasible end to the infeasible one
        n_ok = (kl_of(grid) <= bound).cumprod(-1).sum(-1, keepdim=True)  # [R, 1] feasible points before the first fail
        feasible = torch.where(n_ok > 0, grid.gather(-1, (n_ok - 1).clamp_min(0)), feasible)
        infeasible = torch.where(n_ok < GRID, grid.gather(-1, n_ok.clamp_max(GRID - 1)), infeasible)
        if bool(((feasible - infeasible).abs() <= 4 * eps * feasible.abs()).all()):
            break
    return feasible


def _check_rows(p: torch.Tensor, q: torch.Tensor, bound) -> torch.Tensor:
    if p.dim() != 2 or p.shape != q.shape or p.shape[1] == 0:
        raise ValueError(f"expected p [R, V] and q [R, V] with V >= 1; got p {tuple(p.shape)}, q {tuple(q.shape)}")
    for name, x in (("target p", p), ("draft q", q)):
        if not bool(torch.isfinite(x).all()) or bool((x < 0).any()) or bool((x.sum(-1) <= 0).any()):
            raise ValueError(f"{name} must have finite, non-negative entries and rows with positive mass")
    d = torch.as_tensor(bound, dtype=torch.float64, device=p.device)
    if d.dim() > 1 or (d.dim() == 1 and d.shape[0] != p.shape[0]):
        raise ValueError(f"bound D must be a number or a tensor [R = {p.shape[0]}], got shape {tuple(d.shape)}")
    if bool(torch.isnan(d).any()) or bool((d < 0).any()):
        raise ValueError(f"bound D (on KL(p ‖ π), nats) must be >= 0, got {d.tolist()}")
    return d.expand(p.shape[0])


def solve_rows(
    p: torch.Tensor,  # [R, V] target rows (blog q)
    q: torch.Tensor,  # [R, V] draft rows (blog p)
    bound: float | torch.Tensor,  # D, a number or [R]; ∞ allowed
) -> RowSolution:
    """The optimal mentored rule per row: (accept r [R, V], residual s [R, V], accept_prob A [R]), float64.

    The torch twin of ``simulations.mentored.solve`` (same regimes, same binary searches; module docstring), with
    its one correction. Rows are renormalised in float64 first. Rows with D = 0 are speculative sampling on the
    rows as given: r = min(1, p/q), s ∝ (p − q)^+ (p itself when p = q). A drafted-never token (q_i = 0) gets
    r_i = 1 if π_i > 0 else 0; when A = 1 to within 1e-12 the residual is π.
    """
    d = _check_rows(p, q, bound)[:, None]  # [R, 1]
    p_in, q_in = p.double(), q.double()  # [R, V]
    p, q = p_in / p_in.sum(-1, keepdim=True), q_in / q_in.sum(-1, keepdim=True)
    support = p > 0  # [R, V]
    plogpq = torch.where(support, p * (p.log() - q.log()), 0.0)  # [R, V]; +inf where q = 0 < p
    kl_pq = plogpq.sum(-1, keepdim=True)  # [R, 1] KL(p ‖ q)
    m0 = torch.where(support, 0.0, q).sum(-1, keepdim=True)  # [R, 1] draft mass where the target has none
    rho = torch.where(support, q / p, torch.inf)  # [R, V]

    accept_all = d >= kl_pq  # [R, 1] the blog's shortcut
    exact = (d == 0) & ~accept_all  # [R, 1]
    todo = (~accept_all & ~exact)[:, 0]  # [R]
    lo, hi = torch.ones_like(d), torch.ones_like(d)  # [R, 1] clip levels, 1/β and 1/α
    target_zero = torch.zeros_like(exact)  # [R, 1]
    if bool(todo.any()):
        rows = _SortedRows(p[todo], q[todo], rho[todo], plogpq[todo].nan_to_num(posinf=0.0))
        d_t, m0_t = d[todo], m0[todo]  # [T, 1] columns
        # D1: the KL at the blog's smallest α (hi = max ρ, nothing cut from the top; π = 0 where p = 0)
        hi_top = torch.where(support[todo], rho[todo], 0.0).amax(-1, keepdim=True).clamp_min(1.0)
        lo_top = rows.lower_level(m0_t + rows.removed(hi_top))
        no_clip = torch.full_like(lo_top, torch.inf)
        d1 = rows.kl(lo_top, no_clip)
        lo_t, hi_t = lo_top.clone(), no_clip.clone()

        # 1. CLIPPED (D < D1): search the blog's α ∈ [1/max ρ, 1]; β follows from α by normalisation.
        clipped = (d_t < d1)[:, 0]
        if bool(clipped.any()):
            rows_c, m0_c = rows.subset(clipped), m0_t[clipped]

            def lo_of(alpha):  # the mass cut above 1/α, plus m0, is raised below 1/β
                return rows_c.lower_level(m0_c + rows_c.removed(1.0 / alpha))

            alpha = _search(lambda a: rows_c.kl(lo_of(a), 1.0 / a),
                            torch.ones_like(m0_c), 1.0 / hi_top[clipped], d_t[clipped])
            lo_t[clipped], hi_t[clipped] = lo_of(alpha), 1.0 / alpha

        # 2. TARGET_ZERO (D1 ≤ D < KL(p ‖ q), needs m0 > 0): no upper clip, search lo = 1/β.
        tz = ~clipped
        if bool(tz.any()):
            rows_z = rows.subset(tz)
            rho_min = rows_z.rho[:, :1]  # the smallest ratio on the support
            lo_t[tz] = _search(lambda x: rows_z.kl(x, torch.full_like(x, torch.inf)), lo_top[tz],
                               torch.minimum(rho_min, lo_top[tz]), d_t[tz])
        lo[todo], hi[todo] = lo_t, hi_t
        target_zero[todo] = tz[:, None]

    # 3. π from the clip levels; tokens with p = 0 get θ·q in TARGET_ZERO (θ: the share of m0 not moved below lo).
    pi = torch.where(support, p * torch.minimum(torch.maximum(rho, lo), hi), 0.0)  # [R, V]
    if bool(target_zero.any()):
        moved = torch.zeros_like(d)  # [R, 1]
        moved[todo] = rows.added(lo[todo])
        theta = ((m0 - moved) / torch.where(m0 > 0, m0, 1.0)).clamp(0.0, 1.0)  # [R, 1]
        pi = torch.where(target_zero & ~support, theta * q, pi)
    pi = torch.where(accept_all, q, pi)
    pi = pi / pi.sum(-1, keepdim=True)
    pi = torch.where(exact, p_in, pi)  # D = 0: the target row exactly as given

    # 4. r = min(1, π/q), s = (π − q r)^+ / (1 − A).
    q_used = torch.where(exact, q_in, q)  # [R, V]
    accept = torch.where(q_used > 0, (pi / q_used).clamp_max(1.0), (pi > 0).double())
    accept = torch.where(accept_all, 1.0, accept)
    accept_prob = (q * accept).sum(-1).clamp_max(1.0)  # [R]
    leftover = (pi - q_used * accept).clamp_min(0.0)  # [R, V]
    use_pi = (leftover.sum(-1) <= 0) | (~exact[:, 0] & (1.0 - accept_prob <= _NO_REJECTION))  # [R]
    residual = torch.where(use_pi[:, None], pi, leftover)
    return RowSolution(accept, residual / residual.sum(-1, keepdim=True), accept_prob, pi)


def mentored(
    p: torch.Tensor,  # [N+1, V]
    q: torch.Tensor,  # [N, V]
    tokens: torch.Tensor,  # [N]
    parents: torch.Tensor,  # [N], a chain: [−1, 0, …, N−2]
    uniforms: torch.Tensor,  # [N+1]
    params: MentoredParams = MentoredParams(),
) -> TreeVerdict:
    """LOSSY for D > 0 (lossless at D = 0). Mentored decoding on a draft chain (blog 001; module docstring).

    n = min({i | uniforms[i] ≥ r_i(x_i)} ∪ {N}), r_i the optimal acceptance of row i under KL(p_i ‖ π_i) ≤ D;
    the next token is drawn with uniforms[N] from the residual s_n if n < N, else from p[N] (the bonus).
    """
    n = check_chain_inputs(p, q, tokens, parents, uniforms, "mentored decoding")
    at = torch.arange(n, device=p.device)
    x = tokens.long().to(p.device)
    u = uniforms[:n].double().to(p.device)  # [N]
    kept = u * q[at, x].double() < p[at, x].double()  # [N] speculative sampling keeps these; r ≥ min(1, p/q)
    unsure = (~kept).nonzero().flatten()  # [M] rows to solve
    if unsure.numel():
        solution = solve_rows(p[unsure], q[unsure], params.kl_bound)
        kept[unsure] = u[unsure] < solution.accept[torch.arange(unsure.numel(), device=p.device), x[unsure]]
    rejected = (~kept).nonzero()
    first = int(rejected[0]) if rejected.numel() else n
    if first == n:
        return TreeVerdict(list(range(n)), sample(p[n], uniforms[n]))
    row = int((unsure == first).nonzero()[0])
    return TreeVerdict(list(range(first)), sample(solution.residual[row], uniforms[n]))


MENTORED_RULE = TreeRule("mentored", lossless=False, fn=mentored, params=MentoredParams())
