"""N-gram drafts (drafters/ngram.py), and every zero-cost draft (unigram, bigram, prompt lookup) plugged into the
one verification loop stays exact.

Exactness is checked statistically: the first two generated tokens of many seeded runs on a tiny random
target (V = 8) are compared with the exact joint distribution p(x1) p(x2 | x1), computed from the
target's own logits, by a χ² goodness-of-fit test (tests/stats.py: FALSE_ALARM per test, cells with
an expected count below 5 pooled); the seeds are fixed, so the outcome is deterministic. A last test
shows the same check, with the same number of runs, rejects a subtly wrong sampler.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from specrepro.decode.autoregressive import autoregressive_generate
from specrepro.core.config import DecodeConfig, SamplingConfig
from specrepro.drafters import NGramDrafter, NGramTable, PromptLookupDrafter, fit_ngram
from specrepro.run.generate import generate_ids
from specrepro.methods import drafter_for
from specrepro.engine.models import LoadedModel
from specrepro.decode.speculative import speculative_generate
from specrepro.core.warping import sample
from tests.helpers import PROMPT, V, v8_model
from tests.stats import FALSE_ALARM, chi2_pvalue, exact_first_two, first_two_counts

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def target():
    return v8_model()


@pytest.fixture(scope="module")
def table():
    # Fitted on random sequences: q is far from p, so rejections and residual draws are frequent.
    g = torch.Generator().manual_seed(0)
    return fit_ngram(torch.randint(0, V, (20, 12), generator=g).tolist(), V, order=2, add_k=0.5)


def drafters(table: NGramTable) -> dict:
    unigram = dataclasses.replace(table, order=1)
    return {
        "unigram": NGramDrafter(unigram), "bigram": NGramDrafter(table),
        "unigram-argmax": NGramDrafter(unigram, sample=False), "bigram-argmax": NGramDrafter(table, sample=False),
        "prompt-lookup": PromptLookupDrafter(),
    }


DRAFTERS = ("unigram", "bigram", "unigram-argmax", "bigram-argmax", "prompt-lookup")


# ----------------------------------------------------------------------------------------- n-gram tables


def test_fit_counts_and_smoothing():
    t = fit_ngram([[0, 1, 1, 2], [1, 2]], vocab_size=4, order=2, backoff=1.0)
    assert t.unigram.tolist() == [1, 3, 2, 0]
    u = t.unigram_probs()
    np.testing.assert_allclose(u, [1 / 6, 3 / 6, 2 / 6, 0])
    # c(1, ·) = {1: 1, 2: 2}: q(x | 1) = (c(1, x) + u(x)) / (3 + 1)
    np.testing.assert_allclose(t.probs(1), (np.array([0, 1, 2, 0]) + u) / 4)
    np.testing.assert_allclose(t.probs(3), u)  # unseen context backs off to the unigram
    assert t.probs(0).sum() == pytest.approx(1.0)
    assert t.argmax(0) == 1 and t.argmax(1) == 2


def test_fit_refuses_out_of_range_ids():
    with pytest.raises(ValueError, match="token ids"):
        fit_ngram([[0, 5]], vocab_size=4, order=1)


def test_table_save_load_round_trip(tmp_path, table):
    path = table.save(tmp_path / "t.npz")
    back = NGramTable.load(path)
    assert back.order == 2 and back.vocab_size == V and back.add_k == table.add_k
    for name in ("unigram", "indptr", "indices", "counts"):
        np.testing.assert_array_equal(getattr(back, name), getattr(table, name))
    for prev in range(V):
        np.testing.assert_allclose(back.probs(prev), table.probs(prev))


def test_registry_builds_ngram_drafters_from_a_file(tmp_path, table):
    path = str(table.save(tmp_path / "t.npz"))
    uni, bi = drafter_for(path, "unigram"), drafter_for(path, "bigram")
    assert uni.table.order == 1 and bi.table.order == 2  # one bigram file serves both methods
    with pytest.raises(ValueError, match="n-gram table"):
        drafter_for(None, "bigram")


def test_sampled_ngram_proposal_carries_its_distribution(table):
    drafter = NGramDrafter(table)
    sampling = SamplingConfig(temperature=1.0)
    prop = drafter.propose([3], 3, sampling, torch.Generator().manual_seed(1))
    assert prop.tokens.shape == (3,) and prop.probs.shape == (3, V) and prop.calls == 0
    prev = [3] + prop.tokens.tolist()[:-1]
    for i in range(3):  # each row is q(· | previous token), at T = 1 the table itself
        np.testing.assert_allclose(prop.probs[i].numpy(), table.probs(prev[i]), atol=1e-6)
    greedy = drafter.propose([3], 3, SamplingConfig(temperature=0.0), torch.Generator())
    assert greedy.probs is None  # T = 0: the argmax chain, one-hot q


# ------------------------------------------------------------------------------------ exactness, T = 0


@pytest.mark.parametrize("name", DRAFTERS)
def test_greedy_equals_autoregressive(target, table, name):
    drafter = drafters(table)[name]
    for prompt in (PROMPT, [2, 5, 2, 5, 2]):
        cfg = DecodeConfig(max_new_tokens=20, gamma=3, seed=0, stop_at_eos=False)
        checks = []
        rec = speculative_generate(target, drafter, prompt, cfg,
                                   on_step=lambda cache, d, ids: checks.append(cache.check() or
                                                                               len(cache.ids) == len(ids) - 1))
        assert rec.token_ids == autoregressive_generate(target, prompt, cfg).token_ids
        assert all(checks)  # cache length == committed length - 1 after every step


def test_generate_ids_dispatches_new_methods(target, table, tmp_path):
    loaded = LoadedModel("tiny", target, None)
    cfg = DecodeConfig(method="ar", max_new_tokens=8, seed=0)
    ar = generate_ids(loaded, PROMPT, cfg).token_ids
    path = str(table.save(tmp_path / "t.npz"))
    for method, draft in (("prompt-lookup", None), ("unigram", path), ("bigram", table)):
        rec = generate_ids(loaded, PROMPT, DecodeConfig(method=method, max_new_tokens=8, seed=0), draft=draft)
        assert rec.method == method and rec.token_ids == ar and rec.draft_calls == 0


# --------------------------------------------------------------------------------- exactness, χ² at T = 1


@pytest.mark.parametrize("name", DRAFTERS)
def test_sampling_is_exact_chi2(target, table, name):
    sampling = SamplingConfig(temperature=1.0)
    counts = first_two_counts(target, drafters(table)[name], sampling)
    assert chi2_pvalue(counts, exact_first_two(target, PROMPT, sampling)) > FALSE_ALARM


def test_chi2_detects_a_subtly_wrong_sampler(target, table):
    """The classic bug, drawing from p instead of norm(max(0, p − q)) after a rejection, fails the test."""
    def resample_from_p(p, q, draft_tokens, parents, uniforms):  # a chain rule in the loop's tree signature
        gamma = len(draft_tokens)
        for i in range(gamma):
            if uniforms[i] * q[i, draft_tokens[i]] >= p[i, draft_tokens[i]]:
                return list(range(i)), sample(p[i], uniforms[gamma])
        return list(range(gamma)), sample(p[gamma], uniforms[gamma])
    sampling = SamplingConfig(temperature=1.0)
    counts = first_two_counts(target, drafters(table)["bigram"], sampling, rule=resample_from_p)
    assert chi2_pvalue(counts, exact_first_two(target, PROMPT, sampling)) < FALSE_ALARM
