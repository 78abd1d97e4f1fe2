"""Acceptance rules over token trees: pure functions with the signature of ``acceptance.base``.

    tree_greedy         T = 0: the longest root path that follows the target's argmax          lossless at T = 0
    tree_sampling       recursive rejection sampling over siblings (SpecInfer, SpecTr)         lossless
    typical_acceptance  Medusa's entropy-scaled threshold on p (Cai et al. 2024)               LOSSY

On a chain (``parents = [−1, 0, …]``) ``tree_sampling`` and ``tree_greedy`` give the same ``(n, next_token)`` as
``chain.speculative_sampling`` and ``chain.greedy_match`` with the same uniforms (tested).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.tree import children
from ..core.warping import sample
from .base import TreeRule, TreeVerdict, check_tree_inputs


def tree_greedy(
    p: torch.Tensor,  # [N+1, V]
    q: torch.Tensor,  # [N, V]  (unused: only the tokens matter)
    tokens: torch.Tensor,  # [N]
    parents: torch.Tensor,  # [N]
    uniforms: torch.Tensor,  # [N+1] (unused)
) -> TreeVerdict:
    """T = 0 rule: accept the longest root path whose every token is the target's argmax after its parent.

    Among equally long paths the first in sibling order wins (lexicographically smallest node indices), which
    matters only when siblings repeat a token. The next token is the target's argmax after the path.
    This is Medusa's ``temperature == 0`` branch (Cai et al. 2024) on our tree layout.
    """
    check_tree_inputs(p, q, tokens, parents, uniforms)
    target = p.argmax(-1)  # [N+1]
    matches = tokens.long() == target[parents.long() + 1]  # [N]: node's token is the argmax after its parent
    path = _longest_path(parents.tolist(), matches.tolist())
    return TreeVerdict(path, int(target[_row_after(path)]))


def tree_sampling(
    p: torch.Tensor,  # [N+1, V]
    q: torch.Tensor,  # [N, V]
    tokens: torch.Tensor,  # [N]
    parents: torch.Tensor,  # [N]
    uniforms: torch.Tensor,  # [N+1]
) -> TreeVerdict:
    """Exact sampling from p over a draft tree by recursive rejection sampling over siblings.

    SpecInfer's multi-step speculative sampling (Miao et al. 2023), in the multi-draft setting of SpecTr (Sun et
    al. 2023, whose own k-sequential rule scales the acceptance test differently). Start at the root with
    residual r = p row 0. At a node, try its children c in index order: accept c's token x when
    ``u_c·q_c(x) < r(x)`` (probability min(1, r(x)/q_c(x)); written as the chain rule writes it, so a token with
    r(x) = 0 is never accepted, even at u = 0), else set r ← norm(max(0, r − q_c)) and try the next sibling. On
    acceptance descend into c with r = p row c+1. When every child is rejected, or there is none, draw the next
    token from r with uniforms[N].

    Why it is exact. Claim: at a node with residual r, the token emitted there (an accepted child's token or
    the final draw) is distributed as r. By induction on the number k of children left. k = 0: drawn from r.
    k ≥ 1: the first child c is accepted with token x with probability q_c(x)·min(1, r(x)/q_c(x)) = min(r, q_c)(x)
    and rejected with probability 1 − Σ min(r, q_c) = Σ (r − q_c)₊; given its rejection (and whatever its token
    was) the remaining siblings emit from r' = norm((r − q_c)₊) by induction, because each q row is the law of
    its token given the ancestors and earlier siblings. So
        P(x) = min(r, q_c)(x) + (1 − Σ min(r, q_c))·norm((r − q_c)₊)(x) = min(r, q_c)(x) + (r − q_c)₊(x) = r(x).
    At the root r = p(·|context); after accepting x the procedure restarts from p(·|context, x) with fresh
    uniforms, so the committed sequence follows p. This holds for any tree whose q rows are those conditionals:
    i.i.d. siblings (q row = the draft distribution, repeats allowed), siblings sampled without replacement (q row
    renormalised without the earlier siblings' tokens) and deterministic top-k siblings (one-hot q rows).
    If r − q_c ≤ 0 everywhere then r = q_c up to rounding, rejection had probability 0, and r is kept (the
    chain rule keeps p in the same case).
    """
    n = check_tree_inputs(p, q, tokens, parents, uniforms)
    p, q = p.double(), q.double()  # [N+1, V], [N, V]
    u = uniforms.double().tolist()  # [N+1]
    path: list[int] = []
    node, residual = -1, p[0]  # residual [V]
    while True:
        accepted, residual = _first_accepted_child(node, residual, q, tokens, parents, u)
        if accepted is None:
            return TreeVerdict(path, sample(residual, u[n]))
        path.append(accepted)
        node, residual = accepted, p[accepted + 1]


def _first_accepted_child(
    node: int,
    residual: torch.Tensor,  # [V] float64, the target's (residual) distribution at `node`
    q: torch.Tensor,  # [N, V] float64
    tokens: torch.Tensor,  # [N]
    parents: torch.Tensor,  # [N]
    u: list[float],  # [N+1]
) -> tuple[int | None, torch.Tensor]:
    """Try the children of ``node`` in index order; return the accepted one (or None) and the residual left."""
    for child in children(parents, node):
        x = int(tokens[child])
        if u[child] * float(q[child, x]) < float(residual[x]):
            return child, residual
        residual = _residual_after_rejection(residual, q[child])
    return None, residual


def _residual_after_rejection(
    r: torch.Tensor,  # [V] float64
    q_child: torch.Tensor,  # [V] float64
) -> torch.Tensor:  # [V]
    """norm(max(0, r − q)): the target mass a rejected draw from q leaves to the next sibling or the final draw."""
    left = (r - q_child).clamp_min(0.0)  # [V]
    mass = left.sum()
    if mass <= 0:
        # Only when r == q up to rounding, where rejection has probability 0: keep r, as the chain rule keeps p.
        return r
    return left / mass


@dataclass(frozen=True)
class TypicalParams:
    """Parameters of Medusa's typical acceptance (Cai et al. 2024, "Typical Acceptance").

    Names follow the paper; the Medusa repository's names are in brackets, its defaults are kept.
    """

    epsilon: float = 0.09  # ε, hard probability threshold [posterior_threshold]
    delta: float = 0.3  # δ, scale of the entropy-dependent threshold δ·exp(−H) [posterior_alpha; "≈ √ε"]
    entropy_smoothing: float = 1e-5  # H = −Σ p·log(p + s), as the Medusa repository computes it; 0 = exact H

    def __post_init__(self):
        if self.epsilon < 0 or self.delta < 0 or self.entropy_smoothing < 0:
            raise ValueError(f"typical acceptance needs epsilon, delta, entropy_smoothing >= 0, got {self}")


def typical_thresholds(
    p: torch.Tensor,  # [R, V]
    params: TypicalParams = TypicalParams(),
) -> torch.Tensor:  # [R] float64
    """min(ε, δ·exp(−H(p_row))) for each row: a token x after that row is acceptable when p_row(x) exceeds it."""
    p = p.double()
    entropy = -torch.special.xlogy(p, p + params.entropy_smoothing).sum(-1)  # [R]; 0·log 0 = 0
    return (params.delta * torch.exp(-entropy)).clamp_max(params.epsilon)


def typical_acceptance(
    p: torch.Tensor,  # [N+1, V]
    q: torch.Tensor,  # [N, V]  (unused: the test looks at p only)
    tokens: torch.Tensor,  # [N]
    parents: torch.Tensor,  # [N]
    uniforms: torch.Tensor,  # [N+1]: only uniforms[N] is used
    params: TypicalParams = TypicalParams(),
) -> TreeVerdict:
    """LOSSY. Medusa's typical acceptance (Cai et al. 2024, "Medusa", "Typical Acceptance"; ``evaluate_posterior`` in
    FasterDecoding/Medusa): node i with token x is acceptable when p_parent(x) > min(ε, δ·exp(−H(p_parent))),
    p_parent being the target row after i's parent. Accept the longest root path of acceptable nodes (ties:
    first in sibling order), then draw the next token from the target row after the path with uniforms[N].

    The committed tokens are NOT distributed as p: any token above the threshold is kept whatever its
    probability, so typical acceptance trades fidelity for acceptance and is never a default.
    Differences from the repository: it breaks ties between longest candidates by their likelihood under p, and
    its fast path takes the argmax of the target row after the path as the next token; here ties go to the
    first in sibling order and the next token is sampled from the (already warped) p row.
    """
    n = check_tree_inputs(p, q, tokens, parents, uniforms)
    rows = parents.long() + 1  # [N]: row of p after each node's parent
    p_parent = p.double()[rows, tokens.long()]  # [N]
    acceptable = p_parent > typical_thresholds(p, params)[rows]  # [N]
    path = _longest_path(parents.tolist(), acceptable.tolist())
    return TreeVerdict(path, sample(p[_row_after(path)], uniforms[n]))


def _longest_path(parents: list[int], ok: list[bool]) -> list[int]:
    """Longest root path of nodes that are all ``ok``; among equally long ones the first in sibling order."""
    paths: dict[int, list[int]] = {-1: []}  # node -> its root path, for nodes reached through ok nodes only
    for node, parent in enumerate(parents):  # parents[i] < i: a parent's path is known before its children's
        if ok[node] and parent in paths:
            paths[node] = paths[parent] + [node]
    return min(paths.values(), key=lambda path: (-len(path), path))


def _row_after(path: list[int]) -> int:
    """Row of p after the path's last node (0, the root's row, for an empty path)."""
    return path[-1] + 1 if path else 0


RULES: dict[str, TreeRule] = {  # this file's rules; acceptance.TREE_RULES gathers every family
    "greedy": TreeRule("greedy", lossless=True, fn=tree_greedy),  # exact only at T = 0 (one-hot p)
    "exact": TreeRule("exact", lossless=True, fn=tree_sampling),
    "typical": TreeRule("typical", lossless=False, fn=typical_acceptance, params=TypicalParams()),
}
