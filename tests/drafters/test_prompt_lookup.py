"""Prompt lookup (drafters/prompt_lookup.py): the longest, most recent match, copies of the context only, and an
empty proposal is one plain step. Its exactness at T = 1 is tested with the other zero-cost drafts in test_ngram."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from specrepro.decode.autoregressive import autoregressive_generate
from specrepro.core.config import DecodeConfig, SamplingConfig
from specrepro.drafters import PromptLookupDrafter
from specrepro.drafters.prompt_lookup import lookup
from specrepro.decode.speculative import speculative_generate
from tests.helpers import v8_model

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def target():
    return v8_model()


def test_lookup_prefers_longest_then_most_recent_match():
    ids = [7, 1, 2, 9, 5, 1, 2, 3, 4, 0, 1, 2]
    assert lookup(ids, 2, max_ngram=3) == [3, 4]  # "1 2" last seen before "3 4"; no 3-gram match
    assert lookup([5, 6, 7, 8, 6, 7, 9, 6, 7], 3, max_ngram=2) == [9, 6, 7]
    assert lookup([5, 6, 7, 8, 6, 7, 9, 5, 6, 7], 3, max_ngram=3) == [8, 6, 7]  # the 3-gram beats the 2-gram
    assert lookup([1, 2, 3], 4) == []  # nothing repeats: no proposal
    assert lookup([4], 4) == []
    assert lookup([3, 1, 3], 5) == [1, 3]  # never more than the context holds


def test_prompt_lookup_proposes_only_context_tokens():
    rng = np.random.default_rng(0)
    drafter = PromptLookupDrafter(max_ngram=3, min_ngram=1)
    for _ in range(200):
        ids = rng.integers(0, 50, size=rng.integers(1, 40)).tolist()
        prop = drafter.propose(ids, 5, SamplingConfig(), torch.Generator())
        assert prop.probs is None and len(prop.tokens) <= 5
        assert set(prop.tokens.tolist()) <= set(ids)
        toks = prop.tokens.tolist()
        if toks:  # a verbatim copy of what followed an earlier occurrence of some suffix
            assert any(ids[i:i + len(toks)] == toks for i in range(1, len(ids)))


def test_empty_proposal_takes_one_plain_step(target):
    cfg = DecodeConfig(max_new_tokens=6, gamma=4, seed=0, stop_at_eos=False)
    rec = speculative_generate(target, PromptLookupDrafter(), [0, 1, 2, 3], cfg)  # no repeats to copy at first
    ar = autoregressive_generate(target, [0, 1, 2, 3], cfg)
    assert rec.token_ids == ar.token_ids
    assert rec.target_calls >= len(rec.accept_lengths) + 1  # at least the first step proposed nothing
