"""Token trees through the one verification loop: identity with greedy decoding, exactness by χ², the cache.

A chain is the tree whose every node has one child, so every test of the loop (test_speculative, drafters/test_ngram)
already runs through tree scoring; here the proposals branch: several sampled drafts (SpecTr/SpecInfer-style)
and the draft's top-k candidates continued greedily.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from specrepro.acceptance import TREE_RULES, TreeVerdict
from specrepro.decode.autoregressive import autoregressive_generate
from specrepro.core.config import DecodeConfig, SamplingConfig
from specrepro.drafters import Drafter, Proposal
from specrepro.drafters.lm_tree import MultiDraftDrafter, TopKTreeDrafter
from specrepro.decode.speculative import speculative_generate
from specrepro.core.warping import sample
from tests.helpers import PROMPT, V, check_cache, v8_model
from tests.stats import FALSE_ALARM, RUNS, chi2_pvalue, exact_first_two

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def small_pair():
    """Target and draft over V = 8 (far apart, so siblings are often rejected)."""
    return v8_model(), v8_model(11)


@pytest.mark.parametrize("make", [lambda d: TopKTreeDrafter(d, k=2), lambda d: TopKTreeDrafter(d, k=3),
                                  lambda d: MultiDraftDrafter(d, num_drafts=3)])
@pytest.mark.parametrize("gamma", [1, 3])
def test_greedy_tree_decoding_equals_autoregressive(tiny_pair_64, make, gamma):
    target, draft = tiny_pair_64
    for prompt in ([1, 2, 3], [9, 40, 41, 12, 5, 5, 60]):
        ar = autoregressive_generate(target, prompt, DecodeConfig(method="ar", max_new_tokens=30))
        for rule in (TREE_RULES["exact"], TREE_RULES["greedy"]):
            rec = speculative_generate(target, make(draft), prompt, DecodeConfig(max_new_tokens=30, gamma=gamma),
                                       rule=rule, on_step=check_cache)
            assert rec.token_ids == ar.token_ids
            assert all(n >= g for n, g in zip(rec.tree_sizes, rec.proposed_lengths))


def test_a_wider_tree_accepts_at_least_as_much_at_t0(tiny_pair_64):
    """At T = 0 the top-3 tree contains the top-1 chain, so it accepts at least as many tokens per step."""
    target, draft = tiny_pair_64
    config = DecodeConfig(max_new_tokens=40, gamma=3)
    chain = speculative_generate(target, TopKTreeDrafter(draft, k=1), [1, 2, 3], config)
    tree = speculative_generate(target, TopKTreeDrafter(draft, k=3), [1, 2, 3], config)
    assert tree.token_ids == chain.token_ids and tree.target_calls <= chain.target_calls
    assert tree.tree_sizes[0] == 9 and chain.tree_sizes[0] == 3


def first_two(target, drafter, rule=TREE_RULES["exact"], runs=RUNS) -> np.ndarray:
    counts = np.zeros((V, V), dtype=np.int64)
    sampling = SamplingConfig(temperature=1.0)
    for seed in range(runs):
        cfg = DecodeConfig(max_new_tokens=3, gamma=2, sampling=sampling, seed=seed, stop_at_eos=False)
        out = speculative_generate(target, drafter, PROMPT, cfg, rule=rule, on_step=check_cache).token_ids
        counts[out[0], out[1]] += 1
    return counts


@pytest.mark.parametrize("make", [lambda d: MultiDraftDrafter(d, num_drafts=2),
                                  lambda d: MultiDraftDrafter(d, num_drafts=4), lambda d: TopKTreeDrafter(d, k=3)])
def test_tree_sampling_through_the_loop_is_exact(small_pair, make):
    target, draft = small_pair
    counts = first_two(target, make(draft))
    assert chi2_pvalue(counts, exact_first_two(target, PROMPT, SamplingConfig(temperature=1.0))) > FALSE_ALARM


def test_chi2_through_the_loop_catches_a_residual_not_carried_across_siblings(small_pair):
    """Power check: testing every sibling against p (not the residual left by the rejected ones) is wrong."""
    def no_residual(p, q, tokens, parents, uniforms) -> TreeVerdict:
        node, path, row = -1, [], p[0]
        while True:
            kids = (parents == node).nonzero().flatten().tolist()
            accepted = next((c for c in kids if uniforms[c] * q[c, tokens[c]] < row[tokens[c]]), None)
            if accepted is None:
                residual = row.double()
                for c in kids:
                    residual = (residual - q[c].double()).clamp_min(0)
                residual = residual if residual.sum() > 0 else row.double()
                return TreeVerdict(path, sample(residual, uniforms[-1]))
            node, path, row = accepted, path + [accepted], p[accepted + 1]
    target, draft = small_pair
    counts = first_two(target, MultiDraftDrafter(draft, num_drafts=4), rule=no_residual)
    assert chi2_pvalue(counts, exact_first_two(target, PROMPT, SamplingConfig(temperature=1.0))) < FALSE_ALARM


def test_typical_acceptance_is_labelled_lossy_and_never_the_default(tiny_pair_64):
    target, draft = tiny_pair_64
    config = DecodeConfig(max_new_tokens=12, gamma=2, sampling=SamplingConfig(temperature=0.7))
    rec = speculative_generate(target, TopKTreeDrafter(draft, k=2), [1, 2, 3], config, rule=TREE_RULES["typical"])
    assert rec.provenance["acceptance"]["name"] == "typical" and rec.provenance["acceptance"]["lossless"] is False
    default = speculative_generate(target, TopKTreeDrafter(draft, k=2), [1, 2, 3], config)
    assert default.provenance["acceptance"] == {"name": "exact", "lossless": True, "params": None}


class BadTree(Drafter):
    def __init__(self, parents, size=2):
        self.parents, self.size = parents, size

    def propose(self, ids, gamma, sampling, generator):
        return Proposal(tokens=torch.ones(self.size, dtype=torch.long), probs=None,
                        parents=torch.tensor(self.parents))


def test_bad_trees_get_one_clear_error(tiny_pair_64):
    target, _ = tiny_pair_64
    with pytest.raises(ValueError, match="parent index must be"):
        speculative_generate(target, BadTree([1, -1]), [1, 2, 3], DecodeConfig(max_new_tokens=5, gamma=2))
    with pytest.raises(ValueError, match="needs 2 parent indices"):
        speculative_generate(target, BadTree([-1]), [1, 2, 3], DecodeConfig(max_new_tokens=5, gamma=2))
    deep = BadTree(list(range(-1, 599)), size=600)  # a chain deeper than the 512-token context
    with pytest.raises(ValueError, match="context"):
        speculative_generate(target, deep, [1, 2, 3], DecodeConfig(max_new_tokens=5, gamma=2))
    with pytest.raises(ValueError, match="num_drafts"):
        MultiDraftDrafter(target, num_drafts=0)
    with pytest.raises(ValueError, match="k must be"):
        TopKTreeDrafter(target, k=0)
