"""MJSD: the joint-threshold rule on hand-made distributions, the beam-sampling drafter, both through the loop.

The rule is LOSSY by design (Qin et al., Algorithm 1); the tests pin the prefixes Algorithm 1 (with the seeds
README's correction) accepts and the row the next token comes from. At τ = 1 it accepts nothing and is AR sampling,
which a χ² test holds (the last test).
"""
from __future__ import annotations

import pytest
import torch

from specrepro.acceptance.mjsd import MJSD_RULE, MJSDParams, mjsd_joint_threshold
from specrepro.decode.autoregressive import autoregressive_generate
from specrepro.core.config import DecodeConfig, SamplingConfig
from specrepro.drafters.beam import BeamDrafter
from specrepro.drafters.lm import LMDrafter
from specrepro.engine.models import tiny_model
from specrepro.decode.speculative import speculative_generate
from specrepro.core.tree import chain_parents
from specrepro.core.warping import sample, warp

pytestmark = pytest.mark.usefixtures("one_thread")
V = 6


def chain_inputs(p_tokens: list[float], q_tokens: list[float], p_rows: torch.Tensor | None = None):
    """A chain x_i = i over V tokens whose target/draft give x_i the probabilities p_tokens[i], q_tokens[i]
    (the rest of each row spread evenly); p row N is uniform unless p_rows replaces every row."""
    n = len(p_tokens)
    tokens = torch.arange(n)
    p = torch.full((n + 1, V), 1.0 / V, dtype=torch.float64)
    q = torch.zeros(n, V, dtype=torch.float64)
    for i, (pi, qi) in enumerate(zip(p_tokens, q_tokens)):
        p[i] = (1 - pi) / (V - 1)
        p[i, i] = pi
        q[i] = (1 - qi) / (V - 1)
        q[i, i] = qi
    if p_rows is not None:
        p = p_rows
    return p, q, tokens, chain_parents(n), torch.full((n + 1,), 0.5, dtype=torch.float64)


def accepted(p_tokens, q_tokens, tau) -> int:
    verdict = mjsd_joint_threshold(*chain_inputs(p_tokens, q_tokens), MJSDParams(tau=tau))
    assert verdict.path == list(range(len(verdict.path)))  # always a prefix of the chain
    return len(verdict.path)


def test_accepts_exactly_the_longest_passing_prefix():
    # joint ratios p(x_1:j)/q(x_1:j), j = 1..3, in the comments
    assert accepted([0.01, 0.01, 0.01], [0.9, 0.9, 0.9], tau=0.1) == 0  # 0.011, ...: none passes
    assert accepted([0.5, 0.5, 0.5], [0.5, 0.5, 0.5], tau=0.1) == 3  # 1, 1, 1: all γ
    assert accepted([0.9, 0.9, 0.9], [0.3, 0.3, 0.3], tau=0.1) == 3  # ratios above 1 are clipped to 1 and pass
    assert accepted([0.05, 0.9, 0.9], [0.9, 0.05, 0.9], tau=0.1) == 3  # 0.056 fails, then 1.0 and 1.0 pass
    assert accepted([0.05, 0.9, 0.05], [0.9, 0.05, 0.9], tau=0.1) == 2  # 0.056, 1.0, 0.056: the longest passing
    assert accepted([0.5, 0.01, 0.9], [0.5, 0.5, 0.01], tau=0.1) == 3  # 1, 0.02, 1.8: a failure in the middle
    assert accepted([0.5, 0.3, 0.9], [0.5, 0.5, 0.9], tau=0.5) == 3  # 1, 0.6, 0.6
    assert accepted([0.5, 0.3, 0.9], [0.5, 0.5, 0.9], tau=0.7) == 1  # 1, 0.6, 0.6 at a stricter τ


def test_the_threshold_is_strict_and_its_ends_behave():
    assert accepted([0.25], [0.5], tau=0.5) == 0  # ratio exactly τ does not pass (min(1, p/q) > τ)
    assert accepted([0.25], [0.5], tau=0.4999) == 1
    assert accepted([1e-6, 1e-6, 1e-6], [0.99, 0.99, 0.99], tau=0.0) == 3  # τ = 0: any prefix p allows
    assert accepted([0.5, 0.0, 0.5], [0.5, 0.5, 0.5], tau=0.0) == 1  # ... but never one p gives probability 0
    assert accepted([0.9, 0.9], [0.5, 0.5], tau=1.0) == 0  # τ = 1 accepts nothing, even with p > q
    assert accepted([0.5, 0.5], [0.5, 0.5], tau=1.0) == 0
    assert accepted([0.5, 0.5], [0.0, 0.5], tau=0.9) == 2  # q = 0 < p: ratio ∞, clipped to 1


def test_joints_are_computed_in_log_space():
    """400 drafts of probability 0.01 each: the joints underflow float64 (1e-800) but their ratio is 1."""
    n = 400
    p = torch.full((n + 1, V), 0.99 / (V - 1), dtype=torch.float64)
    p[:, 0] = 0.01
    q = p[:n].clone()
    q[-1, 0] = 0.2  # the last draft: joint ratio 0.01/0.2 = 0.05 < τ; the 399 before it pass (ratio 1)
    uniforms = torch.full((n + 1,), 0.5, dtype=torch.float64)
    verdict = mjsd_joint_threshold(p, q, torch.zeros(n, dtype=torch.long), chain_parents(n), uniforms)
    assert len(verdict.path) == n - 1


def test_the_next_token_comes_from_the_target_row_after_the_accepted_prefix():
    n = 3
    rows = torch.nn.functional.one_hot(torch.tensor([5, 4, 3, 2]), V).double()  # [N+1, V]: row i says token 5 − i
    for p_tokens, q_tokens, eta in [([0.01] * 3, [0.9] * 3, 0), ([0.9, 0.01, 0.01], [0.9] * 3, 1),
                                    ([0.9] * 3, [0.9] * 3, 3)]:
        p, q, tokens, parents, uniforms = chain_inputs(p_tokens, q_tokens)
        assert len(mjsd_joint_threshold(p, q, tokens, parents, uniforms).path) == eta
        p_rows = p.clone()
        p_rows[eta] = rows[eta]  # the rule reads rows 0..N−1 only at the drafts' tokens; row η decides the draw
        verdict = mjsd_joint_threshold(p_rows, q, tokens, parents, uniforms)
        assert verdict.path == list(range(eta)) and verdict.next_token == 5 - eta
    # with a spread row, the draw is warping.sample(p[η], uniforms[N]) (not a residual of p − q)
    p, q, tokens, parents, _ = chain_inputs([0.01] * 3, [0.9] * 3)
    for u in (0.05, 0.5, 0.95):
        uniforms = torch.tensor([0.9, 0.9, 0.9, u], dtype=torch.float64)
        assert mjsd_joint_threshold(p, q, tokens, parents, uniforms).next_token == sample(p[0], u)


def test_mjsd_is_lossy():
    """p = [0.5, 0.5, 0, …], the draft always proposes token 0: ratio 0.5 > τ, so token 0 is always committed,
    where p would give token 1 half of the time."""
    p = torch.zeros(2, V, dtype=torch.float64)
    p[:, :2] = 0.5
    q = torch.nn.functional.one_hot(torch.tensor([0]), V).double()
    firsts = {mjsd_joint_threshold(p, q, torch.tensor([0]), chain_parents(1), torch.tensor([u, u])).emitted(
        torch.tensor([0]))[0] for u in torch.linspace(0, 0.99, 50, dtype=torch.float64)}
    assert firsts == {0}
    assert MJSD_RULE.name == "mjsd" and MJSD_RULE.lossless is False
    assert MJSD_RULE.describe() == {"name": "mjsd", "lossless": False, "params": {"tau": 0.1}}
    assert MJSD_RULE.with_params(tau=0.5).params == MJSDParams(tau=0.5)


def test_bad_inputs_get_one_clear_error():
    for tau in (-0.1, 1.5, float("nan"), True, "0.1"):
        with pytest.raises(ValueError, match="tau"):
            MJSDParams(tau=tau)
    p, q, tokens, _, uniforms = chain_inputs([0.5] * 3, [0.5] * 3)
    with pytest.raises(ValueError, match="chain"):
        mjsd_joint_threshold(p, q, tokens, torch.tensor([-1, -1, 0]), uniforms)
    with pytest.raises(ValueError, match=r"p \[N\+1, V\]"):
        mjsd_joint_threshold(p[:-1], q, tokens, chain_parents(3), uniforms)
    with pytest.raises(ValueError, match="num_beams"):
        BeamDrafter(tiny_model(vocab_size=V, n_layers=1, hidden=16), num_beams=0)


# --- the beam-sampling drafter on tiny models ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def pair():
    return tiny_model(vocab_size=10, n_layers=2, hidden=32, seed=0), tiny_model(vocab_size=10, n_layers=1, hidden=32,
                                                                                seed=1)


PROMPTS = ([1, 2, 3], [4, 8, 0, 9, 9, 2, 7])


@pytest.mark.parametrize("num_beams", [1, 4])
def test_beam_drafter_at_t0_is_greedy_drafting(pair, num_beams):
    """At T = 0 the warped rows are one-hot: every beam but the argmax chain has likelihood 0."""
    _, draft = pair
    greedy = SamplingConfig(temperature=0.0)
    for prompt in PROMPTS:
        beam = BeamDrafter(draft, num_beams).propose(prompt, 5, greedy, torch.Generator().manual_seed(0))
        chain = LMDrafter(draft).propose(prompt, 5, greedy, torch.Generator().manual_seed(0))
        assert beam.tokens.tolist() == chain.tokens.tolist()
        assert torch.equal(beam.probs, chain.probs) and beam.calls == chain.calls == 5


@pytest.mark.parametrize("sampling", [SamplingConfig(temperature=1.0), SamplingConfig(temperature=0.7, top_k=4)])
def test_one_beam_is_the_sampled_chain_with_the_same_uniforms(pair, sampling):
    _, draft = pair
    for seed in range(5):
        beam = BeamDrafter(draft, 1).propose(PROMPTS[1], 4, sampling, torch.Generator().manual_seed(seed))
        chain = LMDrafter(draft).propose(PROMPTS[1], 4, sampling, torch.Generator().manual_seed(seed))
        assert beam.tokens.tolist() == chain.tokens.tolist()
        torch.testing.assert_close(beam.probs, chain.probs, atol=1e-5, rtol=0)


@pytest.mark.parametrize("sampling", [SamplingConfig(temperature=1.0), SamplingConfig(temperature=0.8, top_k=5)])
def test_q_rows_are_the_drafts_warped_rows_along_the_chosen_beam(pair, sampling):
    _, draft = pair
    proposals = []
    for seed in range(8):
        proposal = BeamDrafter(draft, 2).propose(PROMPTS[0], 4, sampling, torch.Generator().manual_seed(seed))
        seq = PROMPTS[0] + proposal.tokens.tolist()
        with torch.inference_mode():
            logits = draft(input_ids=torch.tensor([seq])).logits[0, len(PROMPTS[0]) - 1:-1]  # [γ, V]
        torch.testing.assert_close(proposal.probs, warp(logits, sampling), atol=1e-5, rtol=0)
        assert (proposal.probs[torch.arange(4), proposal.tokens] > 0).all() and proposal.calls == 4
        proposals.append(proposal.tokens.tolist())
    again = BeamDrafter(draft, 2).propose(PROMPTS[0], 4, sampling, torch.Generator().manual_seed(0))
    assert again.tokens.tolist() == proposals[0]  # randomness only from the generator
    assert len({tuple(p) for p in proposals}) > 1  # ... which it does use


def check_caches(p_model, drafter, ids):
    p_model.check()
    assert p_model.ids == ids[:-1] and p_model.tree is None
    drafter.lm.check()  # the draft's batch-1 cache: committed tokens only, the beams are gone
    assert drafter.lm.ids == ids[:len(drafter.lm.ids)] and drafter.lm.tree is None


def mjsd(target, draft, tau, sampling, num_beams=4, prompt=PROMPTS[0], max_new_tokens=24, gamma=4, seed=0):
    config = DecodeConfig(max_new_tokens=max_new_tokens, gamma=gamma, sampling=sampling, seed=seed, stop_at_eos=False)
    return speculative_generate(target, BeamDrafter(draft, num_beams), prompt, config,
                                rule=MJSD_RULE.with_params(tau=tau), on_step=check_caches)


def test_mjsd_through_the_loop_at_the_thresholds_ends(pair):
    target, draft = pair
    t1 = SamplingConfig(temperature=1.0)
    for seed in range(3):
        everything = mjsd(target, draft, 0.0, t1, seed=seed)  # p > 0 everywhere at T = 1: every draft passes
        assert everything.accept_lengths == everything.proposed_lengths and everything.new_tokens == 24
        assert everything.target_calls == 5  # 4 + 1 tokens per step, the last step shortened to the budget
        nothing = mjsd(target, draft, 1.0, t1, seed=seed)
        assert set(nothing.accept_lengths) == {0} and nothing.target_calls == nothing.new_tokens == 24
        usual = mjsd(target, draft, 0.1, t1, seed=seed)
        assert usual.draft_calls == sum(usual.gammas) and usual.new_tokens == 24
    assert usual.provenance["acceptance"] == {"name": "mjsd", "lossless": False, "params": {"tau": 0.1}}


def test_mjsd_at_t0_is_the_targets_greedy_decoding(pair):
    """At T = 0 p is one-hot: a prefix passes iff it follows the target's argmax, and the next token is the argmax."""
    target, draft = pair
    for prompt in PROMPTS:
        ar = autoregressive_generate(target, prompt, DecodeConfig(method="ar", max_new_tokens=24, stop_at_eos=False))
        rec = mjsd(target, draft, 0.1, SamplingConfig(temperature=0.0), prompt=prompt)
        assert rec.token_ids == ar.token_ids


def test_at_tau_one_mjsd_samples_from_p_as_ar_sampling_does_chi2():
    """τ = 1 rejects every draft and draws the next token from p's row: MJSD is then AR sampling, exactly (the
    issue asked why its perplexity differed from AR's on 12 prompts × 16 tokens: sampling noise, since the law
    is the same; the speculative rows, lossless too, differ from AR's as much). Power check: τ = 0.1, which keeps
    draft tokens p finds unlikely, fails the same test with the same runs."""
    import numpy as np
    from dataclasses import replace
    from tests.helpers import PROMPT, v8_model
    from tests.stats import FALSE_ALARM, chi2_pvalue, exact_first_two, first_two_counts

    target, draft = v8_model(), v8_model(seed=11)
    sampling = SamplingConfig(temperature=1.0)
    exact = exact_first_two(target, PROMPT, sampling)
    at_one = first_two_counts(target, LMDrafter(draft), sampling, rule=replace(MJSD_RULE, params=MJSDParams(tau=1.0)))
    assert chi2_pvalue(at_one, exact) > FALSE_ALARM
    lossy = first_two_counts(target, LMDrafter(draft), sampling, rule=replace(MJSD_RULE, params=MJSDParams(tau=0.1)))
    assert chi2_pvalue(lossy, exact) < FALSE_ALARM
    assert np.abs(at_one.sum() - lossy.sum()) == 0
