"""A draft language model that learns while it serves: online speculative decoding (survey blog, *Variants:
Online Speculative Decoding*).

``OnlineDrafter`` proposes exactly as ``LMDrafter`` (γ tokens sampled from the draft's warped q, each with its
row) and, in ``feedback``, turns the target's rows at its γ positions into a training sample for its
``OnlineLearner`` (``specrepro.training.online``: the buffer, the distillation update every L sequences).

A sequence ends at ``end_sequence()`` (``serve_stream`` calls it after each generation) or, in any other loop that
reuses the drafter, at the next ``reset()``, which the loop calls before each new prompt; so the weights change
only between sequences. After an update the draft's cache is dropped: its keys and values came from the old
weights, and a proposal must be drawn from the q it reports.
"""
from __future__ import annotations

import torch

from ..config import SamplingConfig
from ..training.online import OnlineConfig, OnlineLearner, OnlineSample, SequenceSample, UpdateReport
from .base import Drafter, Proposal, StepFeedback
from .lm import LMDrafter


class OnlineDrafter(Drafter):
    name = "online"

    def __init__(self, model: torch.nn.Module, config: OnlineConfig = OnlineConfig()):
        """``model`` is the draft (a ``ReducedVocabDraft`` or any causal LM); it is trained in place."""
        self.chain = LMDrafter(model)
        self.learner = OnlineLearner(model, config)
        self._weights_seen = self.learner.updates  # the update count the draft cache was built under
        self._pending: tuple[list[int], list[int], SamplingConfig] | None = None  # the last proposal, until feedback
        self._served = False  # a step was verified since the last end of sequence
        # examples = "sequences": this sequence's steps (sample, tokens accepted) and its committed ids so far
        self._steps: list[tuple[OnlineSample, int]] = []
        self._ids: list[int] = []

    def propose(self, ids: list[int], gamma: int, sampling: SamplingConfig,
                generator: torch.Generator) -> Proposal:
        if self._weights_seen != self.learner.updates:  # cached keys came from the old weights
            self.chain.reset()
            self._weights_seen = self.learner.updates
        proposal = self.chain.propose(ids, gamma, sampling, generator)
        self._pending = (list(ids), proposal.tokens.tolist(), sampling)  # `ids` grows in place as the loop commits
        return proposal

    def feedback(self, step: StepFeedback) -> None:
        self.chain.feedback(step)
        self._served = True
        if self.learner.config.examples == "sequences":
            self._ids = list(step.ids)  # the committed sequence so far (the sequence example is this text)
        if self._pending is None:  # the loop took a plain step (no budget left to draft): nothing to learn
            return
        context, tokens, sampling = self._pending
        self._pending = None
        # Rows 0..γ−1 are the target at the draft's positions (row γ follows the last draft token: not one).
        sample = OnlineSample.from_step(context, tokens, step.p[: len(tokens)], sampling, self.learner.config.top_k)
        if self.learner.config.examples == "sequences":  # merged into one example when the sequence ends
            self._steps.append((sample, len(step.path)))
        else:
            self.learner.record(sample)

    def end_sequence(self) -> UpdateReport | None:
        """Close the sequence being served (once; a no-op when none is open): the learner counts it and, after
        every L-th, updates the draft. Returns the update's report, or None when there was none."""
        if not self._served:
            return None
        self._served = False
        if self._steps:
            merged = SequenceSample.from_steps(self._ids, self._steps)
            if merged.rows:
                self.learner.record(merged)
            self._steps, self._ids = [], []
        report = self.learner.end_sequence()
        if report is not None:
            self.chain.reset()
            self._weights_seen = self.learner.updates
        return report

    def reset(self) -> None:
        self.end_sequence()  # a loop that only calls reset() between prompts still gets its updates
        self.chain.reset()
        self._pending = None
