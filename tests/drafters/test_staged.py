"""Staged and fused drafters: a draft model sped up by a zero-cost draft, both levels exact.

- The staged chain is distributed as the draft model's own autoregressive chain (χ² on its first two tokens against
  q(x1) q(x2 | x1) from the draft's logits), and carries the draft's warped rows at its positions.
- Through the one loop: token-identical to greedy decoding at T = 0 in fp32, and at T = 1 the first two emitted
  tokens follow the target's p (χ², the exactness of the two levels together).
- Power checks: the same χ² tests reject a staged drafter whose inner level draws from q instead of the residual,
  and one that reports a one-hot q for the tokens its inner drafter proposed.
- Fewer draft forwards than γ per proposal when the inner drafter hits; caches equal the committed ids after every
  step; token sources add up; bad input gets one clear error.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from specrepro.acceptance import TREE_RULES, TreeVerdict
from specrepro.decode.autoregressive import autoregressive_generate
from specrepro.core.config import DecodeConfig, SamplingConfig
from specrepro.drafters import (
    Drafter, LMDrafter, NGramDrafter, PromptLookupDrafter, Proposal, fit_ngram,
)
from specrepro.drafters.staged import FROM_DRAFT, FROM_INNER, FROM_LOOKUP, FROM_TARGET, FusedDrafter, StagedDrafter
from specrepro.decode.speculative import speculative_generate
from specrepro.core.warping import one_hot, sample, warp
from tests.helpers import PROMPT, V, v8_model
from tests.stats import FALSE_ALARM, chi2_pvalue, exact_first_two, first_two_counts

pytestmark = pytest.mark.usefixtures("one_thread")
CHAIN_RUNS = 600  # proposals per χ² test of the chain
LOOP_RUNS = 400  # generations per χ² test through the loop
FILL_PROMPT = [1, 4, 6, 3, 6, 6]  # "6" last seen just before the end: a one-token lookup that fill completes
T1 = SamplingConfig(temperature=1.0)


@pytest.fixture(scope="module")
def small_pair():
    """Target p (v8_model(), as in drafters/test_ngram) and draft q over V = 8. After PROMPT the draft gives the
    lookup's first token (6) q ≈ 0.48 and its second (3, after 6) q ≈ 0.47, so the inner level accepts and rejects
    both often."""
    return v8_model(), v8_model(7)


def bigram(vocab_size: int) -> NGramDrafter:
    """A sampling bigram fitted on random ids: its q rows are far from the draft's, so the inner level rejects."""
    g = torch.Generator().manual_seed(0)
    return NGramDrafter(fit_ngram(torch.randint(0, vocab_size, (20, 12), generator=g).tolist(), vocab_size, order=2,
                                  add_k=0.5))


def resample_from_p(p, q, tokens, parents, uniforms) -> TreeVerdict:
    """A wrong chain rule (for power checks): after a rejection, draw from p instead of norm(max(0, p − q))."""
    n = len(tokens)
    for i in range(n):
        if uniforms[i] * q[i, tokens[i]] >= p[i, tokens[i]]:
            return TreeVerdict(list(range(i)), sample(p[i], uniforms[n]))
    return TreeVerdict(list(range(n)), sample(p[n], uniforms[n]))


class OneHotInnerRows(StagedDrafter):
    """Wrong on purpose: reports a one-hot q for the tokens the inner drafter proposed, though they were sampled."""

    def propose(self, ids, gamma, sampling, generator):
        prop = super().propose(ids, gamma, sampling, generator)
        inner = torch.tensor([s == FROM_INNER for s in self.last_sources], dtype=torch.bool)  # [γ]
        if inner.any():
            prop.probs[inner] = one_hot(prop.tokens[inner], prop.probs.shape[-1])
        return prop


def check_caches(p_model, drafter, ids):
    """After every step: the target's cache holds the committed ids but the newest; the draft's a prefix of them."""
    p_model.check()
    assert p_model.ids == ids[:-1] and p_model.tree is None
    drafter.lm.check()
    assert drafter.lm.tree is None and drafter.lm.ids == ids[:len(drafter.lm.ids)]


# ------------------------------------------------------------------------------------------ the staged chain


def chain_counts(drafter: Drafter, draft: torch.nn.Module, runs: int = CHAIN_RUNS) -> np.ndarray:
    """Counts of the chain's first two tokens over ``runs`` proposals of γ = 3 after PROMPT (a lookup hit)."""
    counts = np.zeros((V, V), dtype=np.int64)
    for seed in range(runs):
        drafter.reset()
        prop = drafter.propose(PROMPT, 3, T1, torch.Generator().manual_seed(seed))
        counts[int(prop.tokens[0]), int(prop.tokens[1])] += 1
    return counts


@pytest.mark.parametrize("inner", ["lookup", "bigram"])
def test_staged_chain_is_distributed_as_the_drafts_own_chain(small_pair, inner):
    """χ² of the first two chain tokens against q(x1) q(x2 | x1) from the draft's logits: the exact law of
    ``LMDrafter``'s chain (``sample_chain``), so a pass says the staged chain is distributed as the draft's own."""
    _, draft = small_pair
    zero_cost = PromptLookupDrafter() if inner == "lookup" else bigram(V)
    drafter = StagedDrafter(draft, zero_cost, inner_gamma=2)
    assert chi2_pvalue(chain_counts(drafter, draft), exact_first_two(draft, PROMPT, T1)) > FALSE_ALARM


def test_chain_chi2_catches_an_inner_level_without_the_residual(small_pair):
    """Power check: the same test rejects an inner rule that draws from q, not its residual, after a rejection."""
    _, draft = small_pair
    drafter = StagedDrafter(draft, PromptLookupDrafter(), inner_gamma=2, rule=resample_from_p)
    assert chi2_pvalue(chain_counts(drafter, draft), exact_first_two(draft, PROMPT, T1)) < FALSE_ALARM


@pytest.mark.parametrize("sampling", [SamplingConfig(temperature=1.0),
                                      SamplingConfig(temperature=0.7, top_k=5, top_p=0.9)])
def test_staged_rows_are_the_drafts_warped_rows(tiny_pair_64, sampling):
    """Each chain token carries the draft's warped row after the ids and the chain before it (fresh forwards)."""
    _, draft = tiny_pair_64
    drafter = StagedDrafter(draft, PromptLookupDrafter(), inner_gamma=3)
    ids = [5, 9, 12, 5, 9, 12, 5, 9]  # a lookup hit at every round
    for seed in range(5):
        prop = drafter.propose(ids, 6, sampling, torch.Generator().manual_seed(seed))
        chain = prop.tokens.tolist()
        assert len(chain) == 6 and prop.probs.shape == (6, 64) and len(drafter.last_sources) == 6
        with torch.inference_mode():
            fresh = warp(draft(input_ids=torch.tensor([ids + chain[:-1]])).logits[0, len(ids) - 1:], sampling)
        torch.testing.assert_close(prop.probs, fresh, atol=1e-5, rtol=1e-4)
        assert all(fresh[i, x] > 0 for i, x in enumerate(chain))  # never a token q rules out
        drafter.reset()


# ------------------------------------------------------------------------------------------- through the loop


def drafters_for(draft: torch.nn.Module, vocab_size: int) -> dict:
    return {
        "staged-lookup": StagedDrafter(draft, PromptLookupDrafter(), inner_gamma=2),
        "staged-bigram": StagedDrafter(draft, bigram(vocab_size), inner_gamma=3),
        "fused": FusedDrafter(draft, PromptLookupDrafter()),
        "fused-fill": FusedDrafter(draft, PromptLookupDrafter(), fill=True),
    }


@pytest.mark.parametrize("name", ["staged-lookup", "staged-bigram", "fused", "fused-fill"])
def test_greedy_decoding_equals_autoregressive(tiny_pair_64, name):
    target, draft = tiny_pair_64
    drafter = drafters_for(draft, 64)[name]
    for prompt in ([1, 2, 3], [9, 40, 41, 12, 9, 40, 41, 12, 9, 40]):
        ar = autoregressive_generate(target, prompt, DecodeConfig(method="ar", max_new_tokens=30))
        for gamma in (1, 4):
            rec = speculative_generate(target, drafter, prompt, DecodeConfig(max_new_tokens=30, gamma=gamma),
                                       on_step=check_caches)
            assert rec.token_ids == ar.token_ids
            assert len(drafter.committed_sources) == len(rec.token_ids)


def loop_first_two(target, drafter, prompt: list[int]) -> np.ndarray:
    """Counts of the first two emitted tokens at T = 1 (γ = 2: the first step drafts both), caches checked."""
    return first_two_counts(target, drafter, T1, runs=LOOP_RUNS, prompt=prompt, on_step=check_caches)


@pytest.mark.parametrize("name, prompt", [("staged-lookup", PROMPT), ("staged-bigram", PROMPT),
                                          ("fused-fill", FILL_PROMPT)], ids=["staged-lookup", "staged-bigram",
                                                                             "fused-fill"])
def test_sampling_through_the_loop_is_exact_chi2(small_pair, name, prompt):
    """The first two emitted tokens follow p(x1) p(x2 | x1): both levels exact together. Fused with ``fill``
    proposes a copied token (one-hot row) then a sampled one (its q row), the mixed case."""
    target, draft = small_pair
    counts = loop_first_two(target, drafters_for(draft, V)[name], prompt)
    assert chi2_pvalue(counts, exact_first_two(target, prompt, T1)) > FALSE_ALARM


def test_loop_chi2_catches_rows_that_are_not_the_tokens_laws(small_pair):
    """Power check of the test above: one-hot rows for the inner drafter's tokens (sampled from q) are rejected."""
    target, draft = small_pair
    counts = loop_first_two(target, OneHotInnerRows(draft, PromptLookupDrafter(), inner_gamma=2), PROMPT)
    assert chi2_pvalue(counts, exact_first_two(target, PROMPT, T1)) < FALSE_ALARM


# ------------------------------------------------------------------------------- calls, caches, token sources


@pytest.fixture(scope="module")
def cyclic(tiny_pair_64):
    """The draft's own greedy text after [1, 2, 3]: a random tiny model falls into a short cycle, so it repeats."""
    _, draft = tiny_pair_64
    return [1, 2, 3] + autoregressive_generate(draft, [1, 2, 3], DecodeConfig(method="ar", max_new_tokens=30)).token_ids


def test_staged_takes_fewer_draft_calls_than_gamma_on_repetitive_text(tiny_pair_64, cyclic):
    """Self-speculation at T = 0 (the draft as its own target): every lookup the draft accepts saves a forward."""
    _, draft = tiny_pair_64
    config = DecodeConfig(max_new_tokens=40, gamma=4)
    staged = StagedDrafter(draft, PromptLookupDrafter(), inner_gamma=3)
    rec = speculative_generate(draft, staged, cyclic, config, on_step=check_caches)
    plain = speculative_generate(draft, LMDrafter(draft), cyclic, config)
    assert rec.token_ids == plain.token_ids == autoregressive_generate(draft, cyclic, config).token_ids
    proposals = len(rec.proposed_lengths)
    assert plain.draft_calls == sum(plain.proposed_lengths)  # γ forwards per proposal without an inner drafter
    assert rec.draft_calls / proposals < 1.5 < config.gamma  # one round per proposal when the lookup is right
    assert staged.committed_sources.count(FROM_INNER) > len(rec.token_ids) / 2


def test_fused_takes_lookups_without_draft_calls(tiny_pair_64, cyclic):
    _, draft = tiny_pair_64
    fused = FusedDrafter(draft, PromptLookupDrafter())
    prop = fused.propose(cyclic, 4, SamplingConfig(temperature=1.0), torch.Generator().manual_seed(0))
    assert prop.calls == 0 and prop.probs is None and len(prop.tokens) >= 1
    assert fused.last_sources == [FROM_LOOKUP] * len(prop.tokens)
    miss = fused.propose([1, 2, 3], 4, SamplingConfig(temperature=1.0), torch.Generator().manual_seed(0))
    assert miss.calls == 4 and miss.probs.shape == (4, 64) and fused.last_sources == [FROM_DRAFT] * 4
    filled = FusedDrafter(draft, PromptLookupDrafter(), fill=True)
    short = filled.propose([7, 8, 7], 4, SamplingConfig(temperature=1.0), torch.Generator().manual_seed(0))
    assert short.tokens[:2].tolist() == [8, 7] and short.calls == 2  # "7" matched at the start: copy "8 7"
    assert filled.last_sources == [FROM_LOOKUP] * 2 + [FROM_DRAFT] * 2
    torch.testing.assert_close(short.probs[:2], one_hot(torch.tensor([8, 7]), 64))


@pytest.mark.parametrize("name", ["staged-lookup", "fused"])
def test_committed_sources_label_every_token_and_one_target_token_per_step(tiny_pair_64, cyclic, name):
    target, draft = tiny_pair_64
    drafter = drafters_for(draft, 64)[name]
    config = DecodeConfig(max_new_tokens=25, gamma=3, sampling=T1, seed=4, stop_at_eos=False)
    rec = speculative_generate(target, drafter, cyclic, config, on_step=check_caches)
    sources = drafter.committed_sources
    assert len(sources) == len(rec.token_ids) and sources.count(FROM_TARGET) == rec.target_calls
    assert set(sources) <= {FROM_TARGET, FROM_DRAFT, FROM_INNER if name.startswith("staged") else FROM_LOOKUP}
    drafter.reset()
    assert drafter.committed_sources == [] and drafter.last_sources == [] and drafter.lm.ids == []


class NeedsHidden(PromptLookupDrafter):
    needs_hidden = True


def test_bad_input_gets_one_clear_error(tiny_pair_64):
    _, draft = tiny_pair_64
    for bad in (0, -2, 1.5):
        with pytest.raises(ValueError, match="inner_gamma"):
            StagedDrafter(draft, PromptLookupDrafter(), inner_gamma=bad)
    with pytest.raises(ValueError, match="inner must be a Drafter"):
        StagedDrafter(draft, "prompt-lookup")
    with pytest.raises(ValueError, match="hidden states"):
        StagedDrafter(draft, NeedsHidden())
    with pytest.raises(ValueError, match="lookup must be a Drafter"):
        FusedDrafter(draft, None)
