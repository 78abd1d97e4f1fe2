"""A step's wall time in three parts, the target's forwards, the draft's forwards and the host's work
(``core.decoding.StepSplit``, counted by ``engine.timing``), in every record and in summary.csv."""
from __future__ import annotations

import pytest
import torch

import simulations as sim
from specrepro.core.config import DecodeConfig
from specrepro.core.decoding import Clock, StepSplit
from specrepro.decode.adaptive import AdaptiveGamma
from specrepro.decode.autoregressive import autoregressive_generate
from specrepro.decode.speculative import speculative_generate
from specrepro.drafters import LMDrafter
from specrepro.drafters.base import Drafter, Proposal
from specrepro.drafters.eagle import EagleDrafter
from specrepro.drafters.prompt_lookup import PromptLookupDrafter
from specrepro.engine import timing
from specrepro.run.bench_summary import step_split
from tests.drafters.test_eagle import random_draft

pytestmark = pytest.mark.usefixtures("one_thread")
PROMPT = [9, 40, 41, 12, 5, 5, 60, 9, 40, 41]


def test_nested_forward_regions_count_once(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(timing.time, "perf_counter", lambda: now[0])
    before = timing.seconds()
    with timing.forward():
        now[0] += 1.0
        with timing.forward():  # a drafter's head on the engine, inside the drafter's own region
            now[0] += 2.0
        now[0] += 0.5
    now[0] += 7.0  # outside any forward: the host's
    assert timing.seconds() - before == pytest.approx(3.5)


def test_a_split_charges_each_phase_keeps_the_first_step_and_gives_the_steady_step(monkeypatch):
    forward = [0.0]
    monkeypatch.setattr(timing, "seconds", lambda: forward[0])
    split = StepSplit(Clock("cpu"))
    for draft_s, target_s, elapsed in ((2.0, 3.0, 6.0), (0.5, 2.0, 9.0)):
        forward[0] += draft_s
        split.charge("draft")
        forward[0] += target_s
        split.charge("target")
        split.step(elapsed)
    record = split.record(9.0)
    assert record == {"target_forward_s": 5.0, "draft_forward_s": 2.5, "host_s": 1.5,
                      "first_step": {"wall_s": 6.0, "target_forward_s": 3.0, "draft_forward_s": 2.0}}
    # the second step alone: 3 s of wall, 2 s of target forward, 0.5 s of draft forward, so 0.5 s of host
    assert step_split([{"time_split": record, "wall_time_s": 9.0, "target_calls": 2}]) == pytest.approx(
        {"step_target_ms": 2000.0, "step_draft_ms": 500.0, "step_host_ms": 500.0, "draft_over_target": 0.25})
    assert StepSplit(Clock("cuda")).record(1.0) is None  # a forward only queues kernels there: not split
    assert step_split([{"time_split": None, "wall_time_s": 1.0, "target_calls": 3}])["step_host_ms"] is None
    assert step_split([{"wall_time_s": 1.0, "target_calls": 3}])["step_target_ms"] is None  # a record made before


def parts(rec) -> tuple[float, float, float]:
    split = rec.time_split
    return split["target_forward_s"], split["draft_forward_s"], split["host_s"]


def test_every_loop_splits_its_generation(tiny_pair_64):
    target, draft = tiny_pair_64
    config = DecodeConfig(max_new_tokens=24, gamma=3)
    ar = autoregressive_generate(target, PROMPT, DecodeConfig(method="ar", max_new_tokens=24))
    lookup = speculative_generate(target, PromptLookupDrafter(), PROMPT, config, method="prompt-lookup")
    model = speculative_generate(target, LMDrafter(draft), PROMPT, config)
    eagle_draft, eagle_config = random_draft(target)
    eagle = speculative_generate(target, EagleDrafter(eagle_draft, eagle_config, tree_size=4), PROMPT, config,
                                 method="eagle")
    for rec in (ar, lookup, model, eagle):
        target_s, draft_s, host_s = parts(rec)
        assert 0 < target_s < rec.wall_time_s and host_s > 0, rec.method
        assert target_s + draft_s + host_s == pytest.approx(rec.wall_time_s)
        first = rec.time_split["first_step"]
        assert 0 < first["target_forward_s"] <= target_s and first["wall_s"] <= rec.wall_time_s
    assert parts(ar)[1] == 0 and parts(lookup)[1] == 0  # no draft forward: copying is the host's work
    assert parts(model)[1] > 0 and parts(eagle)[1] > 0  # a draft model's forwards; EAGLE's layer and head
    assert parts(model)[1] <= model.time_draft_s  # its forwards are part of its proposing
    summary = step_split([rec.to_dict() for rec in (model,)])
    assert all(v is not None and v >= 0 for v in summary.values())


# --- γ auto falls back to plain decoding when drafting stops paying ------------------------------------------------

class Wrong(Drafter):
    """Proposes, at every position, a token the greedy target does not pick: every draft is rejected at T = 0."""

    def __init__(self, prompt_len: int, greedy: list[int], vocab: int):
        self.prompt_len, self.greedy, self.vocab = prompt_len, greedy, vocab

    def propose(self, ids, gamma, sampling, generator):
        at = len(ids) - self.prompt_len
        tokens = [(self.greedy[min(at + i, len(self.greedy) - 1)] + 1) % self.vocab for i in range(gamma)]
        return Proposal(tokens=torch.tensor(tokens, dtype=torch.long), probs=None, calls=0)


CURVE = sim.BetaCurve((1, 2, 3, 4, 5), (1.0, 1.1, 1.2, 1.3, 1.4))


def test_gamma_auto_asks_for_no_draft_when_none_is_predicted_to_pay():
    hopeless = AdaptiveGamma(c=0.5, beta=CURVE, alpha_prior=0.05, gamma_max=4)
    assert hopeless.choose([], []) == 0 and "γ = 0: plain decoding" in hopeless.explain([], [])
    hopeful = AdaptiveGamma(c=0.0, beta=CURVE, alpha_prior=0.8, gamma_max=4)
    assert hopeful.choose([], []) >= 1 and "plain decoding" not in hopeful.explain([], [])
    # the same prior after four rejections at the first draft: α̂_1 = 0.8 · 4 / 8 = 0.4
    assert hopeful.alpha_estimates([0] * 4, [4] * 4)[0] == pytest.approx(0.4)


def test_a_generation_whose_drafts_keep_failing_goes_on_as_ar_and_says_when(tiny_pair_64):
    target, _ = tiny_pair_64
    config = DecodeConfig(max_new_tokens=30, gamma="auto")
    ar = autoregressive_generate(target, PROMPT, DecodeConfig(method="ar", max_new_tokens=30))
    policy = AdaptiveGamma(c=0.0, beta=CURVE, alpha_prior=0.5, prior_weight=1.0, gamma_max=4)
    rec = speculative_generate(target, Wrong(len(PROMPT), ar.token_ids, 64), PROMPT, config, gamma_policy=policy)
    assert rec.token_ids == ar.token_ids and rec.accept_lengths and not any(rec.accept_lengths)
    first = rec.gammas.index(0)
    assert 1 <= first < 10 and not any(rec.gammas[first:])  # it stops drafting and does not start again
    fell = rec.provenance["fell_back"]
    assert fell["step"] == first + 1 and "γ = 0: plain decoding" in fell["why"]
    assert len(rec.gammas) == rec.target_calls  # one target call per step, γ = 0 or not


def test_a_tree_drafter_is_charged_its_draft_forwards_or_one_drafting_per_tree_step():
    """EAGLE counts its draft forwards (three a step here); Medusa's heads count none, yet run once every tree
    step; PPD measures no drafting of its own (its prompt tokens ride in the target's forward), so it is charged
    nothing and its c is 0."""
    from specrepro.run.bench_summary import draft_step_s, drafting_seconds, tree_c

    eagle = [{"draft_calls": 9, "tree_sizes": [4, 4, 4], "provenance": {"draft_step_s": 0.002}}]
    medusa = [{"draft_calls": 0, "tree_sizes": [6, 6], "provenance": {"draft_step_s": 0.001}},
              {"draft_calls": 0, "tree_sizes": [6], "provenance": {"draft_step_s": 0.003}}]
    ppd = [{"draft_calls": 0, "tree_sizes": [5, 5], "provenance": {}}]
    assert drafting_seconds(eagle, draft_step_s(eagle)) == pytest.approx(9 * 0.002)
    assert draft_step_s(medusa) == pytest.approx(0.002)  # the median over the records' plans
    assert drafting_seconds(medusa, draft_step_s(medusa)) == pytest.approx(3 * 0.002)
    assert draft_step_s(ppd) is None and drafting_seconds(ppd, None) == 0.0

    class Step:
        decode_s = 0.008
    assert tree_c(eagle, Step()) == pytest.approx(0.25) and tree_c(ppd, Step()) == 0.0
    assert tree_c(eagle, None) is None
