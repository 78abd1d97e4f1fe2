"""The drafter interface: drafters propose, the verification loop scores and verifies.

A drafter sees the committed token ids and returns a proposal: a token tree (``specrepro.tree``: tokens [N],
parents [N], −1 = child of the newest committed token) of at most γ tokens per root path and, when it has one,
the distribution q each token was drawn from. A chain of γ tokens (classic speculative decoding) leaves
``parents`` as None. A deterministic drafter returns ``probs=None``; the loop then uses a one-hot q, so
speculative sampling stays exact (the survey blog: "a process which produces deterministic tokens could take
the place of q, and the samples will still be from p").

After every verification the loop tells the drafter what happened in one call, ``feedback(step)``: the
committed sequence, the accepted path, the target's warped rows and, for drafters that set ``needs_hidden``
(Medusa heads, prompt tokens), the target's final hidden states (the counterpart of transformers'
``update_candidate_strategy``).

A proposal may also carry *prompt nodes* (PPD's prompt tokens): nodes whose input is a trained embedding rather
than a token. The loop scores them in the same forward, after the candidates, for their hidden states only;
they are never verified and never kept in the cache.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass

import torch

from ..config import SamplingConfig
from ..tree import chain_parents


@dataclass(frozen=True)
class PromptNodes:
    """Embedding-input nodes appended after a proposal's N candidate tokens (PPD's prompt tokens)."""

    embeds: torch.Tensor  # [P, H] the input embedding of each node
    parents: torch.Tensor  # [P] long: −1 the root, 0..N−1 a candidate, N..N+P−1 an earlier prompt node

    def __post_init__(self):
        if self.embeds.dim() != 2 or self.parents.dim() != 1 or self.embeds.shape[0] != self.parents.numel():
            raise ValueError(f"prompt nodes need embeds [P, H] and parents [P], got {tuple(self.embeds.shape)} "
                             f"and {tuple(self.parents.shape)}")

    def __len__(self) -> int:
        return self.parents.numel()


@dataclass
class Proposal:
    tokens: torch.Tensor  # [N] long (N = 0: "nothing to propose", the loop takes one plain step)
    probs: torch.Tensor | None  # [N, V] the q each token was drawn from; None for a deterministic drafter
    calls: int = 0  # draft-model forward passes spent on this proposal
    parents: torch.Tensor | None = None  # [N] long, −1 = child of the newest committed token; None = a chain
    prompt_nodes: PromptNodes | None = None  # scored for their hidden states only (PPD), never verified or kept

    @classmethod
    def empty(cls) -> "Proposal":
        return cls(tokens=torch.empty(0, dtype=torch.long), probs=None)

    def tree_parents(self) -> torch.Tensor:
        """parents [N] of the proposal's tree (a chain's when none were given)."""
        return chain_parents(self.tokens.numel()) if self.parents is None else self.parents.long().cpu()


@dataclass(frozen=True)
class StepFeedback:
    """What one verification step did, as the drafter hears it."""

    ids: list[int]  # the committed sequence after the step (prompt included)
    path: list[int]  # accepted node indices of the proposal, root child first
    p: torch.Tensor  # [N+1, V] the target's warped rows over the scored tree
    hidden: torch.Tensor | None  # [N+1+P, H] the target's final hidden states (root, N candidates, P prompt
    #                              nodes), when the drafter set needs_hidden


class Drafter(abc.ABC):
    """Every drafter takes the same arguments; state (caches, tables) lives inside it."""

    name: str = "drafter"
    needs_hidden: bool = False  # ask the loop for the target's hidden states in feedback (self-drafting heads)

    @abc.abstractmethod
    def propose(self, ids: list[int], gamma: int, sampling: SamplingConfig,
                generator: torch.Generator) -> Proposal:
        """Propose up to ``gamma`` tokens per root path to follow ``ids`` (the committed sequence, prompt included)."""

    def feedback(self, step: StepFeedback) -> None:
        """Told what each verification did (roll back caches, learn online, read the target's hidden states)."""

    def reset(self) -> None:
        """Forget per-sequence state before a new prompt."""
