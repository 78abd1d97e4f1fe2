"""PPD dynamic sparse tree theory (paper 002 §4): hand-computed trees, brute force and Monte Carlo."""

import itertools

import numpy as np
import pytest

from simulations import ppd

# Two depths, top-2: ranks (0, 1) at distance 1 have p = 0.5, 0.2; at distance 2, 0.4, 0.1.
ACC = [[0.5, 0.7], [0.4, 0.5]]
A = np.array([[0.5, 0.2], [0.4, 0.1]])

# The hand example: m = 2, root has 2 prompt tokens.
T1 = ppd.TreeState(((0,), (1,)), (1, 2))
T2 = ppd.TreeState(((0,), (1,), (0, 0)), (2, 1, 1))
TREE = ppd.DynamicSparseTree((T1, T2), root_prompts=2)


def _illustrative(k_max=10):
    return ppd.rank_probabilities([ppd.topk_from_anchors(0.485, 0.779, k_max),
                                   ppd.topk_from_anchors(0.261, 0.586, k_max),
                                   ppd.topk_from_anchors(0.140, 0.441, k_max)])


def test_rank_probabilities_are_topk_increments():
    np.testing.assert_allclose(ppd.rank_probabilities(ACC), A)
    with pytest.raises(ValueError, match="non-decreasing"):
        ppd.rank_probabilities([[0.5, 0.4]])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        ppd.rank_probabilities([[0.5, 1.2]])


def test_f_by_hand():
    # Prop. 4.1: f = 0.5 + 0.2 + 0.5·0.4
    assert ppd.expected_tokens(T2.paths, A) == pytest.approx(0.9)
    assert ppd.expected_tokens(T1.paths, A) == pytest.approx(0.7)
    assert ppd.path_probability((1, 0), A) == pytest.approx(0.08)
    assert ppd.path_probability((0, 5), A) == 0.0             # rank beyond the table


def test_last_accepted_by_hand():
    last, none = ppd.last_accepted_probabilities(T2.paths, A)
    np.testing.assert_allclose(last, [0.3, 0.2, 0.2])       # (0,) minus its child (0,0)
    assert none == pytest.approx(0.3)


def test_transitions_steady_state_F_and_R_by_hand():
    P = ppd.transition_matrix(TREE, A)
    # from T1: (0,) → s1 w.p. 0.5; (1,) → s2 w.p. 0.2; nothing → root (s2) w.p. 0.3
    # from T2: (0,) → s2 0.3; (1,) → s1 0.2; (0,0) → s1 0.2; nothing → s2 0.3
    np.testing.assert_allclose(P, [[0.5, 0.5], [0.4, 0.6]])
    pi = ppd.steady_state(P)
    np.testing.assert_allclose(pi, [0.8 / 1.8, 1 / 1.8])     # π1 = 0.8 π2
    np.testing.assert_allclose(ppd.two_step_tokens(TREE, A), [0.7 + 0.35 + 0.45, 0.9 + 0.28 + 0.54])
    assert ppd.amortized_tokens(TREE, A) == pytest.approx(1.46 / 1.8)
    assert ppd.accept_length(TREE, A) == pytest.approx(1 + 1.46 / 1.8)


def test_removal_loss_equals_change_in_F():
    # Prop. 4.3: ΔF = p(c)(f(T_2) − f(T_1)) = 0.3 · 0.2 for the prompt token at (0,) in T2.
    assert ppd.prompt_removal_loss(0.3, [0.7, 0.9], 2) == pytest.approx(0.06)
    fewer = ppd.DynamicSparseTree((T1, ppd.TreeState(T2.paths, (1, 1, 1))), 2)
    drop = ppd.two_step_tokens(TREE, A)[1] - ppd.two_step_tokens(fewer, A)[1]
    assert drop == pytest.approx(0.06)
    with pytest.raises(ValueError, match="i > 1"):
        ppd.prompt_removal_loss(0.3, [0.7, 0.9], 1)


def test_removal_loss_matches_F_on_random_trees():
    a = _illustrative(4)
    rng = np.random.default_rng(0)
    for _ in range(5):
        tree = ppd.random_tree(a, 24, 3, rng)
        f = np.array([ppd.expected_tokens(s.paths, a) for s in tree.states])
        state = tree.states[2]
        last, _ = ppd.last_accepted_probabilities(state.paths, a)
        c = int(rng.integers(state.n_candidates))
        changed = list(state.prompts)
        changed[c] -= 1
        other = ppd.DynamicSparseTree(tree.states[:2] + (ppd.TreeState(state.paths, tuple(changed)),), 3)
        drop = ppd.two_step_tokens(tree, a)[2] - ppd.two_step_tokens(other, a)[2]
        assert drop == pytest.approx(ppd.prompt_removal_loss(last[c], f, 3), abs=1e-12)


def test_greedy_prompt_removal_by_hand():
    # n_p = 4 for 3 candidates, m = 2: remove 2 from (2,2,2). Losses 0.3·0.2, 0.2·0.2, 0.2·0.2.
    assert ppd.allocate_prompts(T2.paths, 4, A, [0.7, 0.9], 2) == (2, 1, 1)
    assert ppd.allocate_prompts(T2.paths, 6, A, [0.7, 0.9], 2) == (2, 2, 2)   # nothing to remove
    with pytest.raises(ValueError, match="≥ 1 prompt"):
        ppd.allocate_prompts(T2.paths, 2, A, [0.7, 0.9], 2)


def test_optimal_candidate_tree_by_hand_and_by_brute_force():
    # probabilities: (0,) .5, (1,) .2, (0,0) .2, (1,0) .08, (0,1) .05, (1,1) .02
    assert ppd.optimal_candidate_tree(A, 3, 2) == ((0,), (1,), (0, 0))
    assert ppd.optimal_candidate_tree(A, 4, 2)[-1] == (1, 0)
    assert ppd.optimal_candidate_tree(A, 2, 1) == ((0,), (1,))
    for k_max, depth in ((2, 3), (3, 2)):
        a = _illustrative(k_max)[:depth]
        all_paths = [p for d in range(1, depth + 1) for p in itertools.product(range(k_max), repeat=d)]
        for n in range(1, 7):
            best = max(ppd.expected_tokens(sub, a) for sub in itertools.combinations(all_paths, n)
                       if all(len(p) == 1 or p[:-1] in sub for p in sub))
            assert ppd.expected_tokens(ppd.optimal_candidate_tree(a, n, depth), a) == pytest.approx(best)


def test_steady_state_of_reducible_chain_follows_start():
    P = np.array([[1.0, 0.0, 0.0], [0.0, 0.5, 0.5], [0.0, 0.5, 0.5]])
    np.testing.assert_allclose(ppd.steady_state(P, start=3), [0, 0.5, 0.5])
    np.testing.assert_allclose(ppd.steady_state(P, start=1), [1, 0, 0])


def test_tree_validation():
    with pytest.raises(ValueError, match="prefix-closed"):
        ppd.TreeState(((0, 1),), (1,))
    with pytest.raises(ValueError, match="depth"):
        ppd.DynamicSparseTree((ppd.TreeState(((0,), (0, 0)), (1, 1)), T2), 2)
    with pytest.raises(ValueError, match="at least one prompt"):
        ppd.TreeState(((0,),), (0,))
    with pytest.raises(ValueError, match="root_prompts"):
        ppd.DynamicSparseTree((T1, T2), 3)


def test_exhaustive_and_coordinate_search_agree():
    a = _illustrative(3)
    for n in (4, 8, 12, 16):
        ex = ppd.optimal_tree(a, n, search="exhaustive")
        co = ppd.optimal_tree(a, n, search="coordinate")
        assert ppd.amortized_tokens(co, a) == pytest.approx(ppd.amortized_tokens(ex, a), abs=1e-12)
        assert all(s.size <= n for s in ex.states)
    a = _illustrative(10)                       # the notebook's table, 10·15·15 combinations
    ex, co = (ppd.optimal_tree(a, 30, search=s) for s in ("exhaustive", "coordinate"))
    assert ppd.amortized_tokens(co, a) == pytest.approx(ppd.amortized_tokens(ex, a), abs=1e-12)


def test_dynamic_beats_static_and_grows_with_size():
    a = _illustrative(5)
    prev = 0.0
    for n in (8, 16, 24, 32):
        dyn = ppd.accept_length(ppd.optimal_tree(a, n), a)
        stat = ppd.accept_length(ppd.static_tree(a, n), a)
        assert dyn >= stat - 1e-12
        assert dyn >= prev - 1e-12
        prev = dyn


def test_monte_carlo_single_tree_matches_f():
    a = _illustrative(4)
    paths = ppd.optimal_candidate_tree(a, 12, 3)
    acc = ppd.simulate_accepted(paths, a, 40_000, np.random.default_rng(1))
    f = ppd.expected_tokens(paths, a)
    assert abs(acc.mean() - f) < 4 * acc.std() / np.sqrt(acc.size)


def test_monte_carlo_chain_matches_R_and_steady_state():
    a = _illustrative(4)
    tree = ppd.optimal_tree(a, 20)
    acc, states = ppd.simulate_steps(tree, a, 40_000, np.random.default_rng(2))
    R = ppd.amortized_tokens(tree, a)
    assert abs(acc.mean() - R) < 0.03
    freq = np.bincount(states, minlength=4)[1:] / states.size
    np.testing.assert_allclose(freq, ppd.steady_state(ppd.transition_matrix(tree, a)), atol=0.02)
    # the hand tree too
    acc, _ = ppd.simulate_steps(TREE, A, 40_000, np.random.default_rng(3))
    assert abs(acc.mean() - 1.46 / 1.8) < 0.02


def test_hardware_aware_size():
    n, speed = ppd.best_tree_size([1, 2, 3], [1.0, 1.5, 1.8], [1.0, 1.0, 1.5])
    assert n == 2
    np.testing.assert_allclose(speed, [1.0, 1.5, 1.2])
    lat = ppd.roofline_latency(0.02, knee=32, slope=0.01)
    assert lat(np.array([1, 32]))[1] == pytest.approx(0.02) and lat(64) == pytest.approx(0.02 * 1.32)
    lin = ppd.linear_latency(0.026, (0.029 / 0.026 - 1) / 104)
    assert lin(105) == pytest.approx(0.029)
