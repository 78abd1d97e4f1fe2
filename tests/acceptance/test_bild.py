"""BiLD: the rollback rule on hand-made p (where it fires, both boundaries), the fallback drafter on a tiny model
whose confidences are recomputed step by step (where it stops, both boundaries, the forwards it counts), the
pair through the verification loop (T = 0 equals greedy decoding; the cache invariant), and bad inputs.
"""
from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch

from specrepro.acceptance import TREE_RULES
from specrepro.acceptance.bild import BILD_RULE, BiLDParams, bild_rollback
from specrepro.decode.autoregressive import autoregressive_generate
from specrepro.core.config import DecodeConfig, SamplingConfig
from specrepro.drafters.bild import BiLDDrafter, draft_confidence
from specrepro.core.kvcache import CachedModel
from specrepro.engine.models import tiny_model
from specrepro.decode.speculative import speculative_generate
from specrepro.core.tree import chain_parents
from specrepro.core.warping import sample, warp

pytestmark = pytest.mark.usefixtures("one_thread")


# --- the rollback rule

def chain_inputs(p: torch.Tensor, tokens: list[int], u: float = 0.5):
    """A chain of len(tokens) drafts scored by p [N+1, V]; q is uniform (the rule never reads it)."""
    n, vocab = len(tokens), p.shape[1]
    return p, torch.full((n, vocab), 1 / vocab), torch.tensor(tokens), chain_parents(n), torch.full(
        (n + 1,), u, dtype=torch.float64)


# rows 0..3 score drafts 0..2, row 3 follows the whole chain
P = torch.tensor([[0.25, 0.50, 0.25, 0.00],   # draft 0 = token 0: p = 0.25, d = log 4 = 1.386
                  [0.70, 0.10, 0.20, 0.00],   # draft 1 = token 2: p = 0.20, d = 1.609
                  [0.05, 0.05, 0.05, 0.85],   # draft 2 = token 3: p = 0.85, d = 0.163
                  [0.00, 0.00, 1.00, 0.00]])
TOKENS = [0, 2, 3]


def nll(row: int) -> float:
    """−log p(x) of draft ``row`` exactly as the rule computes it (float32 p read in float64)."""
    return float(-torch.log(P[row, TOKENS[row]].double()))


def test_rollback_fires_at_the_first_token_past_the_threshold():
    rule = BILD_RULE.with_params(rollback_threshold=1.5)  # keeps d = 1.386, rolls back d = 1.609
    inputs = chain_inputs(P, TOKENS)
    verdict = rule(*inputs)
    assert verdict.path == [0]  # draft 2 (d = 0.163) would pass, but comes after the rollback
    assert verdict.next_token == sample(P[1], 0.5)  # the replacement is drawn from p's row at draft 1
    assert bild_rollback(*inputs, BiLDParams(rollback_threshold=1.5)) == verdict


def test_rollback_threshold_at_its_boundaries():
    inputs = chain_inputs(P, TOKENS)
    at = lambda tau: bild_rollback(*inputs, BiLDParams(rollback_threshold=tau)).path  # noqa: E731
    assert at(nll(0)) == [0]  # d == τ2 is kept (BiLD rolls back only when d > τ2)
    assert at(math.nextafter(nll(0), 0)) == []  # just below: rolled back at once
    assert at(nll(1)) == [0, 1, 2]  # d == τ2 for draft 1, and draft 2 is below: all kept, the next token ...
    assert bild_rollback(*inputs, BiLDParams(rollback_threshold=nll(1))).next_token == 2  # ... is p's after all
    assert at(math.nextafter(nll(1), 0)) == [0]
    assert at(0.0) == []  # τ2 = 0 keeps only tokens with p = 1
    one = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]])
    assert bild_rollback(*chain_inputs(one, [1, 0]), BiLDParams(rollback_threshold=0.0)).path == [0, 1]


def test_a_token_the_target_never_emits_is_always_rolled_back():
    p = torch.tensor([[0.0, 1.0], [0.5, 0.5]])
    assert bild_rollback(*chain_inputs(p, [0]), BiLDParams(rollback_threshold=1e300)) == ([], 1)


def test_rollback_matches_a_direct_scan_on_random_chains():
    gen = torch.Generator().manual_seed(0)
    for _ in range(300):
        gamma, vocab = int(torch.randint(1, 8, (1,), generator=gen)), int(torch.randint(2, 6, (1,), generator=gen))
        x = torch.rand(gamma + 1, vocab, generator=gen) * (torch.rand(gamma + 1, vocab, generator=gen) > 0.2)
        p = (x + 1e-3 * (torch.arange(vocab) == 0)) / (x + 1e-3 * (torch.arange(vocab) == 0)).sum(-1, keepdim=True)
        tokens = torch.randint(0, vocab, (gamma,), generator=gen).tolist()
        tau = 3 * float(torch.rand(1, generator=gen))
        u = float(torch.rand(1, generator=gen))
        kept = next((i for i, t in enumerate(tokens) if float(p[i, t]) == 0 or -math.log(float(p[i, t])) > tau),
                    gamma)
        verdict = bild_rollback(*chain_inputs(p, tokens, u), BiLDParams(rollback_threshold=tau))
        assert verdict == (list(range(kept)), sample(p[kept], u))


def test_the_rule_is_labelled_lossy_with_bilds_defaults():
    assert BILD_RULE.name == "bild" and BILD_RULE.lossless is False
    assert BILD_RULE.describe() == {"name": "bild", "lossless": False, "params": {"rollback_threshold": 2.0}}
    assert TREE_RULES["bild"] is BILD_RULE
    assert "LOSSY" in bild_rollback.__doc__
    with pytest.raises(dataclasses.FrozenInstanceError):
        BiLDParams().rollback_threshold = 1.0


def test_bad_rule_inputs_raise_one_clear_error():
    for bad in (-0.1, math.inf, math.nan, "2"):
        with pytest.raises(ValueError, match="rollback_threshold"):
            BiLDParams(rollback_threshold=bad)
    p, q, tokens, _, u = chain_inputs(P, TOKENS)
    with pytest.raises(ValueError, match="one draft chain"):
        bild_rollback(p, q, tokens, torch.tensor([-1, -1, 0]), u)
    with pytest.raises(ValueError, match="expected N\\+1 = 4 uniforms"):
        bild_rollback(p, q, tokens, chain_parents(3), u[:3])
    assert bild_rollback(P[:1], q[:0], tokens[:0], chain_parents(0), u[:1]) == ([], sample(P[0], 0.5))


# --- the fallback drafter

V = 16
PROMPT = [1, 2, 3]  # the draft (seed 5) is most confident at the first position here: fallbacks can land later


@pytest.fixture(scope="module")
def draft():
    return tiny_model(vocab_size=V, n_layers=1, hidden=16, seed=5)


def reference_chain(model, prompt, gamma, sampling, uniforms):
    """Each position's confidence, token and q, scanned without any threshold. The logits come through a
    ``CachedModel`` called as the drafter calls it (the prompt, then one token at a time), so they are bit-equal
    to the drafter's and a threshold set at one of these confidences tests the boundary exactly."""
    lm, seq, out = CachedModel(model), list(prompt), []
    for i in range(gamma):
        logits = lm.logits_for(seq)[-1]  # [V]
        q = warp(logits, sampling)
        x = sample(q, uniforms[i])
        out.append((draft_confidence(logits, q, sampling), x, q))
        seq.append(x)
    return out


@pytest.mark.parametrize("sampling", [SamplingConfig(temperature=0.0), SamplingConfig(temperature=1.0, top_k=6)])
def test_fallback_fires_where_the_confidence_first_falls_below_the_threshold(draft, sampling):
    """τ1 at every confidence the chain reaches (the boundary: equal does not fire) and between them."""
    gamma = 8
    uniforms = torch.rand(gamma, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    chain = reference_chain(draft, PROMPT, gamma, sampling, uniforms)
    levels = sorted({c for c, _, _ in chain})
    thresholds = [0.0, *levels, *((a + b) / 2 for a, b in zip(levels, levels[1:])), 1.0]
    stops = set()
    for tau in thresholds:
        stop = next((i for i, (c, _, _) in enumerate(chain) if c < tau), gamma)
        stops.add(stop)
        drafter = BiLDDrafter(draft, fallback_threshold=tau)
        proposal = drafter.propose(PROMPT, gamma, sampling, torch.Generator().manual_seed(7))
        assert proposal.tokens.tolist() == [x for _, x, _ in chain[:stop]], tau
        if stop:
            assert torch.equal(proposal.probs, torch.stack([q for _, _, q in chain[:stop]]))
        assert proposal.calls == min(stop + 1, gamma)  # the forward that found low confidence is counted
    assert len(stops) >= 4  # the thresholds cut the chain at several places, 0 and γ included
    assert {0, gamma} <= stops


def test_confidence_is_the_max_of_the_warped_q_and_of_the_softmax_at_t0():
    logits = torch.tensor([2.0, 1.0, 0.5, -1.0])
    softmax = logits.softmax(-1)
    greedy, top2 = SamplingConfig(temperature=0.0), SamplingConfig(temperature=1.0, top_k=2)
    assert draft_confidence(logits, warp(logits, greedy), greedy) == pytest.approx(float(softmax.max()))
    assert draft_confidence(logits, warp(logits, top2), top2) == pytest.approx(float(softmax[0] / softmax[:2].sum()))


def test_a_fallback_at_the_first_position_gives_an_empty_proposal(draft):
    proposal = BiLDDrafter(draft, fallback_threshold=1.0).propose(PROMPT, 5, SamplingConfig(temperature=1.0),
                                                                 torch.Generator().manual_seed(0))
    assert proposal.tokens.numel() == 0 and proposal.probs is None and proposal.calls == 1


def test_bad_fallback_thresholds_raise_one_clear_error(draft):
    for bad in (-0.01, 1.01, math.nan, None):
        with pytest.raises(ValueError, match="fallback_threshold"):
            BiLDDrafter(draft, fallback_threshold=bad)


# --- through the verification loop

@pytest.fixture(scope="module")
def target():
    return tiny_model(vocab_size=V, n_layers=2, hidden=16, seed=6)


@pytest.fixture(scope="module")
def near_draft(target):
    """The target with noise on its LM head: it agrees with the target often, not always."""
    draft = copy.deepcopy(target)
    with torch.no_grad():
        noise = torch.randn(draft.lm_head.weight.shape, generator=torch.Generator().manual_seed(0))
        draft.lm_head.weight.add_(0.5 * draft.lm_head.weight.std() * noise)
    return draft


def check_cache(p_model, drafter, ids):
    p_model.check()
    assert p_model.ids == ids[:-1] and p_model.tree is None


@pytest.mark.parametrize("fallback", [0.0, 0.6, 1.0])
def test_greedy_bild_equals_autoregressive(target, near_draft, fallback):
    """At T = 0 p is one-hot, so the rollback keeps exactly the drafts that match the target's argmax."""
    ar = autoregressive_generate(target, PROMPT, DecodeConfig(method="ar", max_new_tokens=40))
    rec = speculative_generate(target, BiLDDrafter(near_draft, fallback_threshold=fallback), PROMPT,
                               DecodeConfig(max_new_tokens=40, gamma=10), rule=BILD_RULE, on_step=check_cache)
    assert rec.token_ids == ar.token_ids
    assert rec.provenance["acceptance"] == BILD_RULE.describe()
    if fallback == 0.0:  # full drafts of γ = 10 (until the budget runs out): some tokens kept, some rolled back
        assert sum(rec.accept_lengths) > 0 and rec.proposed_lengths[0] == 10
        assert any(a < n for a, n in zip(rec.accept_lengths, rec.proposed_lengths))
    if fallback == 1.0:  # every step falls back at once: one draft forward and one plain target step each
        # (the last step has no budget left for drafts, so no draft forward)
        assert rec.draft_calls == rec.target_calls - 1 == len(ar.token_ids) - 1 and rec.accept_lengths == []


def test_sampled_bild_through_the_loop(target, near_draft):
    """T = 1, top-k 6: a looser rollback threshold keeps more drafts; τ2 = 0 keeps none the target is unsure of."""
    sampling = SamplingConfig(temperature=1.0, top_k=6)
    config = DecodeConfig(max_new_tokens=30, gamma=10, sampling=sampling, seed=3, stop_at_eos=False)
    drafter = BiLDDrafter(near_draft, fallback_threshold=0.3)
    kept = []
    for tau in (0.0, 2.0, 50.0):
        rec = speculative_generate(target, drafter, PROMPT, config, on_step=check_cache,
                                   rule=BILD_RULE.with_params(rollback_threshold=tau))
        assert len(rec.token_ids) == 30 and rec.provenance["acceptance"]["params"] == {"rollback_threshold": tau}
        kept.append(sum(rec.accept_lengths))
    assert kept[0] < kept[1] < kept[2]
