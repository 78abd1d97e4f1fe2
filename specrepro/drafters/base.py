"""The drafter interface: drafters propose, the verification step scores and verifies.

A drafter sees the committed token ids and returns a proposal: a token tree (``specrepro.tree``: tokens [N],
parents [N], −1 = child of the newest committed token) of at most γ tokens per root path and, when it has one,
the distribution q each token was drawn from. A chain of γ tokens (classic speculative decoding) leaves
``parents`` as None. A deterministic drafter returns ``probs=None``; the loop then uses a one-hot q, so
speculative sampling stays exact (the survey blog: "a process which produces deterministic tokens could take
the place of q, and the samples will still be from p").

The verifier scores a proposal through the drafter's ``score(model, ids, tokens, parents) -> Scores`` (STYLE.md:
"one scorer: score(committed, tree) -> (logits [N+1, V], hidden | None)"). The default is the verifier's own
tree forward (``score_tree``); a drafter whose own nodes ride in that forward overrides it: PPD appends its
prompt tokens after the candidates (``drafters.ppd``), scored for their hidden states only and never verified
or kept, so neither the loop nor the proposal knows about them.

After every verification the loop tells the drafter what happened in one call, ``feedback(step)``: the
committed sequence, the accepted path, the target's warped rows and, for drafters that set ``needs_hidden``
(Medusa heads, prompt tokens), the target's final hidden states (the counterpart of transformers'
``update_candidate_strategy``).

``TreeDrafter`` declares what the tree methods built on measured rank probabilities (Medusa, PPD) add: the
weights' ``config``, the ``tree_size`` and ``resized(n)``; their modules' ``choose_tree_size(config, profile,
gamma)`` picks n (``specrepro.cost.best_tree_size``).
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

from ..config import SamplingConfig
from ..tree import chain_parents, depths

if TYPE_CHECKING:
    from ..kvcache import CachedModel


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


class Drafter(abc.ABC):
    """Every drafter takes the same arguments; state (caches, tables) lives inside it."""

    name: str = "drafter"
    needs_hidden: bool = False  # ask the loop for the target's hidden states in feedback (self-drafting heads)

    @abc.abstractmethod
    def propose(self, ids: list[int], gamma: int, sampling: SamplingConfig,
                generator: torch.Generator) -> Proposal:
        """Propose up to ``gamma`` tokens per root path to follow ``ids`` (the committed sequence, prompt included)."""

    def score(self, model: "CachedModel", ids: list[int], tokens: torch.Tensor, parents: torch.Tensor) -> Scores:
        """Score the latest proposal (tokens [N], parents [N]) after ``ids`` with the verifier ``model`` in one
        forward: its own tree forward, hidden states included when ``needs_hidden``."""
        return score_tree(model, ids, tokens, parents, output_hidden=self.needs_hidden)

    def feedback(self, step: StepFeedback) -> None:
        """Told what each verification did (roll back caches, learn online, read the target's hidden states)."""

    def reset(self) -> None:
        """Forget per-sequence state before a new prompt."""


class RankedWeights(Protocol):
    """A tree drafter's weights config (``MedusaConfig``, ``PPDConfig``)."""

    # rank_probs[d][i]: P(the truth d+2 positions after the anchor is exactly the (i+1)-th guess at distance d+1),
    # measured on held-out data: what the tree and its hardware-aware size are built from
    rank_probs: tuple[tuple[float, ...], ...]


class TreeDrafter(Drafter):
    """A drafter proposing a token tree of ``tree_size`` nodes built from its weights' measured rank
    probabilities (Medusa heads, PPD prompt tokens).

    Its module also defines ``choose_tree_size(config, profile, gamma) -> tree.TreeSize``, the hardware-aware size
    on a device profile; a method then runs ``drafter.resized(choice.size)``.
    """

    def __init__(self, config: RankedWeights, tree_size: int):
        self.config = config  # the weights' config, with their rank probabilities
        self.tree_size = tree_size  # nodes of the tree drafted (PPD: candidates + their prompt tokens)

    @abc.abstractmethod
    def resized(self, tree_size: int) -> "TreeDrafter":
        """The same weights drafting a tree of ``tree_size`` nodes."""
