"""The contract between proposers and the verifier (vLLM's ``interfaces.py``): what a drafter proposes
(``Proposal``: a token tree and its q), what scoring it gives (``Scores``, through a ``Scorer``; ``score_tree`` is
the default, the verifier's own tree forward) and what one verification step tells the drafter back
(``StepFeedback``). Plain data: the drafters (``specrepro.drafters``) and the verification step (``specrepro.core.verify``)
both import it, so neither imports the other.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

from .tree import chain_parents, depths

if TYPE_CHECKING:
    from .kvcache import CachedModel


@dataclass
class Proposal:
    tokens: torch.Tensor  # [N] long (N = 0: "nothing to propose", the loop takes one plain step)
    probs: torch.Tensor | None  # [N, V] the q each token was drawn from; None for a deterministic drafter
    calls: int = 0  # draft-model forward passes spent on this proposal
    parents: torch.Tensor | None = None  # [N] long, −1 = child of the newest committed token; None = a chain

    @classmethod
    def empty(cls) -> "Proposal":
        return cls(tokens=torch.empty(0, dtype=torch.long), probs=None)

    @property
    def size(self) -> int:
        """N, the nodes proposed."""
        return self.tokens.numel()

    def tree_parents(self) -> torch.Tensor:
        """parents [N] of the proposal's tree (a chain's when none were given)."""
        return chain_parents(self.tokens.numel()) if self.parents is None else self.parents.long().cpu()

    def depth(self) -> int:
        """The longest root path offered (γ for a chain of γ tokens; 0 for an empty proposal)."""
        return int(depths(self.tree_parents()).max()) if self.size else 0


@dataclass(frozen=True)
class Scores:
    """What scoring a proposal gave (vLLM's ``SpeculativeScores``)."""

    logits: torch.Tensor  # [N+1, V] row 0 after the committed ids, row i+1 after node i's root path
    hidden: torch.Tensor | None  # [S, H] final hidden states of the S scored positions, when asked for
    n_inputs: int  # S: positions scored for the step: the root, the N nodes and any nodes the scorer added


def score_tree(model: "CachedModel", ids: list[int], tokens: torch.Tensor, parents: torch.Tensor,
               output_hidden: bool = False) -> Scores:
    """The default scorer: ``model``'s tree forward over the newest committed token and the N nodes (S = N+1)."""
    logits, hidden = model.logits_for_tree(ids, tokens, parents, output_hidden=output_hidden)
    return Scores(logits=logits, hidden=hidden, n_inputs=1 + tokens.numel())


class Scorer(Protocol):
    def __call__(self, model: "CachedModel", ids: list[int], tokens: torch.Tensor,
                 parents: torch.Tensor) -> Scores: ...


@dataclass(frozen=True)
class StepFeedback:
    """What one verification step did, as the drafter hears it."""

    ids: list[int]  # the committed sequence after the step (prompt included)
    path: list[int]  # accepted node indices of the proposal, root child first
    p: torch.Tensor  # [N+1, V] the target's warped rows over the scored tree
    hidden: torch.Tensor | None  # [S, H] the target's final hidden states over the scored positions (the root,
    #                              the N nodes, then any the drafter's scorer added), when it set needs_hidden
