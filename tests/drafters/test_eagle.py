"""EAGLE: a one-layer draft on the target's features drafts a dynamic (EAGLE-2), static or chain tree."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from specrepro.decode.autoregressive import autoregressive_generate
from specrepro.core.config import DecodeConfig, SamplingConfig
from specrepro.drafters.eagle import EagleConfig, EagleDraft, EagleDrafter, load_draft, save_draft
from specrepro.decode.speculative import speculative_generate
from tests.helpers import PROMPT, check_cache, v8_model
from tests.stats import FALSE_ALARM, chi2_pvalue, exact_first_two

pytestmark = pytest.mark.usefixtures("one_thread")
RANKS = ((0.5, 0.2, 0.1, 0.05), (0.4, 0.15, 0.1, 0.05), (0.3, 0.1, 0.05, 0.05))


def random_draft(target, seed=0, layers=(-1,), vocab=0, scale=0.3):
    """A draft with random fc/fuse weights (so that it is neither the identity nor the target)."""
    config = EagleConfig(hidden_size=target.config.hidden_size, feature_layers=layers, draft_vocab=vocab,
                         depth=3, top_k=3, target="tiny", rank_probs=RANKS)
    torch.manual_seed(seed)
    draft = EagleDraft(target, config)
    with torch.no_grad():
        for lin in (draft.fc, draft.fuse):
            if lin is not None:
                lin.weight.add_(torch.randn_like(lin.weight) * scale)
        if vocab:
            draft.vocab.copy_(torch.sort(torch.randperm(target.config.vocab_size)[:vocab]).values)
    return draft.eval().requires_grad_(False), config


@pytest.mark.parametrize("shape, tree_size, layers, vocab", [
    ("dynamic", 6, (-1,), 0), ("dynamic", 1, (-1,), 0), ("static", 6, (-1,), 0), ("chain", 6, (-1,), 0),
    ("dynamic", 8, (1, -1), 40)])
def test_greedy_eagle_equals_autoregressive(tiny_pair_64, shape, tree_size, layers, vocab):
    target, _ = tiny_pair_64
    draft, config = random_draft(target, layers=layers, vocab=vocab)
    for prompt in ([1, 2, 3], [9, 40, 41, 12, 5, 5, 60]):
        ar = autoregressive_generate(target, prompt, DecodeConfig(method="ar", max_new_tokens=30))
        d = EagleDrafter(draft, config, tree_size=tree_size, shape=shape)
        rec = speculative_generate(target, d, prompt, DecodeConfig(max_new_tokens=30, gamma=3), method="eagle",
                                   on_step=check_cache)
        assert rec.token_ids == ar.token_ids
        assert max(rec.tree_sizes) <= (3 if shape == "chain" else tree_size)
        assert rec.target_calls - len(rec.tree_sizes) in (1, 2)  # the first step proposes nothing


def test_the_draft_cache_holds_exactly_the_committed_pairs(tiny_pair_64):
    """After every step the draft's cache holds the pairs (f_{j−1}, x_j) it has run, contiguous from the first,
    the queued pairs continue them up to the newest committed token, and the tree pairs it ran are gone (the cache
    grows with every step that proposed)."""
    target, _ = tiny_pair_64
    draft, config = random_draft(target)
    d = EagleDrafter(draft, config, tree_size=6)
    seen = []

    def check(cache, drafter, ids):
        ran = drafter.kv.length if drafter.kv is not None else 0
        queued = [j for _, _, j in drafter.pending]
        assert (drafter.kv is None or drafter.first + ran == queued[0]) and queued[-1] == len(ids) - 1
        seen.append(ran)
    speculative_generate(target, d, [9, 40, 41, 12, 5], DecodeConfig(max_new_tokens=20, gamma=3), on_step=check)
    assert seen[0] == 0 and all(b > a for a, b in zip(seen[1:-1], seen[2:-1])), seen  # (the last step: γ = 0)


def test_eagle_sampling_is_exact_chi2():
    target = v8_model()
    draft, config = random_draft(target, seed=1)
    sampling = SamplingConfig(temperature=1.0)
    counts = np.zeros((8, 8), dtype=np.int64)
    d = EagleDrafter(draft, config, tree_size=5)
    for seed in range(500):
        cfg = DecodeConfig(max_new_tokens=3, gamma=2, sampling=sampling, seed=seed, stop_at_eos=False)
        out = speculative_generate(target, d, PROMPT, cfg).token_ids
        counts[out[0], out[1]] += 1
    assert chi2_pvalue(counts, exact_first_two(target, PROMPT, sampling)) > FALSE_ALARM


def test_dynamic_tree_is_a_tree_of_the_asked_size_and_depth(tiny_pair_64):
    """After a verification the dynamic tree has tree_size nodes, parents before children, depth <= γ; the chain
    shape proposes γ tokens in a chain with γ draft forwards."""
    from specrepro.core.tree import depths
    target, _ = tiny_pair_64
    draft, config = random_draft(target)
    for shape, size in (("dynamic", 7), ("chain", 7)):
        d = EagleDrafter(draft, config, tree_size=size, shape=shape)
        props = []
        speculative_generate(target, d, [3, 4, 5, 6], DecodeConfig(max_new_tokens=12, gamma=3),
                             on_step=lambda c, dr, ids: props.append(dr.propose(ids, 3, SamplingConfig(),
                                                                                torch.Generator())))
        prop = props[0]
        parents = prop.tree_parents()
        assert all(p < i for i, p in enumerate(parents.tolist())) and int(depths(parents).max()) <= 3
        if shape == "dynamic":
            assert prop.size == 7 and prop.calls == 3
        else:
            assert parents.tolist() == [-1, 0, 1] and prop.calls == 3


def test_a_saved_draft_loads_the_same(tmp_path, tiny_pair_64):
    target, _ = tiny_pair_64
    draft, config = random_draft(target, layers=(0, -1), vocab=20)
    back, back_config = load_draft(save_draft(draft, config, tmp_path / "e"), target)
    assert back_config == config
    f, t = torch.randn(1, 4, 32), torch.tensor([[1, 2, 3, 4]])
    pos = torch.arange(4)[None]
    allowed = torch.ones(4, 4, dtype=torch.bool).tril()
    assert torch.allclose(back(back.reduce(torch.randn(1, 4, 64).fill_(0.1)), t, pos, allowed)[0],
                          draft(draft.reduce(torch.randn(1, 4, 64).fill_(0.1)), t, pos, allowed)[0])
    assert torch.equal(back.vocab, draft.vocab)
    with pytest.raises(ValueError, match="no EAGLE draft"):
        load_draft(tmp_path, target)
    del f


def test_bad_settings_get_one_clear_error(tiny_pair_64):
    target, _ = tiny_pair_64
    draft, config = random_draft(target)
    with pytest.raises(ValueError, match="tree shape"):
        EagleDrafter(draft, config, shape="bushy")
    with pytest.raises(ValueError, match="feature_layers must end with -1"):
        EagleDraft(target, EagleConfig(hidden_size=32, feature_layers=(-1, 0)))


def test_a_dynamic_tree_of_n_nodes_drafts_at_most_n_deep(tiny_pair_64):
    """A tree of N nodes is at most N deep, so the draft runs at most min(γ, N) forwards per proposal."""
    target, _ = tiny_pair_64
    draft, config = random_draft(target)
    rec = speculative_generate(target, EagleDrafter(draft, config, tree_size=2), [3, 4, 5, 6],
                               DecodeConfig(max_new_tokens=16, gamma=4))
    assert len(rec.tree_sizes) < rec.draft_calls <= 2 * len(rec.tree_sizes)  # (the last step: γ capped by the budget)


def test_the_tree_size_weighs_the_drafts_forwards(tiny_pair_64):
    """With each draft forward costing something, the hardware-aware size shrinks (a tree of n nodes runs min(n,
    depth) of them), the step's seconds include them, and the reason says so; the drafter measures its forward."""
    from specrepro.drafters.eagle import choose_tree_size

    class FakeProfile:
        n_max = 32
        l_fp = staticmethod(lambda n: 1.0 + 0.02 * n)
        key = type("K", (), {"dtype": "fp32"})()
    target, _ = tiny_pair_64
    draft, config = random_draft(target)
    free, costly = choose_tree_size(config, FakeProfile()), choose_tree_size(config, FakeProfile(), draft_step_s=0.3)
    depth = min(costly.size, config.depth)
    said = f"{depth} draft forward{'s' if depth != 1 else ''} of 300.00 ms"  # "1 draft forward", "2 draft forwards"
    assert costly.size < free.size and said in costly.reason
    assert "drafting" not in free.reason
    assert costly.latency_s == pytest.approx(FakeProfile.l_fp(costly.size + 1) + 0.3 * depth)
    seconds = EagleDrafter(draft, config, tree_size=4).forward_seconds(repeats=3)
    assert 0 < seconds < 1
