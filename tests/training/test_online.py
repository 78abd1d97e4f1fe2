"""Online speculative decoding: the draft learns from the target's rows between sequences and stays exact.

What is checked: the buffer holds the target's rows at the draft's positions, at most ``buffer_size`` steps, first
in first out; updates come exactly every L sequences (through ``serve_stream`` and through any loop that reuses the
drafter), change the draft and never the target; on a pair that starts far apart α rises over a repeated stream
against a frozen copy; decoding stays token-identical to autoregressive decoding at T = 0 and follows the target's
law at T = 1 (χ², with a power check: a drafter whose weights change inside a proposal is rejected by the same
test); bad settings and an empty stream get one clear error.
"""
from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from specrepro.decode.autoregressive import autoregressive_generate
from specrepro.core.config import DecodeConfig, SamplingConfig
from specrepro.engine.draft_model import draft_from_target
from specrepro.drafters import LMDrafter, Proposal
from specrepro.drafters.online import OnlineDrafter, OnlineSample, SequenceSample
from specrepro.decode.speculative import speculative_generate
from specrepro.training.losses import DIVERGENCES
from specrepro.training.online import (OnlineBuffer, OnlineConfig, OnlineLearner, example_of, online_drafter,
                                       serve_stream)
from specrepro.core.warping import warp
from tests.helpers import PROMPT, V, v8_model
from tests.stats import FALSE_ALARM, RUNS, chi2_pvalue, exact_first_two

pytestmark = pytest.mark.usefixtures("one_thread")
PROMPTS = [[1, 2, 3], [4, 5, 6, 7], [0, 7, 2]]  # ids < V = 8
FAST = OnlineConfig(buffer_size=32, update_every=1, steps_per_update=2, lr=1e-2)  # big steps: visible in tests


@pytest.fixture(scope="module")
def pair():
    """Target and draft over V = 8, far apart (the draft is another random model)."""
    return v8_model(), v8_model(11)


def online(draft, config=FAST) -> OnlineDrafter:
    return online_drafter(copy.deepcopy(draft), config)  # the module's draft stays untouched for other tests


def state(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# ------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("field, value", [("update_every", 0), ("buffer_size", 0), ("steps_per_update", 0),
                                          ("lr", 0.0), ("lr", -1e-3), ("lr", float("nan")), ("top_k", 0),
                                          ("batch_size", 0), ("max_grad_norm", 0.0), ("divergence", "kl"),
                                          ("examples", "tokens")])
def test_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        OnlineConfig(**{field: value})


@pytest.mark.parametrize("field, value", [("online_every", 0), ("online_buffer", 0), ("online_steps", 0),
                                          ("online_lr", 0.0), ("online_lr", float("inf")), ("online_divergence", "kl"),
                                          ("online_examples", "tokens")])
def test_method_params_reject_bad_online_values(field, value):
    from specrepro.methods.online import Params
    with pytest.raises(ValueError, match=field):
        Params(**{field: value})


def test_the_online_flags_reach_the_drafter(pair):
    """--online-buffer/-every/-steps/-lr/-divergence (the online method's Params) become the OnlineConfig of
    --method online, which trains an fp32 copy of the draft it is given."""
    import argparse

    from specrepro.run.commands import add_decode_args, params_from
    from specrepro.methods import drafter_for, method
    from specrepro.engine.models import LoadedModel

    parser = argparse.ArgumentParser()
    add_decode_args(parser)
    args = parser.parse_args(["--online-buffer", "7", "--online-every", "2", "--online-steps", "3",
                              "--online-lr", "3e-4", "--online-divergence", "jsd", "--online-examples", "sequences"])
    config = DecodeConfig(method="online", seed=5, params=params_from(args, method("online")))
    target, draft = pair
    drafter = drafter_for(LoadedModel("tiny-draft", draft, None), "online", target, config)
    assert drafter.learner.config == OnlineConfig(buffer_size=7, update_every=2, steps_per_update=3, lr=3e-4,
                                                  divergence="jsd", examples="sequences", seed=5)
    assert drafter.learner.model is not draft


def test_empty_stream_is_refused(pair):
    target, draft = pair
    with pytest.raises(ValueError, match="stream is empty"):
        serve_stream(target, online(draft), [], DecodeConfig())
    with pytest.raises(ValueError, match="buffer size"):
        OnlineBuffer(0)


# ---------------------------------------------------------------------------------------------- buffer


def sample(context: list[int]) -> OnlineSample:
    return OnlineSample.from_step(context, [0], torch.full((1, V), 1 / V), SamplingConfig(), top_k=3)


def test_buffer_keeps_the_newest_samples_first_in_first_out():
    buf = OnlineBuffer(3)
    for i in range(5):
        buf.add(sample([i]))
        assert len(buf) == min(i + 1, 3)
    assert [s.context for s in buf.samples] == [(2,), (3,), (4,)]
    assert buf.rows == 3


def test_samples_hold_the_targets_rows_at_the_draft_positions(pair):
    """Each sample row i is the target's raw distribution after context + x_<i: the warped row un-tempered
    (p̃^T renormalised), checked against the target's own softmax at those contexts."""
    target, draft = pair
    drafter = online(draft, OnlineConfig(buffer_size=100, update_every=100, top_k=V))
    sampling = SamplingConfig(temperature=0.7)
    speculative_generate(target, drafter, PROMPTS[0], DecodeConfig(max_new_tokens=12, gamma=3, sampling=sampling))
    samples = list(drafter.learner.buffer.samples)
    assert samples and all(len(s.tokens) >= 1 for s in samples)
    for s in samples:
        seqs = [list(s.context) + list(s.tokens[:i]) for i in range(len(s.tokens))]
        with torch.inference_mode():
            raw = torch.stack([target(input_ids=torch.tensor([x])).logits[0, -1].float().softmax(-1) for x in seqs])
        got = torch.zeros(len(seqs), V).scatter(1, s.top_ids, s.top_probs)  # [γ, V]
        torch.testing.assert_close(got, raw, atol=1e-4, rtol=1e-3)
        assert float(s.tail.max()) < 1e-5  # top_k = V: nothing left out
    # Consecutive samples are consecutive steps: each context extends the previous one by committed tokens.
    for a, b in zip(samples, samples[1:]):
        assert b.context[: len(a.context)] == a.context and len(b.context) > len(a.context)


def test_the_drafter_keeps_at_most_buffer_size_steps(pair):
    target, draft = pair
    drafter = online(draft, OnlineConfig(buffer_size=2, update_every=100))
    contexts = []
    rec = speculative_generate(target, drafter, PROMPTS[1], DecodeConfig(max_new_tokens=20, gamma=2),
                               on_step=lambda p_model, d, ids: contexts.append(tuple(d.learner.buffer.samples[-1]
                                                                                     .context)))
    assert len(drafter.learner.buffer) == 2 and len(rec.accept_lengths) > 2
    newest = list(dict.fromkeys(contexts))  # a last step with no budget to draft adds no sample
    assert [s.context for s in drafter.learner.buffer.samples] == newest[-2:]  # the two newest steps


def test_a_sequence_example_holds_each_steps_rows_where_they_lie_on_the_committed_text(pair):
    """examples = "sequences": one served sequence is one example; every row it keeps is the row the step saw at
    that position (conditioned on the committed prefix), and no row past a step's first rejection is kept."""
    target, draft = pair
    drafter = online(draft, OnlineConfig(update_every=100, examples="sequences"))
    steps = []  # (sample, accepted) as the drafter saw them
    drafter_feedback = drafter.feedback

    def spy(step):
        pending = drafter._pending
        drafter_feedback(step)
        if pending is not None:
            steps.append((drafter._steps[-1][0], len(step.path)))
    drafter.feedback = spy
    rec = speculative_generate(target, drafter, PROMPTS[1], DecodeConfig(max_new_tokens=20, gamma=3,
                                                                        sampling=SamplingConfig(temperature=1.0)))
    assert len(drafter.learner.buffer) == 0  # nothing recorded until the sequence ends
    drafter.end_sequence()
    (merged,) = drafter.learner.buffer.samples
    ids = PROMPTS[1] + rec.token_ids
    assert isinstance(merged, SequenceSample) and list(merged.tokens) == ids
    expected = {}
    for sample, accepted in steps:
        for i in range(min(accepted + 1, len(sample.tokens), len(ids) - len(sample.context))):
            expected[len(sample.context) + i] = sample.top_probs[i]
            if i < accepted:
                assert ids[len(sample.context) + i] == sample.tokens[i]  # accepted draft tokens are the text
    assert merged.positions.tolist() == sorted(expected)
    for r, n in enumerate(merged.positions.tolist()):
        assert torch.equal(merged.top_probs[r], expected[n])
    assert merged.rows < sum(s.rows for s, _ in steps)  # rejected branches are left out
    ex = example_of(merged)
    assert ex.has_row.nonzero().flatten().tolist() == merged.positions.tolist()
    with pytest.raises(ValueError, match="prefix"):
        SequenceSample.from_steps([9] + ids[1:], steps)


# --------------------------------------------------------------------------------------------- updates


def test_updates_come_exactly_every_l_sequences(pair):
    target, draft = pair
    drafter = online(draft, OnlineConfig(update_every=3, lr=1e-3))
    stream = serve_stream(target, drafter, [PROMPTS[i % 3] for i in range(7)],
                          DecodeConfig(max_new_tokens=6, gamma=2))
    assert [s.updates for s in stream.sequences] == [0, 0, 1, 1, 1, 2, 2]
    assert [s.update is not None for s in stream.sequences] == [False, False, True, False, False, True, False]
    assert stream.updates == 2 and stream.update_s > 0 and all(s.update_s >= 0 for s in stream.sequences)
    assert [r["after_sequence"] for r in (s.update for s in stream.sequences) if r] == [3, 6]
    assert drafter.end_sequence() is None  # already closed by serve_stream: a second close counts nothing
    assert drafter.learner.sequences == 7


def test_a_loop_that_only_resets_between_prompts_gets_the_same_updates(pair):
    target, draft = pair
    drafter = online(draft, OnlineConfig(update_every=2, lr=1e-3))
    for i in range(5):  # each generation's reset() closes the previous sequence
        speculative_generate(target, drafter, PROMPTS[i % 3], DecodeConfig(max_new_tokens=6, gamma=2))
    assert drafter.learner.sequences == 4 and drafter.learner.updates == 2
    assert drafter.end_sequence() is None and drafter.learner.sequences == 5  # the fifth, no update (5 % 2)


def test_an_update_changes_the_draft_and_never_the_target(pair):
    target, draft = pair
    drafter = online(draft)
    target_before, draft_before = state(target), state(drafter.learner.model)
    stream = serve_stream(target, drafter, PROMPTS, DecodeConfig(max_new_tokens=8, gamma=3))
    assert stream.updates == 3
    assert all(torch.equal(v, target_before[k]) for k, v in state(target).items())
    changed = [k for k, v in state(drafter.learner.model).items() if not torch.equal(v, draft_before[k])]
    assert "lm_head.weight" in changed and len(changed) == len(draft_before)
    assert not drafter.learner.model.training  # serving resumes in eval mode


@pytest.mark.parametrize("divergence", sorted(DIVERGENCES))
def test_each_divergence_lowers_its_loss_on_the_buffer(pair, divergence):
    target, draft = pair
    drafter = online(draft, OnlineConfig(update_every=1, steps_per_update=6, lr=1e-2, divergence=divergence))
    report = serve_stream(target, drafter, PROMPTS[:1], DecodeConfig(max_new_tokens=12, gamma=3)).sequences[0].update
    assert report["samples"] > 0 and len(report["losses"]) == 6
    assert report["losses"][-1] < report["losses"][0]


def test_a_reduced_vocabulary_draft_learns_online_and_stays_exact(pair):
    """The zoo's draft kind (``ReducedVocabDraft``) goes through training.losses.batch_loss as it is."""
    target, _ = pair
    draft = draft_from_target(target, torch.tensor([0, 1, 2, 3, 5, 6]), n_layers=1).eval()  # ids 4, 7 never drafted
    drafter = online_drafter(draft, FAST)
    before = state(draft)
    config = DecodeConfig(max_new_tokens=10, gamma=3)
    stream = serve_stream(target, drafter, PROMPTS, config)
    assert stream.updates == 3 and any(not torch.equal(v, before[k]) for k, v in state(draft).items())
    for prompt, rec in zip(PROMPTS, stream.records):
        assert rec.token_ids == autoregressive_generate(target, prompt, config).token_ids


# ------------------------------------------------------------------------------------ the effect: α rises


@pytest.mark.parametrize("examples", ["steps", "sequences"])
def test_alpha_rises_over_a_repeated_stream_against_the_frozen_draft(pair, examples):
    target, draft = pair
    stream = PROMPTS * 4
    config = DecodeConfig(max_new_tokens=12, gamma=3, sampling=SamplingConfig(temperature=1.0), seed=5)
    frozen = serve_stream(target, LMDrafter(copy.deepcopy(draft)), stream, config)
    learnt = serve_stream(target, online(draft, OnlineConfig(buffer_size=64, update_every=1, steps_per_update=4,
                                                             lr=1e-2, examples=examples)), stream, config)
    assert frozen.updates == 0 and learnt.updates == len(stream)
    assert learnt.sequences[0].alpha == frozen.sequences[0].alpha  # same draft and uniforms before any update

    def last_pass(s):
        return sum(x.accepted for x in s.sequences[-3:]) / sum(x.tested for x in s.sequences[-3:])
    assert last_pass(learnt) > last_pass(frozen) + 0.3


# ------------------------------------------------------------------------------------------- exactness


@pytest.mark.parametrize("examples", ["steps", "sequences"])
def test_greedy_output_is_autoregressive_while_the_draft_updates(pair, examples):
    target, draft = pair
    drafter = online(draft, dataclasses.replace(FAST, examples=examples))
    config = DecodeConfig(max_new_tokens=16, gamma=3)
    before = state(drafter.learner.model)
    stream = serve_stream(target, drafter, PROMPTS * 2, config)
    assert stream.updates == 6 and not torch.equal(state(drafter.learner.model)["lm_head.weight"],
                                                   before["lm_head.weight"])
    for prompt, rec in zip(PROMPTS * 2, stream.records):
        assert rec.token_ids == autoregressive_generate(target, prompt, config).token_ids


class ReportsTheStartingRows(OnlineDrafter):
    """A deliberate bug for the power check: tokens come from the learning draft, but the q rows reported are
    those of the draft as it was at the start of the stream, so after an update q is no longer the law the
    tokens were drawn from (what a drafter that kept stale rows or a stale cache across an update would do)."""

    def __init__(self, model, config):
        super().__init__(OnlineLearner(model, config))
        self.start = copy.deepcopy(model).eval()

    def propose(self, ids, gamma, sampling, generator):
        proposal = super().propose(ids, gamma, sampling, generator)
        seq = list(ids) + proposal.tokens.tolist()
        with torch.inference_mode():
            logits = self.start(input_ids=torch.tensor([seq])).logits[0]  # [L, V]
        q = warp(logits[len(ids) - 1: len(ids) - 1 + gamma], sampling)  # [γ, V] of the starting weights
        return Proposal(tokens=proposal.tokens, probs=q, calls=proposal.calls)


def first_two_counts(target, drafter, sampling) -> np.ndarray:
    """The first two tokens of RUNS sequences of one stream (seeds 0..RUNS−1); the draft updates between them."""
    # max_new_tokens 3 with γ = 2: the first step drafts two tokens, so both positions are tested.
    config = DecodeConfig(max_new_tokens=3, gamma=2, sampling=sampling, stop_at_eos=False)
    stream = serve_stream(target, drafter, [PROMPT] * RUNS, config)
    counts = np.zeros((V, V), dtype=np.int64)
    for rec in stream.records:
        counts[rec.token_ids[0], rec.token_ids[1]] += 1
    return counts, stream


def test_sampling_follows_the_targets_law_while_the_draft_updates(pair):
    target, draft = pair
    sampling = SamplingConfig(temperature=1.0)
    expected = exact_first_two(target, PROMPT, sampling)
    config = OnlineConfig(buffer_size=8, update_every=5, steps_per_update=1, lr=2e-2)
    counts, stream = first_two_counts(target, online(draft, config), sampling)
    assert stream.updates == RUNS // 5
    assert chi2_pvalue(counts, expected) > FALSE_ALARM
    # Power: the same test rejects a drafter whose q is not the law its tokens were drawn from.
    bad, _ = first_two_counts(target, ReportsTheStartingRows(copy.deepcopy(draft), config), sampling)
    assert chi2_pvalue(bad, expected) < FALSE_ALARM
