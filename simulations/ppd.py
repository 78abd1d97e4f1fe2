"""Dynamic sparse tree theory of Parallel Prompt Decoding (PPD paper 002, §4).

A PPD step feeds the target the last token (the *root*), a tree of candidate tokens guessed by the
previous step's prompt tokens, and a few prompt tokens appended to every node. If the accepted path
ends at node c, the prompt tokens attached to c predict the next step's candidates, so the number of
prompt tokens at c is the depth of the next candidate tree: the tree lives in m *states*
T_1..T_m (Definition 4.1), C(T_k) = the candidates of T_k, of depth ≤ k.

Representation (plain data). A candidate is a *path* of 0-based top-k ranks from the root, e.g.
``(0, 2)`` = "top-1 guess at distance 1, then top-3 guess at distance 2". A state is a
:class:`TreeState` (paths, prompt tokens per path); a :class:`DynamicSparseTree` holds T_1..T_m and
the number of prompt tokens on the root (``root_prompts``, default m). Tree size ``n = n_c + n_p``
counts candidates and their prompt tokens, not the root and its prompt tokens — this reproduces
Table 1's input lengths: state 1 of Vicuna-7B has 10 candidates × (1 + 3 prompts) = 40.

Acceptance model. ``rank_probs[d, k]`` is the probability that the ground-truth token at distance
d+1 is exactly the (k+1)-th guess of its prompt token: the increments of the per-depth top-k
accuracies of Fig. 6 / Tables 2–8. As in the paper (Prop. 4.1 multiplies p_i along a path), ranks at
different depths are taken as independent, and a path is accepted iff every rank on it is right
(exact-match verification), so at most one node per depth is accepted.

Formulas (the paper's names):

* f(T)  — Prop. 4.1: expected accepted candidates, Σ_{v∈C(T)} Π_{i∈Path(v)} p_i. The step also emits
  one token from the target itself, so tokens per step = 1 + f.
* p(s_j | s_k) — transition probabilities: Σ of P(c is the *last* accepted node) over candidates c
  of T_k with j prompt tokens, plus P(nothing accepted) for j = root_prompts.
* F(T_k) — Prop. 4.2: f(T_k) + Σ_i p(s_i | s_k) f(T_i) (current and next step).
* ΔF — Prop. 4.3: removing one of the i > 1 prompt tokens at c costs p(c)·(f(T_i) − f(T_{i−1})).
  p(c) here is P(c is the last accepted node) = P(path to c right) − Σ_children P(child right):
  the exact change of F; the paper calls it "the acceptance probability of candidate c".
* R(T)  — Prop. 4.4: Σ_i p(s_i) f(T_i), p(s_i) the steady state of the transitions (long-run
  average from the state after prefill, root_prompts). Accept length τ = 1 + R.
* c(n_c, n_p) = max R(T) over trees with |C(T)| = n_c, |T| = n_c + n_p; hardware-aware size:
  the n maximising Speedup(n) = τ(n) / L_fp(n) (§4.2 "Hardware-awareness").

Construction (§4.2 steps 1–3): (1) per state, the optimal candidate tree of n_c nodes and depth ≤ k
(top-n_c paths by probability — optimal because a child's probability never exceeds its parent's,
the Medusa/Sequoia argument); (2) m prompt tokens on every candidate; (3) remove prompt tokens
greedily by smallest ΔF until the size fits, keeping ≥ 1 per candidate (Prop. 4.3 assumes i > 1).
The candidate counts per state are searched: exhaustively (the paper's "all combinations") or, for
large n, by coordinate ascent (tests check they agree on small cases).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

__all__ = [
    "Path", "TreeState", "DynamicSparseTree", "PAPER_TOPK_ANCHORS", "PAPER_TABLE1",
    "rank_probabilities", "topk_from_anchors", "path_probability", "expected_tokens",
    "last_accepted_probabilities", "transition_matrix", "steady_state", "two_step_tokens",
    "amortized_tokens", "accept_length", "accept_length_curve", "prompt_removal_loss", "optimal_candidate_tree",
    "allocate_prompts", "build_tree", "optimal_tree", "static_tree", "random_tree",
    "simulate_steps", "simulate_accepted", "theoretical_speedup", "scan_tree_sizes", "best_tree_size",
    "linear_latency", "roofline_latency",
]

Path = tuple[int, ...]

# Per-depth top-k accuracies the paper prints (Appendix B, Tables 3, 4, 5, 8 baseline row: PPD,
# 1 EPT, KD, 12 epochs, batch 4, Alpaca, 20 steps). '@i' is the token distance i = tree depth i.
PAPER_TOPK_ANCHORS = {1: {1: 0.485, 5: 0.779}, 2: {1: 0.261, 5: 0.586}}

# Table 1 (PPD rows): accept length τ, forward latency L_fp (s) of PPD and of vanilla decoding,
# candidates per state S_tr and input length per state S_input.
PAPER_TABLE1 = {
    "MobileLLaMA": dict(tau=2.43, latency=0.022, vanilla_latency=0.020, s_tr=(10, 84, 89), s_input=(40, 285, 285)),
    "Vicuna-7B": dict(tau=2.54, latency=0.029, vanilla_latency=0.026, s_tr=(10, 33, 34), s_input=(40, 105, 105)),
    "Vicuna-13B": dict(tau=2.44, latency=0.0379, vanilla_latency=0.0330, s_tr=(10, 20, 20), s_input=(40, 60, 60)),
}


@dataclass(frozen=True)
class TreeState:
    """One state T_k: candidate paths (prefix-closed, ranks 0-based) and prompt tokens per path."""

    paths: tuple[Path, ...]
    prompts: tuple[int, ...]

    def __post_init__(self):
        if len(self.paths) != len(self.prompts):
            raise ValueError("one prompt count per candidate path is needed")
        seen = set(self.paths)
        if len(seen) != len(self.paths):
            raise ValueError("duplicate candidate path")
        for path in self.paths:
            if len(path) == 0 or any(r < 0 for r in path):
                raise ValueError(f"bad candidate path {path!r}")
            if len(path) > 1 and path[:-1] not in seen:
                raise ValueError(f"candidate {path!r} has no parent in the tree (not prefix-closed)")
        if any(k < 1 for k in self.prompts):
            raise ValueError("every candidate keeps at least one prompt token")

    @property
    def n_candidates(self) -> int:
        return len(self.paths)

    @property
    def n_prompts(self) -> int:
        return int(sum(self.prompts))

    @property
    def size(self) -> int:
        """n = n_c + n_p (the root and its prompt tokens are not counted)."""
        return self.n_candidates + self.n_prompts

    @property
    def depth(self) -> int:
        return max((len(p) for p in self.paths), default=0)


@dataclass(frozen=True)
class DynamicSparseTree:
    """T_1..T_m (``states[k-1]`` is T_k) and the root's prompt tokens (next state when nothing is accepted)."""

    states: tuple[TreeState, ...]
    root_prompts: int

    def __post_init__(self):
        m = len(self.states)
        if m == 0:
            raise ValueError("need at least one state")
        if not 1 <= self.root_prompts <= m:
            raise ValueError(f"root_prompts must be in 1..{m}")
        for k, state in enumerate(self.states, start=1):
            if state.depth > k:
                raise ValueError(f"state T_{k} has candidates of depth {state.depth} > {k}")
            if any(j > m for j in state.prompts):
                raise ValueError(f"state T_{k} has a candidate with more than m = {m} prompt tokens")

    @property
    def m(self) -> int:
        return len(self.states)


# ---------------------------------------------------------------------------- accuracies → ranks

def rank_probabilities(topk_accuracy) -> np.ndarray:
    """Per-depth top-k accuracies ``[depth, K]`` (cumulative, col k = top-(k+1)) → rank probabilities.

    ``out[d, k] = acc[d, k] − acc[d, k−1]``: P(the truth at distance d+1 is exactly guess k+1).
    """
    acc = np.asarray(topk_accuracy, dtype=np.float64)
    if acc.ndim != 2:
        raise ValueError(f"top-k accuracies must be [depth, K], got shape {acc.shape}")
    if np.any(acc < 0) or np.any(acc > 1 + 1e-12):
        raise ValueError("top-k accuracies must lie in [0, 1]")
    if np.any(np.diff(acc, axis=1) < -1e-12):
        raise ValueError("top-k accuracies must be non-decreasing in k")
    return np.diff(acc, axis=1, prepend=0.0).clip(min=0.0)


def topk_from_anchors(top1: float, top5: float, k_max: int = 10) -> np.ndarray:
    """Illustrative top-k curve through the paper's top-1 and top-5 numbers: log-linear in k.

    A(k) = top1 + (top5 − top1)·ln k / ln 5, capped at 1. The paper prints only top-1 and top-5
    (Fig. 6 shows up to top-10 as a chart), so every other value is an interpolation, not data.
    """
    k = np.arange(1, k_max + 1)
    return np.minimum(1.0, top1 + (top5 - top1) * np.log(k) / np.log(5.0))


def path_probability(path: Path, rank_probs) -> float:
    """Π_{i∈Path(v)} p_i: probability that every guess on the path is right (Prop. 4.1)."""
    a = np.asarray(rank_probs)
    if len(path) > a.shape[0] or any(r >= a.shape[1] for r in path):
        return 0.0
    return float(np.prod([a[d, r] for d, r in enumerate(path)]))


def expected_tokens(paths, rank_probs) -> float:
    """f(T) = Σ_{v∈C(T)} Π_{i∈Path(v)} p_i, expected accepted candidates (Prop. 4.1)."""
    return float(sum(path_probability(tuple(p), rank_probs) for p in paths))


def last_accepted_probabilities(paths, rank_probs) -> tuple[np.ndarray, float]:
    """P(c is the deepest accepted candidate) for each path, and P(no candidate accepted).

    P(c last) = P(path to c right) − Σ_{children c' of c in the tree} P(path to c' right), since
    the right children of c are disjoint events. These drive the state transitions.
    """
    paths = [tuple(p) for p in paths]
    prob = {p: path_probability(p, rank_probs) for p in paths}
    last = dict(prob)
    for p in paths:
        if len(p) > 1:
            last[p[:-1]] -= prob[p]
    none = 1.0 - sum(prob[p] for p in paths if len(p) == 1)
    return np.array([max(last[p], 0.0) for p in paths]), max(none, 0.0)


# ------------------------------------------------------------------------------- Markov chain

def transition_matrix(tree: DynamicSparseTree, rank_probs) -> np.ndarray:
    """``P[k-1, j-1] = p(s_j | s_k)``: next state = prompt tokens at the last accepted node (§4.2)."""
    m = tree.m
    out = np.zeros((m, m))
    for k, state in enumerate(tree.states):
        last, none = last_accepted_probabilities(state.paths, rank_probs)
        np.add.at(out[k], np.asarray(state.prompts, dtype=int) - 1, last)
        out[k, tree.root_prompts - 1] += none
    return out


def steady_state(transitions, start: int | None = None) -> np.ndarray:
    """Steady-state p(s_i) (Prop. 4.4): the long-run share of steps in each state.

    ``start`` (1-based) is the state after prefill; only states reachable from it are used, so the
    answer is the long-run average even when some states are never visited. Defaults to state m.
    """
    P = np.asarray(transitions, dtype=np.float64)
    m = P.shape[0]
    s0 = (m if start is None else start) - 1
    reach = {s0}
    frontier = [s0]
    while frontier:
        i = frontier.pop()
        for j in np.nonzero(P[i] > 0)[0]:
            if j not in reach:
                reach.add(int(j))
                frontier.append(int(j))
    idx = np.array(sorted(reach))
    sub = P[np.ix_(idx, idx)]
    n = idx.size
    # π (I − P + 1 1ᵀ) = 1ᵀ holds for the unique stationary law of an irreducible chain.
    a = np.eye(n) - sub + np.ones((n, n))
    pi = np.zeros(m)
    try:
        sol = np.linalg.solve(a.T, np.ones(n))
        if np.all(sol > -1e-12) and np.isclose(sol.sum(), 1.0):
            pi[idx] = np.clip(sol, 0, None)
            return pi / pi.sum()
    except np.linalg.LinAlgError:
        pass
    # Reducible: Cesàro average of the distribution started in s0.
    dist = np.zeros(n)
    dist[np.searchsorted(idx, s0)] = 1.0
    acc = np.zeros(n)
    for _ in range(20000):
        acc += dist
        dist = dist @ sub
    pi[idx] = acc / acc.sum()
    return pi


def _state_f(tree: DynamicSparseTree, rank_probs) -> np.ndarray:
    return np.array([expected_tokens(s.paths, rank_probs) for s in tree.states])


def two_step_tokens(tree: DynamicSparseTree, rank_probs) -> np.ndarray:
    """F(T_k) = f(T_k) + Σ_i p(s_i | s_k) f(T_i) for k = 1..m (Prop. 4.2)."""
    f = _state_f(tree, rank_probs)
    return f + transition_matrix(tree, rank_probs) @ f


def amortized_tokens(tree: DynamicSparseTree, rank_probs) -> float:
    """R(T) = Σ_i p(s_i) f(T_i), accepted candidates per step in the long run (Prop. 4.4)."""
    f = _state_f(tree, rank_probs)
    pi = steady_state(transition_matrix(tree, rank_probs), start=tree.root_prompts)
    return float(pi @ f)


def accept_length(tree: DynamicSparseTree, rank_probs) -> float:
    """τ = 1 + R(T): tokens per step including the one the target emits itself (Table 1's τ)."""
    return 1.0 + amortized_tokens(tree, rank_probs)


def prompt_removal_loss(p_c: float, f_values, i: int) -> float:
    """ΔF = p(c)·(f(T_i) − f(T_{i−1})) for removing one of the i > 1 prompt tokens at c (Prop. 4.3).

    ``f_values[k-1]`` = f(T_k). The decrease of F(T_k) is ΔF (F drops by ΔF).
    """
    if i <= 1:
        raise ValueError("Prop. 4.3 assumes i > 1 prompt tokens before removal")
    return float(p_c * (f_values[i - 1] - f_values[i - 2]))


# ------------------------------------------------------------------------------- construction

@lru_cache(maxsize=64)
def _ranked_paths(rank_key: bytes, shape: tuple[int, int], max_depth: int):
    """All paths of depth ≤ max_depth sorted by (−probability, length, path), with probabilities
    and parent positions in that order. Cached per accuracy table."""
    a = np.frombuffer(rank_key, dtype=np.float64).reshape(shape)
    if sum(shape[1] ** d for d in range(1, max_depth + 1)) > 200_000:
        raise ValueError(f"{shape[1]} ranks to depth {max_depth} is too many paths to enumerate")
    items = []
    for depth in range(1, max_depth + 1):
        for path in itertools.product(range(shape[1]), repeat=depth):
            items.append((-path_probability(path, a), depth, path))
    items.sort()
    paths = [p for _, _, p in items]
    pos = {p: i for i, p in enumerate(paths)}
    parent = np.array([pos[p[:-1]] if len(p) > 1 else -1 for p in paths])
    probs = np.array([-x for x, _, _ in items])
    return tuple(paths), probs, parent


def _ranked(rank_probs, max_depth):
    a = np.ascontiguousarray(rank_probs, dtype=np.float64)
    if max_depth > a.shape[0]:
        raise ValueError(f"depth {max_depth} needs accuracies for {max_depth} distances, got {a.shape[0]}")
    return _ranked_paths(a.tobytes(), a.shape, max_depth)


def optimal_candidate_tree(rank_probs, n_candidates: int, max_depth: int) -> tuple[Path, ...]:
    """Step (1): the n_c candidates of depth ≤ max_depth maximising f (top-n_c paths by probability).

    Ties go to shorter, then lexicographically smaller paths, which keeps the set prefix-closed.
    """
    paths, _, _ = _ranked(rank_probs, max_depth)
    if not 0 <= n_candidates <= len(paths):
        raise ValueError(f"n_candidates must be in 0..{len(paths)}")
    return paths[:n_candidates]


def _last_probs_prefix(probs, parent, n):
    last = probs[:n].copy()
    kids = np.nonzero(parent[:n] >= 0)[0]
    np.subtract.at(last, parent[kids], probs[kids])
    none = 1.0 - probs[:n][parent[:n] < 0].sum()
    return np.clip(last, 0, None), max(none, 0.0)


def _greedy_prompts(last, n_prompts: int, f_values, m: int) -> list[int]:
    """Steps (2)–(3): m prompt tokens each, then remove the one with the smallest ΔF until n_p fit."""
    prompts = [m] * len(last)
    remove = m * len(last) - n_prompts
    if remove <= 0:
        return prompts
    if n_prompts < len(last):
        raise ValueError("each candidate needs ≥ 1 prompt token: n_p ≥ n_c")
    heap = [(prompt_removal_loss(w, f_values, m), c) for c, w in enumerate(last)] if m > 1 else []
    heapq.heapify(heap)
    for _ in range(remove):
        _, c = heapq.heappop(heap)
        prompts[c] -= 1
        if prompts[c] > 1:
            heapq.heappush(heap, (prompt_removal_loss(last[c], f_values, prompts[c]), c))
    return prompts


def allocate_prompts(paths, n_prompts: int, rank_probs, f_values, m: int) -> tuple[int, ...]:
    """Greedy prompt-token removal (§4.2 step 3) for one state's candidates, given f(T_1..T_m)."""
    last, _ = last_accepted_probabilities(paths, rank_probs)
    return tuple(_greedy_prompts(last, n_prompts, f_values, m))


def _max_candidates(rank_probs, k, size):
    return min(size // 2, len(_ranked(rank_probs, k)[0]))


def build_tree(rank_probs, size: int, n_candidates, m: int | None = None,
               root_prompts: int | None = None) -> DynamicSparseTree:
    """The dynamic sparse tree of size ≤ n with ``n_candidates[k-1]`` candidates in state k (steps 1–3)."""
    m = len(n_candidates) if m is None else m
    root_prompts = m if root_prompts is None else root_prompts
    if len(n_candidates) != m:
        raise ValueError("one candidate count per state")
    ranked = [_ranked(rank_probs, k) for k in range(1, m + 1)]
    f_values = np.array([ranked[k][1][: n_candidates[k]].sum() for k in range(m)])
    states = []
    for k in range(m):
        paths, probs, parent = ranked[k]
        n_c = int(n_candidates[k])
        if n_c < 1 or 2 * n_c > size:
            raise ValueError(f"state {k + 1}: need 1 ≤ n_c ≤ n/2, got n_c = {n_c}, n = {size}")
        last, _ = _last_probs_prefix(probs, parent, n_c)
        prompts = _greedy_prompts(last, size - n_c, f_values, m)
        states.append(TreeState(paths[:n_c], tuple(prompts)))
    return DynamicSparseTree(tuple(states), root_prompts)


def _objective(rank_probs, size, m, root_prompts):
    ranked = [_ranked(rank_probs, k) for k in range(1, m + 1)]
    cumf = [np.concatenate([[0.0], np.cumsum(r[1])]) for r in ranked]

    @lru_cache(maxsize=None)
    def value(ncs: tuple[int, ...]) -> float:
        f = np.array([cumf[k][ncs[k]] for k in range(m)])
        P = np.zeros((m, m))
        for k in range(m):
            _, probs, parent = ranked[k]
            last, none = _last_probs_prefix(probs, parent, ncs[k])
            prompts = np.asarray(_greedy_prompts(last, size - ncs[k], f, m))
            np.add.at(P[k], prompts - 1, last)
            P[k, root_prompts - 1] += none
        return float(steady_state(P, start=root_prompts) @ f)

    return value


def optimal_tree(rank_probs, size: int, m: int = 3, root_prompts: int | None = None,
                 search: str = "auto", max_exhaustive: int = 4000) -> DynamicSparseTree:
    """c(n_c, n_p) maximised over n_c per state for a tree of size ≤ n (§4.2 "Hardware-awareness").

    ``search``: "exhaustive" tries every combination of candidate counts (the paper), "coordinate"
    optimises one state's count at a time until no change (from several starts), "auto" picks
    exhaustive when there are at most ``max_exhaustive`` combinations. Ties (e.g. a state no
    transition reaches) go to the larger candidate count, as in Table 1's S_tr = (10, ·, ·).
    """
    root_prompts = m if root_prompts is None else root_prompts
    if size < 2:
        raise ValueError("a tree needs n ≥ 2 (one candidate and one prompt token)")
    ranges = [range(1, _max_candidates(rank_probs, k, size) + 1) for k in range(1, m + 1)]
    value = _objective(rank_probs, size, m, root_prompts)
    combos = int(np.prod([len(r) for r in ranges]))
    if search == "auto":
        search = "exhaustive" if combos <= max_exhaustive else "coordinate"
    if search == "exhaustive":
        best = max(itertools.product(*ranges), key=lambda c: (value(c), c))
    elif search == "coordinate":
        starts = {tuple(r[-1] for r in ranges),
                  tuple(min(r[-1], max(1, size // (m + 1))) for r in ranges),
                  tuple(min(r[-1], max(1, size // 3)) for r in ranges)}
        best = None
        for start in starts:
            cur = list(start)
            for _ in range(50):
                before = tuple(cur)
                for k in range(m):
                    cur[k] = max(ranges[k], key=lambda v: (value(tuple(cur[:k] + [v] + cur[k + 1:])), v))
                if tuple(cur) == before:
                    break
            if best is None or (value(tuple(cur)), tuple(cur)) > (value(best), best):
                best = tuple(cur)
    else:
        raise ValueError(f"unknown search {search!r}")
    return build_tree(rank_probs, size, best, m, root_prompts)


def static_tree(rank_probs, size: int, m: int = 3) -> DynamicSparseTree:
    """Fig. 8(a) baseline: the optimal candidate tree with the largest prompt count (m) on every node.

    n_c = ⌊n / (m+1)⌋; every state transitions to T_m, so R = f(T_m).
    """
    n_c = size // (m + 1)
    if n_c < 1:
        raise ValueError(f"size {size} too small for a static tree with m = {m}")
    states = tuple(TreeState(optimal_candidate_tree(rank_probs, min(n_c, len(_ranked(rank_probs, k)[0])), k),
                             (m,) * min(n_c, len(_ranked(rank_probs, k)[0]))) for k in range(1, m + 1))
    return DynamicSparseTree(states, m)


def random_tree(rank_probs, size: int, m: int, rng: np.random.Generator) -> DynamicSparseTree:
    """Fig. 8(a) baseline: a random prefix-closed tree (uniform over the frontier) with m prompts each."""
    k_max = np.asarray(rank_probs).shape[1]
    n_c = size // (m + 1)
    states = []
    for k in range(1, m + 1):
        chosen: list[Path] = []
        frontier = [(r,) for r in range(k_max)]
        while len(chosen) < n_c and frontier:
            node = frontier.pop(int(rng.integers(len(frontier))))
            chosen.append(node)
            if len(node) < k:
                frontier.extend(node + (r,) for r in range(k_max))
        states.append(TreeState(tuple(chosen), (m,) * len(chosen)))
    return DynamicSparseTree(tuple(states), m)


def accept_length_curve(rank_probs, sizes, m: int = 3, kind: str = "dynamic",
                        rng: np.random.Generator | None = None, draws: int = 8) -> np.ndarray:
    """τ(n) = 1 + R for each size n: ``kind`` "dynamic" (optimal), "static" or "random" (mean of
    ``draws`` random trees) — the three curves of Fig. 8(a)."""
    out = []
    for n in sizes:
        if kind == "dynamic":
            out.append(accept_length(optimal_tree(rank_probs, int(n), m), rank_probs))
        elif kind == "static":
            out.append(accept_length(static_tree(rank_probs, int(n), m), rank_probs))
        elif kind == "random":
            gen = np.random.default_rng(0) if rng is None else rng
            out.append(np.mean([accept_length(random_tree(rank_probs, int(n), m, gen), rank_probs)
                                for _ in range(draws)]))
        else:
            raise ValueError(f"unknown kind {kind!r}")
    return np.array(out)


# -------------------------------------------------------------------------------- Monte Carlo

def simulate_accepted(paths, rank_probs, n: int, rng: np.random.Generator) -> np.ndarray:
    """Accepted candidates of one tree in ``n`` independent steps: ``[n]`` (mean → f(T))."""
    a = np.asarray(rank_probs, dtype=np.float64)
    tree = set(tuple(p) for p in paths)
    depth = max((len(p) for p in tree), default=0)
    ranks = _sample_ranks(a, depth, n, rng)  # [n, depth], K = miss
    out = np.zeros(n, dtype=np.int64)
    for t in range(n):
        node: Path = ()
        for d in range(depth):
            child = node + (int(ranks[t, d]),)
            if child not in tree:
                break
            node = child
        out[t] = len(node)
    return out


def simulate_steps(tree: DynamicSparseTree, rank_probs, n_steps: int, rng: np.random.Generator):
    """Run the state chain for ``n_steps`` steps from state root_prompts.

    Returns ``(accepted [n_steps], states [n_steps])``: accepted candidates per step and the
    state (1-based) of each step; ``accepted.mean()`` → R(T), ``1 + accepted.mean()`` → τ.
    """
    a = np.asarray(rank_probs, dtype=np.float64)
    lookup = [dict(zip(s.paths, s.prompts)) for s in tree.states]
    ranks = _sample_ranks(a, tree.m, n_steps, rng)   # [n_steps, m]
    accepted = np.zeros(n_steps, dtype=np.int64)
    states = np.zeros(n_steps, dtype=np.int64)
    state = tree.root_prompts
    for t in range(n_steps):
        states[t] = state
        table = lookup[state - 1]
        node: Path = ()
        for d in range(state):
            child = node + (int(ranks[t, d]),)
            if child not in table:
                break
            node = child
        accepted[t] = len(node)
        state = table[node] if node else tree.root_prompts
    return accepted, states


def _sample_ranks(a, depth, n, rng):
    miss = np.clip(1.0 - a.sum(axis=1), 0, None)
    cols = []
    for d in range(depth):
        w = np.append(a[d], miss[d])
        cols.append(rng.choice(w.size, size=n, p=w / w.sum()))
    return np.stack(cols, axis=1) if cols else np.zeros((n, 0), dtype=int)


# ---------------------------------------------------------------------------- hardware-aware n

def theoretical_speedup(accept_lengths, latencies, vanilla_latency):
    """Speedup(n) = τ(n) / L_fp(n), relative to vanilla decoding (τ = 1 at L_fp(vanilla)) — Fig. 8(b)."""
    return np.asarray(accept_lengths, dtype=float) * vanilla_latency / np.asarray(latencies, dtype=float)


def scan_tree_sizes(speed, sizes, patience: int | None = None):
    """The hardware-aware tree size (§4.2): the n maximising Speedup(n) = τ(n) / L_fp(n), scanned in ``sizes`` order.

    ``speed(n)`` returns ``(τ(n), L_fp(n), Speedup(n))`` for the tree of size n, or None when it no longer fits
    (the scan stops there). τ(n) rises ever more slowly while L_fp(n) keeps growing, so with ``patience`` the scan
    also stops that many sizes after the best so far. Ties go to the first (smallest) size.

    Returns ``(best_n, {n: (τ, L_fp, Speedup)})`` for every n scanned.
    """
    curve = {}
    for n in sizes:
        point = speed(n)
        if point is None:
            break
        curve[n] = point
        if patience is not None and n - max(curve, key=lambda k: curve[k][2]) >= patience:
            break
    if not curve:
        raise ValueError("no tree size fits: the first size scanned is already too large")
    return max(curve, key=lambda k: curve[k][2]), curve


def best_tree_size(sizes, accept_lengths, latency, vanilla_latency=None):
    """The n maximising τ(n) / L_fp(n) (§4.2) over curves given per size (``scan_tree_sizes`` over arrays).
    ``latency``: callable n ↦ L_fp(n) or array per size.

    Returns ``(best_n, speedups)``; speedups are relative to ``vanilla_latency`` (default L(1)).
    """
    sizes = np.asarray(sizes)
    lat = np.asarray(latency(sizes) if callable(latency) else latency, dtype=float)
    base = (float(latency(np.array([1]))[0]) if callable(latency) else lat[0]) if vanilla_latency is None else vanilla_latency
    speed = theoretical_speedup(accept_lengths, lat, base)
    taus = np.asarray(accept_lengths, dtype=float)
    best, _ = scan_tree_sizes(lambda i: (taus[i], lat[i], speed[i]), range(sizes.size))
    return int(sizes[best]), speed


def linear_latency(l1: float, per_token: float):
    """L_fp(n) = l1·(1 + per_token·(n − 1)): the simplest curve through two measured points."""
    return lambda n: l1 * (1.0 + per_token * (np.asarray(n, dtype=float) - 1.0))


def roofline_latency(l1: float, knee: float, slope: float):
    """L_fp(n) = l1·max(1, 1 + slope·(n − knee)): flat while memory-bound, linear once compute-bound."""
    return lambda n: l1 * np.maximum(1.0, 1.0 + slope * (np.asarray(n, dtype=float) - knee))
