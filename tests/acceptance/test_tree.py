"""Tree acceptance rules on hand-made distributions (V = 4–6): exactness by χ² tests, chain equivalence, T = 0
paths, the lossy typical rule, and input checks.

Each trial draws the tree's tokens from q itself, as a drafter would (i.i.d. siblings, siblings without replacement,
deterministic top-k), so a test covers the whole propose → verify procedure. Every χ² test uses a fixed seed and rejects
at tests/stats.py's FALSE_ALARM = 1e-3: were the rule exact, a fresh seed would fail one such test with probability 1e-3
(about 0.5% for the five below together). TRIALS = 20 000 per test keeps every expected cell count above 100; a
deliberately wrong rule fails the same test with p-value far below 1e-3, so the tests can fail.
"""
import dataclasses
import math

import numpy as np
import pytest
import torch

from specrepro.acceptance import (
    TREE_RULES, TreeVerdict, TypicalParams, greedy_match, speculative_sampling, tree_greedy, tree_sampling,
    typical_acceptance, typical_thresholds,
)
from specrepro.core.tree import chain_parents, children
from specrepro.core.warping import sample
from tests.helpers import random_chain
from tests.stats import FALSE_ALARM, chi2_pvalue

TRIALS = 20_000


def _dist(*xs):
    t = torch.tensor(xs, dtype=torch.float64)
    return (t / t.sum()).float()


# --- drafters: k siblings under one node, drawn with the uniforms u [k]; return tokens and their q rows [k, V]

def iid_siblings(q: torch.Tensor, u: torch.Tensor):
    """SpecTr / SpecInfer: k i.i.d. draws from q, repeats allowed; every sibling's q row is q."""
    return [sample(q, ui) for ui in u], q.expand(len(u), -1)


def siblings_without_replacement(q: torch.Tensor, u: torch.Tensor):
    """Each sibling from q renormalised without the earlier siblings' tokens; that renormalised q is its row."""
    left, tokens, rows = q.double().clone(), [], []
    for ui in u:
        rows.append(left / left.sum())
        tokens.append(sample(rows[-1], ui))
        left[tokens[-1]] = 0.0
    return tokens, torch.stack(rows).float()


def top_k_siblings(q: torch.Tensor, u: torch.Tensor):
    """Deterministic: the k most likely tokens of q, distinct, each with a one-hot q row."""
    tokens = torch.argsort(q, descending=True, stable=True)[: len(u)]
    return tokens.tolist(), torch.nn.functional.one_hot(tokens, q.numel()).float()


def first_token(rule, p, q, drafter, k, gen) -> int:
    """First emitted token of one step over a one-level tree of k siblings drawn by ``drafter`` from q."""
    u = torch.rand(2 * k + 1, generator=gen, dtype=torch.float64)
    tokens, q_rows = drafter(q, u[:k])
    tokens = torch.tensor(tokens)
    p_rows = p.expand(k + 1, -1)  # [k+1, V]: rows after the siblings do not matter for the first token
    return rule(p_rows, q_rows, tokens, torch.full((k,), -1), u[k:]).emitted(tokens)[0]


V = 5
P = _dist(3, 1, 4, 1, 5)
ONE_LEVEL_CASES = {
    # peaked q: two of three siblings repeat a token most of the time; q(4) = 0 where p is largest
    "iid_duplicate_siblings": (P, _dist(8, 1, 1, 1, 0), iid_siblings, 3),
    "disjoint_supports": (_dist(1, 1, 2, 0, 0), _dist(0, 0, 0, 3, 1), iid_siblings, 2),
    "top_k_one_hot": (P, _dist(1, 5, 3, 2, 0), top_k_siblings, 3),  # proposes 1, 2, 3 every time
    "without_replacement": (P, _dist(4, 3, 2, 1, 1), siblings_without_replacement, 3),
}


def first_token_counts(rule, case, seed=1234) -> np.ndarray:
    p, q, drafter, k = ONE_LEVEL_CASES[case]
    gen = torch.Generator().manual_seed(seed)
    return np.bincount([first_token(rule, p, q, drafter, k, gen) for _ in range(TRIALS)], minlength=V)


@pytest.mark.parametrize("case", sorted(ONE_LEVEL_CASES))
def test_first_token_is_distributed_as_p(case):
    p = ONE_LEVEL_CASES[case][0].double().numpy()
    counts = first_token_counts(tree_sampling, case)
    assert counts[p == 0].sum() == 0, "a token with p = 0 was emitted"
    assert chi2_pvalue(counts, p, pool_below=None) > FALSE_ALARM


def forgetful_sampling(p, q, tokens, parents, uniforms) -> TreeVerdict:
    """WRONG on purpose (one-level trees only): every sibling is tested against p itself, and the residual is
    rebuilt as norm(max(0, p − q_child)) instead of being carried from sibling to sibling."""
    n = tokens.numel()
    residual = p[0].double()
    for child in children(parents, -1):
        x = int(tokens[child])
        if uniforms[child] * q[child, x] < p[0, x]:
            return TreeVerdict([child], sample(p[child + 1], uniforms[n]))
        residual = (p[0].double() - q[child].double()).clamp_min(0.0)
    return TreeVerdict([], sample(residual, uniforms[n]))


def test_chi2_check_catches_a_residual_not_carried_across_siblings():
    counts = first_token_counts(forgetful_sampling, "iid_duplicate_siblings")
    assert chi2_pvalue(counts, P.double().numpy(), pool_below=None) < FALSE_ALARM


def conditional(dist: torch.Tensor, context: int) -> torch.Tensor:
    """A distribution after a token that depends on it: ``dist`` rolled by the context's token ids."""
    return torch.roll(dist, shifts=context)


def first_two_tokens(p, q, gen) -> tuple[int, int]:
    """Two emitted tokens from a depth-2 tree: root children a, b (i.i.d. from q); a has two children and b one,
    drawn i.i.d. from q after their parent. If the step emits one token only, a one-level step of two i.i.d.
    siblings after it draws the second."""
    u = torch.rand(11, generator=gen, dtype=torch.float64)
    a, b = sample(q, u[0]), sample(q, u[1])
    a1, a2, b1 = sample(conditional(q, a), u[2]), sample(conditional(q, a), u[3]), sample(conditional(q, b), u[4])
    tokens = torch.tensor([a, b, a1, a2, b1])
    parents = torch.tensor([-1, -1, 0, 0, 1])
    q_rows = torch.stack([q, q, conditional(q, a), conditional(q, a), conditional(q, b)])  # [5, V]
    p_rows = torch.stack([p, conditional(p, a), conditional(p, b),  # [6, V]: root, after a, after b,
                          conditional(p, a + a1), conditional(p, a + a2), conditional(p, b + b1)])  # after leaves
    emitted = tree_sampling(p_rows, q_rows, tokens, parents, u[5:]).emitted(tokens)
    if len(emitted) == 1:
        t = emitted[0]
        emitted.append(first_token(tree_sampling, conditional(p, t), conditional(q, t), iid_siblings, 2, gen))
    return emitted[0], emitted[1]


def test_two_tokens_from_a_depth_two_tree_are_distributed_as_p():
    p, q = _dist(3, 1, 4, 1, 5), _dist(2, 4, 1, 0, 3)
    gen = torch.Generator().manual_seed(99)
    pairs = [first_two_tokens(p, q, gen) for _ in range(TRIALS)]
    counts = np.bincount([x * V + y for x, y in pairs], minlength=V * V)
    exact = np.array([float(p[x]) * float(conditional(p, x)[y]) for x in range(V) for y in range(V)])
    assert counts[exact == 0].sum() == 0
    assert chi2_pvalue(counts, exact, pool_below=None) > FALSE_ALARM


# --- chains: the tree rules are the chain rules

def test_tree_sampling_on_a_chain_is_speculative_sampling():
    gen = torch.Generator().manual_seed(0)
    for _ in range(500):
        gamma, vocab = int(torch.randint(1, 6, (1,), generator=gen)), int(torch.randint(2, 7, (1,), generator=gen))
        p, q, tokens, u = random_chain(gen, gamma, vocab)
        n, t = speculative_sampling(p, q, tokens, u)
        assert tree_sampling(p, q, tokens, chain_parents(gamma), u) == (list(range(n)), t)


def test_tree_greedy_on_a_chain_is_greedy_match():
    gen = torch.Generator().manual_seed(1)
    for _ in range(500):
        gamma, vocab = int(torch.randint(1, 6, (1,), generator=gen)), int(torch.randint(2, 7, (1,), generator=gen))
        p, q, tokens, u = random_chain(gen, gamma, vocab)
        argmax = p[:gamma].argmax(-1)
        tokens = torch.where(torch.rand(gamma, generator=gen) < 0.7, argmax, tokens)  # long matches too
        n, t = greedy_match(p, q, tokens, u)
        assert tree_greedy(p, q, tokens, chain_parents(gamma), u) == (list(range(n)), t)


# --- T = 0

def one_hot_rows(*argmaxes, vocab=4):
    return torch.nn.functional.one_hot(torch.tensor(argmaxes), vocab).float()


def test_tree_greedy_takes_the_longest_matching_path():
    #        root (argmax 1)
    #   n0:2 ✗   n1:1 ✓ (argmax 3)   n2:1 ✓ (argmax 3)
    #            n3:0 ✗              n4:3 ✓ (argmax 2) -- n5:2 ✓ (argmax 0)
    tokens = torch.tensor([2, 1, 1, 0, 3, 2])
    parents = torch.tensor([-1, -1, -1, 1, 2, 4])
    p = one_hot_rows(1, 0, 3, 3, 0, 2, 0)  # [N+1, V]: rows 0 (root), then after n0..n5
    q = torch.nn.functional.one_hot(tokens, 4).float()
    u = torch.full((7,), 0.5, dtype=torch.float64)
    # the first matching sibling n1 dead-ends; its duplicate n2 leads on
    assert tree_greedy(p, q, tokens, parents, u) == ([2, 4, 5], 0)
    # equal lengths: the first in sibling order (n1 once its child n3 matches too)
    p_tie = one_hot_rows(1, 0, 0, 3, 0, 1, 0)
    assert tree_greedy(p_tie, q, tokens, parents, u) == ([1, 3], 0)
    # nothing matches: the argmax after the root
    assert tree_greedy(one_hot_rows(3, 0, 0, 0, 0, 0, 0), q, tokens, parents, u) == ([], 3)


def test_tree_sampling_on_one_hot_p_emits_the_greedy_tokens():
    tokens = torch.tensor([2, 1, 1, 0, 3, 2])
    parents = torch.tensor([-1, -1, -1, 1, 2, 4])
    p = one_hot_rows(1, 0, 3, 3, 0, 2, 0)
    q = torch.softmax(torch.randn(6, 4, generator=torch.Generator().manual_seed(3)), -1)
    u = torch.rand(7, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    # exact sampling descends into the first matching sibling n1, whose child n3 is rejected: 1, then p's argmax 3
    assert tree_sampling(p, q, tokens, parents, u) == ([1], 3)


# --- typical acceptance (lossy)

def test_rules_are_labelled_and_typical_is_lossy():
    assert {name: rule.lossless for name, rule in TREE_RULES.items()} == {
        "greedy": True, "exact": True, "typical": False, "spectr": True, "mjsd": False, "bild": False,
        "mentored": False}  # mentored is lossless at D = 0 only (methods.rule_for relabels it there)
    for name in ("typical", "mjsd", "bild", "mentored"):
        assert "LOSSY" in TREE_RULES[name].fn.__doc__ + (__import__(TREE_RULES[name].fn.__module__,
                                                                    fromlist=["_"]).__doc__ or "")
    assert TREE_RULES["typical"].params == TypicalParams(epsilon=0.09, delta=0.3)
    assert TREE_RULES["typical"].describe()["params"]["epsilon"] == 0.09
    assert TREE_RULES["typical"].with_params(epsilon=0.05).params.epsilon == 0.05
    assert "LOSSY" in typical_acceptance.__doc__
    with pytest.raises(dataclasses.FrozenInstanceError):
        TypicalParams().epsilon = 0.5


def test_typical_threshold_is_min_of_epsilon_and_delta_exp_minus_entropy():
    exact_entropy = TypicalParams(entropy_smoothing=0.0)
    for row in [(0.82, 0.1, 0.08, 0.0), (0.25, 0.25, 0.2, 0.15, 0.08, 0.07), (1.0, 0.0), (0.5, 0.5)]:
        entropy = -sum(x * math.log(x) for x in row if x > 0)
        expected = min(0.09, 0.3 * math.exp(-entropy))
        got = float(typical_thresholds(torch.tensor([row], dtype=torch.float64), exact_entropy)[0])
        assert got == pytest.approx(expected, rel=1e-12)


def test_typical_acceptance_accepts_above_the_threshold_only():
    # root row A = (.82, .1, .08, 0): H = 0.595, δ·e^−H = 0.165 > ε, so the threshold is ε = 0.09
    row_a = torch.tensor([0.82, 0.1, 0.08, 0.0])
    uniform = torch.full((4,), 0.25)  # H = ln 4: threshold δ/4 = 0.075 < ε, every token acceptable
    #        root (A)
    #   n0:2 ✗ (.08)      n1:1 ✓ (.1)           n2:0 ✓ (.82)
    #   n5:0 (p = 1, but under a rejected node)   n3:3 ✓ (uniform)   n4:2 ✗ (A: .08)
    tokens = torch.tensor([2, 1, 0, 3, 2, 0])
    parents = torch.tensor([-1, -1, -1, 1, 2, 0])
    after_n0, after_n3 = _dist(1, 0, 0, 0), _dist(0, 0, 1, 0)
    p = torch.stack([row_a, after_n0, uniform, row_a, after_n3, uniform, uniform])  # [7, 4]
    q = torch.full((6, 4), 0.25)
    u = torch.full((7,), 0.5, dtype=torch.float64)
    assert typical_acceptance(p, q, tokens, parents, u) == ([1, 3], 2)  # next token from the row after n3
    # a lower ε admits n0 (.08) and so its child n5: [0, 5] ties [1, 3] and comes first in sibling order
    looser = TREE_RULES["typical"].with_params(epsilon=0.07)
    assert looser(p, q, tokens, parents, u) == ([0, 5], 2)  # next token: the uniform row after n5 at u = 0.5
    # a high-entropy row lowers the threshold below ε: H = 1.688, δ·e^−H = 0.0555, so p = 0.07 passes
    assert one_node_typical(_dist(25, 25, 20, 15, 8, 7), token=5).path == [0]
    # H = 1.680, δ·e^−H = 0.0559: p = 0.05 fails
    assert one_node_typical(_dist(25, 25, 20, 15, 10, 5), token=5).path == []


def one_node_typical(p_row: torch.Tensor, token: int) -> TreeVerdict:
    """typical_acceptance on a one-node tree whose root row is p_row."""
    vocab = p_row.numel()
    return typical_acceptance(p_row.expand(2, -1), torch.full((1, vocab), 1 / vocab), torch.tensor([token]),
                              torch.tensor([-1]), torch.full((2,), 0.5, dtype=torch.float64))


def test_typical_acceptance_on_one_hot_p_is_tree_greedy():
    """With one-hot rows H = 0, the threshold is min(ε, δ) and only the argmax passes: the T = 0 rule."""
    gen = torch.Generator().manual_seed(7)
    for _ in range(100):
        n = int(torch.randint(1, 8, (1,), generator=gen))
        parents = torch.tensor([int(torch.randint(-1, i, (1,), generator=gen)) for i in range(n)])
        p = one_hot_rows(*torch.randint(0, 3, (n + 1,), generator=gen).tolist())
        tokens = torch.randint(0, 3, (n,), generator=gen)
        q, u = torch.full((n, 4), 0.25), torch.rand(n + 1, generator=gen, dtype=torch.float64)
        assert typical_acceptance(p, q, tokens, parents, u) == tree_greedy(p, q, tokens, parents, u)


# --- inputs

def test_empty_tree_draws_from_the_root_row():
    p = _dist(0, 1, 0)[None]  # [1, V]
    for rule in TREE_RULES.values():
        assert rule(p, torch.zeros(0, 3), torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long),
                    torch.full((1,), 0.5, dtype=torch.float64)) == ([], 1)


@pytest.mark.parametrize("rule", sorted(TREE_RULES))
def test_bad_inputs_raise_one_clear_error(rule):
    rule = TREE_RULES[rule]
    p, q = torch.full((3, 4), 0.25), torch.full((2, 4), 0.25)
    tokens, parents, u = torch.tensor([0, 1]), torch.tensor([-1, 0]), torch.rand(3, dtype=torch.float64)
    with pytest.raises(ValueError, match="node 1 has parent 1"):
        rule(p, q, tokens, torch.tensor([-1, 1]), u)
    with pytest.raises(ValueError, match="node 0 has parent -2"):
        rule(p, q, tokens, torch.tensor([-2, 0]), u)
    with pytest.raises(ValueError, match="needs 2 parent indices"):
        rule(p, q, tokens, torch.tensor([-1]), u)
    with pytest.raises(ValueError, match=r"expected p \[N\+1, V\] and q \[N, V\]"):
        rule(p[:2], q, tokens, parents, u)
    with pytest.raises(ValueError, match=r"expected p \[N\+1, V\] and q \[N, V\]"):
        rule(p, torch.full((2, 5), 0.2), tokens, parents, u)
    with pytest.raises(ValueError, match="expected N\\+1 = 3 uniforms"):
        rule(p, q, tokens, parents, u[:2])
    with pytest.raises(ValueError, match="token ids must lie in"):
        rule(p, q, torch.tensor([0, 4]), parents, u)
