"""Beam search and sampling against brute-force enumeration, MJGD against greedy decoding, the beam cache.

Beam search is exact once the beam holds every partial sequence (num_beams >= V^(K−1)); on a 5-token vocabulary
all V^K continuations can be scored directly, which pins the search, its log-likelihoods and its rows.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy import stats

from specrepro.decode.autoregressive import autoregressive_generate
from specrepro.core.beam import beam_sample, beam_search, sample_without_replacement
from specrepro.core.config import DecodeConfig, SamplingConfig
from specrepro.core.kvcache import BeamCache, CachedModel
from specrepro.decode.mjgd import mjgd_generate
from specrepro.engine.models import tiny_model
from specrepro.core.warping import warp
from tests.stats import FALSE_ALARM

pytestmark = pytest.mark.usefixtures("one_thread")
V = 5
PREFIXES = ([1, 2, 3], [0, 4, 4, 1, 2, 0, 3], [2], [3, 3, 1, 0])


@pytest.fixture(scope="module")
def model():
    return tiny_model(vocab_size=V, n_layers=2, hidden=32, seed=4)


def forward_logits(model, seqs: list[list[int]]) -> torch.Tensor:
    """Logits [S, T, V] of a fresh forward (no cache) over equally long sequences."""
    with torch.inference_mode():
        return model(input_ids=torch.tensor(seqs)).logits


def enumerate_joint(model, prefix: list[int], k: int, rows=lambda logits: logits.double().log_softmax(-1)):
    """Every continuation of length k with its joint log-likelihood under ``rows`` (log-probs from logits)."""
    conts = [list(c) for c in itertools.product(range(V), repeat=k)]
    logp = rows(forward_logits(model, [prefix + c for c in conts])[:, len(prefix) - 1:-1])  # [V^k, k, V]
    joint = logp.gather(-1, torch.tensor(conts)[..., None])[..., 0].sum(-1)  # [V^k]
    return conts, joint


def greedy_continuation(model, prefix: list[int], k: int) -> list[int]:
    seq = list(prefix)
    for _ in range(k):
        seq.append(int(forward_logits(model, [seq])[0, -1].argmax()))
    return seq[len(prefix):]


def joint_of(model, prefix: list[int], cont: list[int]) -> float:
    logp = forward_logits(model, [prefix + cont])[0, len(prefix) - 1:-1].double().log_softmax(-1)  # [k, V]
    return float(logp[torch.arange(len(cont)), torch.tensor(cont)].sum())


@pytest.mark.parametrize("k", [2, 3])
def test_a_full_beam_finds_the_exact_argmax_of_the_joint(model, k):
    narrow_misses = 0
    for prefix in PREFIXES:
        conts, joint = enumerate_joint(model, prefix, k)
        exact = conts[int(joint.argmax())]
        for num_beams in (V ** (k - 1), V ** k):
            found = beam_search(CachedModel(model), prefix, k, num_beams)
            assert found.tokens == exact and found.forwards == k
            assert found.log_likelihood == pytest.approx(float(joint.max()), abs=1e-4)
        for num_beams in (1, 2):
            narrow = beam_search(CachedModel(model), prefix, k, num_beams)
            assert narrow.log_likelihood <= float(joint.max()) + 1e-4
            narrow_misses += narrow.tokens != exact
        assert beam_search(CachedModel(model), prefix, k, 1).tokens == greedy_continuation(model, prefix, k)
    assert narrow_misses > 0  # power: the narrow beams do miss the optimum on these prefixes, the full one never


def test_beam_results_carry_their_rows_and_likelihood(model):
    for prefix in PREFIXES:
        found = beam_search(CachedModel(model), prefix, 4, 3)
        logits = forward_logits(model, [prefix + found.tokens])[0, len(prefix) - 1:-1]  # [4, V]
        torch.testing.assert_close(found.probs, logits.float().softmax(-1), atol=1e-5, rtol=0)
        picked = found.probs.double()[torch.arange(4), torch.tensor(found.tokens)].log().sum()
        assert found.log_likelihood == pytest.approx(float(picked), abs=1e-4)


@pytest.mark.parametrize("sampling", [SamplingConfig(temperature=1.0), SamplingConfig(temperature=0.8, top_k=3)])
def test_a_full_beam_sample_finds_the_argmax_of_the_warped_joint(model, sampling):
    """With num_beams >= V every beam draws all its possible tokens, whatever the uniforms: the search is exhaustive
    over the warped joint (tokens outside top-k have likelihood 0 and never appear)."""
    for prefix in PREFIXES[:2]:
        conts, joint = enumerate_joint(model, prefix, 3, rows=lambda logits: warp(logits, sampling).double().log())
        for seed in range(2):
            found = beam_sample(CachedModel(model), prefix, 3, V ** 2, sampling, torch.Generator().manual_seed(seed))
            assert found.tokens == conts[int(joint.argmax())]
            assert found.log_likelihood == pytest.approx(float(joint.max()), abs=1e-4)


def test_sampling_without_replacement_follows_the_successive_conditionals():
    """(x_1, x_2) drawn as p(x_1)·p(x_2)/(1 − p(x_1)), by χ² over 20 000 pairs; the same test rejects the law of
    two draws with replacement conditioned on being distinct, p(x_1)·p(x_2)/(1 − Σ p²) (power check)."""
    p = torch.tensor([0.4, 0.3, 0.2, 0.1, 0.0])
    n = 20_000
    tokens, drawn = sample_without_replacement(p.expand(n, V), torch.rand(n, 2, generator=torch.Generator()
                                                                           .manual_seed(0), dtype=torch.float64))
    assert drawn.all() and (tokens[:, 0] != tokens[:, 1]).all() and (tokens < 4).all()
    counts = np.zeros((4, 4))
    np.add.at(counts, (tokens[:, 0].numpy(), tokens[:, 1].numpy()), 1)
    pn = p[:4].double().numpy()
    right = pn[:, None] * pn[None, :] / (1 - pn[:, None])
    wrong = pn[:, None] * pn[None, :] / (1 - (pn ** 2).sum())
    off = ~np.eye(4, dtype=bool)
    for law, fits in ((right, True), (wrong, False)):
        expected = law[off] * n / law[off].sum()
        assert (stats.chisquare(counts[off], expected).pvalue > FALSE_ALARM) == fits
    # a row with two possible tokens: the third draw is flagged as not drawn
    tokens, drawn = sample_without_replacement(torch.tensor([[0.0, 0.7, 0.0, 0.3, 0.0]]), torch.tensor([[0.1, 0.1,
                                                                                                          0.9]]))
    assert sorted(tokens[0, :2].tolist()) == [1, 3] and drawn.tolist() == [[True, True, False]]


# --- MJGD ----------------------------------------------------------------------------------------------------------


def test_mjgd_k1_is_argmax_decoding(model):
    for prefix in PREFIXES:
        ar = autoregressive_generate(model, prefix, DecodeConfig(method="ar", max_new_tokens=20))
        for num_beams in (1, 4):
            rec = mjgd_generate(model, prefix, DecodeConfig(max_new_tokens=20), k=1, num_beams=num_beams)
            assert rec.token_ids == ar.token_ids and rec.target_calls == ar.target_calls == 20
        one_beam = mjgd_generate(model, prefix, DecodeConfig(max_new_tokens=20), k=3, num_beams=1)
        assert one_beam.token_ids == ar.token_ids  # one beam of any depth is greedy too


@pytest.mark.parametrize("k, num_beams", [(2, 2), (2, 4), (3, V ** 2)])
def test_each_mjgd_step_is_at_least_as_likely_as_greedys(model, k, num_beams):
    """At each step's prefix, MJGD's K tokens have a joint likelihood >= greedy's K tokens from the same prefix. Holds
    for K = 2 with any beam (greedy's pair is among the last candidates) and for a full beam at any K."""
    better = 0
    for prompt in PREFIXES:
        rec = mjgd_generate(model, prompt, DecodeConfig(max_new_tokens=12), k=k, num_beams=num_beams)
        ids = prompt + rec.token_ids
        for start in range(len(prompt), len(ids) - k + 1, k):
            prefix, ours = ids[:start], ids[start:start + k]
            greedy = greedy_continuation(model, prefix, k)
            assert joint_of(model, prefix, ours) >= joint_of(model, prefix, greedy) - 1e-5
            better += ours != greedy
    assert better > 0  # the search does depart from greedy on these prompts


def test_mjgd_budget_eos_and_record(model):
    rec = mjgd_generate(model, PREFIXES[0], DecodeConfig(max_new_tokens=7), k=3, num_beams=4)
    assert rec.new_tokens == 7 and rec.stop_reason == "max_new_tokens"  # 3 + 3 + 1: the last step searches 1 deep
    assert rec.target_calls == 7 and rec.provenance["mjgd"] == {"k": 3, "num_beams": 4}
    assert rec.method == "mjgd" and rec.config["max_new_tokens"] == 7
    eos = rec.token_ids[4]
    stopped = mjgd_generate(model, PREFIXES[0], DecodeConfig(max_new_tokens=7), eos={eos}, k=3, num_beams=4)
    first = rec.token_ids.index(eos)
    assert stopped.token_ids == rec.token_ids[:first + 1] and stopped.stop_reason == "eos"


def test_mjgd_bad_arguments_get_one_clear_error(model):
    config = DecodeConfig(max_new_tokens=5)
    with pytest.raises(ValueError, match="k \\(tokens per MJGD step\\)"):
        mjgd_generate(model, [1], config, k=0)
    with pytest.raises(ValueError, match="num_beams"):
        mjgd_generate(model, [1], config, num_beams=0)
    with pytest.raises(ValueError, match="temperature 0"):
        mjgd_generate(model, [1], DecodeConfig(max_new_tokens=5, sampling=SamplingConfig(temperature=1.0)))
    with pytest.raises(ValueError, match="depth"):
        beam_search(CachedModel(model), [1], 0, 2)


# --- the beam cache ------------------------------------------------------------------------------------------------


def cache_tensors(lm: CachedModel) -> list[torch.Tensor]:
    return [t.clone() for pair in lm.layer_entries() for t in pair]


def test_beams_leave_the_prefix_cache_as_a_fresh_forward_leaves_it(model):
    lm = CachedModel(model)
    lm.logits_for([4, 4, 0, 1])  # earlier state: the prefix below shares only its first two tokens
    prefix = [4, 4, 2, 3, 1]
    lm.logits_for(prefix)
    before = cache_tensors(lm)
    beams = BeamCache(lm)
    rows = beams.step(torch.zeros(3, dtype=torch.long), torch.tensor([0, 2, 4]))  # 3 beams from the prefix
    beams.check()
    rows2 = beams.step(torch.tensor([2, 0]), torch.tensor([1, 3]))  # beam 2 then 0 continue: prefix+[4,1], +[0,3]
    beams.check()
    expected = forward_logits(model, [prefix + [0], prefix + [2], prefix + [4]])[:, -1]  # [3, V]
    torch.testing.assert_close(rows, expected, atol=1e-5, rtol=0)
    expected2 = forward_logits(model, [prefix + [4, 1], prefix + [0, 3]])[:, -1]  # [2, V]
    torch.testing.assert_close(rows2, expected2, atol=1e-5, rtol=0)
    assert beams.num_beams == 2 and beams.steps == 2
    del beams

    after = cache_tensors(lm)
    assert all(torch.equal(a, b) for a, b in zip(before, after))  # never written
    lm.check()
    assert lm.ids == prefix
    fresh = CachedModel(model)
    fresh.logits_for(prefix)
    for a, b in zip(after, cache_tensors(fresh)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    # and the batch-1 model carries on as if no beam had run
    torch.testing.assert_close(lm.logits_for(prefix + [2]), fresh.logits_for(prefix + [2]), atol=1e-5, rtol=0)

    searched = CachedModel(model)
    beam_search(searched, prefix, 4, 6)  # (its own forward over the prefix, then the beams)
    searched.check()
    assert searched.ids == prefix
    for a, b in zip(cache_tensors(searched), cache_tensors(fresh)):
        torch.testing.assert_close(a[..., :len(prefix), :], b[..., :len(prefix), :], atol=1e-5, rtol=0)


def test_beam_cache_errors(model):
    with pytest.raises(ValueError, match="logits_for first"):
        BeamCache(CachedModel(model))
    lm = CachedModel(model)
    lm.logits_for([1, 2])
    beams = BeamCache(lm)
    with pytest.raises(ValueError, match="index the 1 beams"):
        beams.step(torch.tensor([0, 1]), torch.tensor([3, 3]))
    with pytest.raises(ValueError, match="expected parents"):
        beams.step(torch.tensor([0, 0]), torch.tensor([3]))
