"""A draft language model that learns while it serves: online speculative decoding (survey blog, *Variants:
Online Speculative Decoding*; Liu et al. 2023).

``OnlineDrafter`` proposes exactly as ``LMDrafter`` (γ tokens sampled from the draft's warped q, each with its
row) and, in ``feedback``, turns the target's rows at its γ positions into a training sample for its learner.
The learner (``specrepro.training.online.OnlineLearner``: the buffer and the distillation update every L
sequences) trains the same module the drafter samples from; this file knows it only through ``Learner``, the few
calls the drafter makes, so drafting never depends on the training code (``training.online.online_drafter``
builds the pair).

- ``OnlineSample``: one verification step as training data: the context the draft proposed after, its γ tokens
  and the target's top-k probabilities (plus the tail mass) at each of the γ draft positions.
- ``SequenceSample``: the steps of one served sequence merged into one example, the committed text with the
  target's rows at every draft position that lies on it (the learner's ``examples = "sequences"``).

A sequence ends at ``end_sequence()`` (``serve_stream`` calls it after each generation) or, in any other loop that
reuses the drafter, at the next ``reset()``, which the loop calls before each new prompt; so the weights change
only between sequences. After an update the draft's cache is dropped: its keys and values came from the old
weights, and a proposal must be drawn from the q it reports.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ..core.config import SamplingConfig
from .base import Drafter, Proposal, StepFeedback
from .lm import LMDrafter


def teacher_rows(p: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """The target's raw rows [N, V] as far as its warped rows p̃ [N, V] give them: p̃^T renormalised at T > 0
    (exp(T log p̃) ∝ exp(z)), the one-hot argmax itself at T = 0 (``training.online``'s docstring)."""
    p = p.float()
    if sampling.greedy:
        return p
    return torch.softmax(sampling.temperature * torch.log(p), dim=-1)  # p̃ = 0 stays 0 (log 0 = −inf)


@dataclass(frozen=True)
class OnlineSample:
    """One verification step as training data: after ``context`` the draft proposed ``tokens`` (x_0..x_{γ−1});
    row i is the target's distribution of x_i given context + x_<i, kept as its top-k and the tail mass."""

    context: tuple[int, ...]  # the committed sequence the draft proposed after (prompt included)
    tokens: tuple[int, ...]  # [γ] the draft's tokens
    top_ids: torch.Tensor  # [γ, K] long
    top_probs: torch.Tensor  # [γ, K] float32
    tail: torch.Tensor  # [γ] float32, 1 − Σ top_probs

    @classmethod
    def from_step(cls, context: list[int], tokens: list[int], p: torch.Tensor, sampling: SamplingConfig,
                  top_k: int) -> "OnlineSample":
        """From the target's warped rows p [γ, V] at the draft's γ positions (``StepFeedback.p[:γ]``)."""
        if p.dim() != 2 or p.shape[0] != len(tokens):
            raise ValueError(f"need one target row per draft token: {len(tokens)} tokens, rows {tuple(p.shape)}")
        rows = teacher_rows(p, sampling).cpu()  # [γ, V]
        top = torch.topk(rows, min(top_k, rows.shape[-1]), dim=-1)  # [γ, K] each
        return cls(tuple(context), tuple(tokens), top.indices, top.values,
                   (1 - top.values.sum(-1)).clamp(min=0))

    @property
    def rows(self) -> int:
        return len(self.tokens)

    def teacher(self) -> tuple[tuple[int, ...], slice, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(sequence [L], positions of its rows, top ids [R, K], top probs [R, K], tail [R]): tokens = context +
        x_0..x_{γ−1}, a teacher row for each x_i (the arguments of ``training.data.Example.with_rows``)."""
        return self.context + self.tokens, slice(len(self.context), None), self.top_ids, self.top_probs, self.tail


@dataclass(frozen=True)
class SequenceSample:
    """One served sequence as training data: its committed tokens and the target's rows at the R draft positions
    that lie on it."""

    tokens: tuple[int, ...]  # [L] the committed sequence, prompt included
    positions: torch.Tensor  # [R] long: row r is the target's law of tokens[positions[r]] given tokens[:positions[r]]
    top_ids: torch.Tensor  # [R, K] long
    top_probs: torch.Tensor  # [R, K] float32
    tail: torch.Tensor  # [R] float32

    @classmethod
    def from_steps(cls, ids: list[int], steps: list[tuple[OnlineSample, int]]) -> "SequenceSample":
        """Merge a sequence's verification steps (sample, draft tokens accepted) given its committed ``ids``.

        Row i of a step whose context has n0 tokens conditions on context + x_<i; that prefix is on the committed
        sequence while x_<i were all accepted, i.e. for i <= accepted (row ``accepted`` is the first rejected
        position, whose committed token is the residual's). Rows after a rejection condition on rejected tokens
        and are left out; so are rows at or past the end of ``ids``."""
        k = steps[0][0].top_ids.shape[-1] if steps else 1
        positions: list[int] = []
        rows = [(torch.zeros(0, k, dtype=torch.long), torch.zeros(0, k), torch.zeros(0))]  # (ids, probs, tail)
        for sample, accepted in steps:  # contexts grow step by step, so positions come out increasing
            n0 = len(sample.context)
            if tuple(ids[:n0]) != sample.context:
                raise ValueError("a step's context is not a prefix of the committed sequence")
            m = max(0, min(accepted + 1, len(sample.tokens), len(ids) - n0))
            positions += range(n0, n0 + m)
            rows.append((sample.top_ids[:m], sample.top_probs[:m], sample.tail[:m]))
        top_ids, top_probs, tail = (torch.cat(parts) for parts in zip(*rows))
        return cls(tuple(ids), torch.tensor(positions, dtype=torch.long), top_ids.long(), top_probs.float(),
                   tail.float())

    @property
    def rows(self) -> int:
        return int(self.positions.numel())

    def teacher(self) -> tuple[tuple[int, ...], torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(sequence [L], positions [R], top ids [R, K], top probs [R, K], tail [R]), as ``OnlineSample.teacher``."""
        return self.tokens, self.positions, self.top_ids, self.top_probs, self.tail


class Learner(Protocol):
    """What the drafter asks of its learner (``training.online.OnlineLearner``)."""

    model: torch.nn.Module  # the draft: the learner trains it in place, the drafter samples from it
    config: Any  # with ``top_k`` (rows kept per position) and ``examples`` ("steps" or "sequences")

    @property
    def updates(self) -> int:
        """Updates so far: the drafter drops its cache when this moves."""

    def record(self, sample: OnlineSample | SequenceSample) -> None:
        """Keep a sample for the next update."""

    def end_sequence(self) -> Any:
        """Count one served sequence; returns the report of the update that follows it, or None."""


class OnlineDrafter(Drafter):
    name = "online"

    def __init__(self, learner: Learner):
        """Drafts from ``learner.model`` (a ``ReducedVocabDraft`` or any causal LM), which ``learner`` trains."""
        self.chain = LMDrafter(learner.model)
        self.learner = learner
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

    def end_sequence(self):
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
