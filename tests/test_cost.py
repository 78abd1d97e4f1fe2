"""The cost model's one home (specrepro.core.cost): τ, the step cost, and the hardware-aware tree size."""
import inspect

import numpy as np
import pytest
import torch

import simulations as sim
from specrepro.core import cost
from specrepro.drafters import medusa, ppd
from specrepro.drafters.base import TreeDrafter

RANKS = ((0.5, 0.2, 0.1, 0.05), (0.3, 0.15, 0.1, 0.05), (0.2, 0.1, 0.05, 0.05))


def test_tau_is_the_geometric_sum_with_the_alpha_one_guard():
    for alpha in (0.0, 0.3, 0.8, 0.999):
        for gamma in (0, 1, 4):
            assert cost.tau(alpha, gamma) == pytest.approx(sum(alpha ** i for i in range(gamma + 1)), rel=1e-12)
    assert cost.tau(1.0, 4) == 5.0 and isinstance(cost.tau(1.0, 4), float)  # no 0/0 at α = 1
    np.testing.assert_allclose(cost.tau(np.array([0.5, 1.0]), 3), [1.875, 4.0])


def test_tau_by_position_reduces_to_tau_and_multiplies_along_the_chain():
    np.testing.assert_allclose(cost.tau_by_position(np.full(5, 0.6)), [cost.tau(0.6, g) for g in range(1, 6)],
                               rtol=1e-12)
    np.testing.assert_allclose(cost.tau_by_position([0.9, 0.5, 0.0, 1.0]), [1.9, 2.35, 2.35, 2.35], rtol=1e-12)


def test_step_cost_in_steps_and_seconds():
    curve = sim.BetaCurve((1, 2, 4, 8), (1.0, 1.1, 1.3, 2.0))
    assert cost.step_cost(3, 0.1, curve) == pytest.approx(0.3 + 1.3)  # β(γ+1) = β(4)
    assert cost.step_cost(3, 0.1, 1.0) == pytest.approx(1.3)  # a constant β is the whole verification
    l_fp = lambda n: 0.01 * curve(n)  # noqa: E731 (seconds)
    assert cost.step_seconds(3, 0.1, l_fp) == pytest.approx(0.01 * (0.3 + 1.3))
    assert cost.step_seconds(0, 0.1, l_fp) == pytest.approx(0.01)  # γ = 0: a plain decode step
    assert cost.seconds_per_token(3, 0.8, 0.1, l_fp) == pytest.approx(0.01 * 1.6 / cost.tau(0.8, 3))
    # speedup = one target step per token over the step's seconds per token (the survey blog's E[speedup])
    assert 0.01 / cost.seconds_per_token(3, 0.8, 0.1, l_fp) == pytest.approx(cost.expected_speedup(0.8, 3, 0.1, curve))


def test_best_tree_size_scans_stops_and_breaks_ties_low():
    points = {1: (1.5, 1.0, 1.5), 2: (2.0, 1.0, 2.0), 3: (2.2, 1.1, 2.0), 4: (2.3, 1.2, 1.9), 5: (2.4, 1.0, 2.4)}
    assert cost.best_tree_size(points.get, range(1, 6))[0] == 5
    n, curve = cost.best_tree_size(points.get, range(1, 6), patience=2)  # stops at 4, two sizes after the best (2)
    assert n == 2 and sorted(curve) == [1, 2, 3, 4]
    n, curve = cost.best_tree_size(lambda k: points[k] if k < 3 else None, range(1, 6))  # 3 no longer fits
    assert n == 2 and sorted(curve) == [1, 2]
    with pytest.raises(ValueError, match="no tree size fits"):
        cost.best_tree_size(lambda k: None, range(1, 6))
    # the simulators' array form is the same scan
    assert sim.ppd.best_tree_size([1, 2, 3], [1.0, 1.5, 1.8], [1.0, 1.0, 1.5])[0] == 2


class FakeProfile:
    n_max = 24
    l_fp = staticmethod(lambda n: 1.0 + 0.05 * n)
    key = type("K", (), {"dtype": "fp32"})()


@pytest.mark.parametrize("module, config", [
    (medusa, medusa.MedusaConfig(hidden_size=8, rank_probs=RANKS)),
    (ppd, ppd.PPDConfig(hidden_size=8, rank_probs=RANKS)),
])
def test_tree_drafters_size_with_one_signature_through_the_cost_model(module, config, monkeypatch):
    assert list(inspect.signature(module.choose_tree_size).parameters)[:3] == ["config", "profile", "gamma"]
    seen = []
    real = cost.best_tree_size
    monkeypatch.setattr(cost, "best_tree_size", lambda *a, **k: seen.append(a) or real(*a, **k))
    choice = module.choose_tree_size(config, FakeProfile(), 3)
    assert len(seen) == 1 and choice.size in real(*seen[0])[1]
    assert choice.tau >= 1.0 and "hardware-aware" in choice.reason
    if module is medusa:  # the root and the n nodes in one forward
        assert choice.latency_s == FakeProfile.l_fp(choice.size + 1)


def test_medusa_sizes_its_tree_with_the_heads_drafting_cost():
    """The heads' drafting is paid once a step whatever the tree's size: the step's seconds include it, the predicted
    speedup falls with it, a tree at least as large pays (a fixed cost weighs less against more tokens), and the
    reason says so; the drafter measures it in place."""
    config = medusa.MedusaConfig(hidden_size=8, rank_probs=RANKS)
    free, costly = medusa.choose_tree_size(config, FakeProfile()), medusa.choose_tree_size(config, FakeProfile(),
                                                                                          draft_step_s=0.4)
    assert costly.latency_s == pytest.approx(FakeProfile.l_fp(costly.size + 1) + 0.4)
    assert costly.size >= free.size and "the heads' drafting 400.00 ms" in costly.reason
    assert "drafting" not in free.reason
    speedup = lambda c: float(c.reason.rsplit("predicted ", 1)[1].rstrip("x)"))  # noqa: E731
    assert speedup(costly) < speedup(free)
    lm_head = torch.nn.Linear(8, 32, bias=False)
    drafter = medusa.MedusaDrafter(medusa.MedusaHeads(8, 3), config, lm_head, tree_size=4)
    assert 0 < drafter.forward_seconds(repeats=3) < 1


def test_tree_drafters_declare_the_interface():
    with pytest.raises(TypeError):
        TreeDrafter(medusa.MedusaConfig(hidden_size=8, rank_probs=RANKS), 4)  # abstract: propose, resized
    lm_head = torch.nn.Linear(8, 32, bias=False)
    heads = medusa.MedusaDrafter(medusa.MedusaHeads(8, 3), medusa.MedusaConfig(hidden_size=8, rank_probs=RANKS),
                                 lm_head, tree_size=4)
    prompts = ppd.PPDDrafter(ppd.PromptTokens(8, 3, 1), ppd.PPDConfig(hidden_size=8, rank_probs=RANKS), lm_head,
                             tree_size=6)
    for drafter, size in ((heads, 9), (prompts, 10)):
        resized = drafter.resized(size)
        assert isinstance(resized, TreeDrafter) and type(resized) is type(drafter)
        assert resized.tree_size == size and resized.config is drafter.config and resized.config.rank_probs
