"""The drafter interface: drafters propose, the verification step scores and verifies.

A drafter sees the committed token ids and returns a proposal: a token tree (``specrepro.core.tree``: tokens [N],
parents [N], −1 = child of the newest committed token) of at most γ tokens per root path and, when it has one,
the distribution q each token was drawn from. A chain of γ tokens (classic speculative decoding) leaves
``parents`` as None. A deterministic drafter returns ``probs=None``; the loop then uses a one-hot q, so
speculative sampling stays exact (the survey blog: "a process which produces deterministic tokens could take
the place of q, and the samples will still be from p").

The verifier scores a proposal with the drafter's ``score(model, ids, tokens, parents) -> Scores`` (docs/notation.md:
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
gamma)`` picks n (``specrepro.core.cost.best_tree_size``).
"""
from __future__ import annotations

import abc
import statistics
from typing import TYPE_CHECKING, Callable, ClassVar, Protocol

import torch

from ..core.config import SamplingConfig
from ..core.proposal import Proposal, Scorer, Scores, StepFeedback, score_tree

if TYPE_CHECKING:
    from ..core.kvcache import CachedModel

__all__ = ["Drafter", "TreeDrafter", "RankedWeights", "Proposal", "Scores", "Scorer", "StepFeedback", "score_tree",
           "warm_median"]


def warm_median(measure: Callable[[], float], repeats: int) -> float:
    """The median of ``repeats`` calls of ``measure`` (each returns the seconds it timed) after one more, dropped:
    the first pays the warm-up (allocations, caches). What a drafter's ``forward_seconds`` reports."""
    samples = [measure() for _ in range(repeats + 1)]
    return statistics.median(samples[1:])


class Drafter(abc.ABC):
    """Every drafter takes the same arguments; state (caches, tables) lives inside it."""

    name: str = "drafter"
    needs_hidden: bool = False  # ask the loop for the target's hidden states in feedback (self-drafting heads)
    # How its rows run in the batched loop (``specrepro.decode.batched``), one line; None: at batch size 1 only. The one
    # declaration of which methods batch (``Method.batches`` derives from it).
    batching: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # Declared by a class for itself alone, never inherited: a subclass changes what is proposed or how it is
        # scored (LMDrafter's multi-draft, top-k, beam and BiLD subclasses), which the batched loop has not been
        # shown to keep exact.
        cls.batching = cls.__dict__.get("batching")

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
    on a device profile; a method then runs ``drafter.resized(choice.size)``. A drafter that pays for its drafting
    (EAGLE's draft forwards, Medusa's heads through the LM head) also has ``forward_seconds()``, measured on this
    machine, which the planner hands to its ``choose_tree_size`` as ``draft_step_s`` (``run.plan.plan_run``).
    """

    def __init__(self, config: RankedWeights, tree_size: int):
        self.config = config  # the weights' config, with their rank probabilities
        self.tree_size = tree_size  # nodes of the tree drafted (PPD: candidates + their prompt tokens)

    @abc.abstractmethod
    def resized(self, tree_size: int) -> "TreeDrafter":
        """The same weights drafting a tree of ``tree_size`` nodes."""
