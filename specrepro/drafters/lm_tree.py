"""Token trees from a draft language model: several candidate chains verified in one target forward.

- ``MultiDraftDrafter``: m chains of γ tokens, each sampled independently from q (the multi-draft setting of
  SpecTr, Sun et al. 2023, and SpecInfer, Miao et al. 2023). The chains are m siblings under the root; each
  first token was drawn from q independently of its siblings, so with the loop's recursive rejection rule the
  output is exactly p. m = 1 is classic speculative sampling.
- ``TopKTreeDrafter``: the draft's k most likely first tokens (deterministic, so q is one-hot), each continued
  greedily for γ − 1 tokens: a k·γ-node tree whose siblings are distinct, the "deterministic candidates" case
  of the recursive rule (rejecting a one-hot candidate removes its token from the residual).

Both spend m·γ (or k·γ) draft steps per proposal; nodes are laid out chain after chain, each chain in order.
"""
from __future__ import annotations

import torch

from ..config import SamplingConfig
from ..kvcache import CachedModel, common_prefix
from ..warping import sample, warp
from .base import Drafter, Proposal, StepFeedback


def _chain(lm: CachedModel, prefix: list[int], first: int | None, length: int, sampling: SamplingConfig,
           uniforms: torch.Tensor) -> tuple[list[int], list[torch.Tensor]]:
    """``length`` tokens after ``prefix``, each drawn from the draft's warped q with one uniform (or forced to
    ``first`` at the first position); returns the tokens and the q rows [V] they were drawn from (none for a
    forced first token)."""
    seq, tokens, rows = list(prefix), [], []
    for i in range(length):
        if i == 0 and first is not None:  # forced: no draft forward needed (its q is one-hot, given by the caller)
            tokens.append(first)
            seq.append(first)
            continue
        q_i = warp(lm.logits_for(seq)[-1], sampling)  # [V]; the cache keeps the common prefix
        x_i = sample(q_i, uniforms[i])
        tokens.append(x_i)
        rows.append(q_i)
        seq.append(x_i)
    return tokens, rows


def _chains_to_tree(chains: list[list[int]]) -> torch.Tensor:
    """parents [m·γ] for m chains laid out one after another, each hanging from the root."""
    parents, start = [], 0
    for chain in chains:
        parents += [-1] + [start + i for i in range(len(chain) - 1)]
        start += len(chain)
    return torch.tensor(parents, dtype=torch.long)


class _LMTreeDrafter(Drafter):
    def __init__(self, model: torch.nn.Module):
        self.lm = CachedModel(model)

    def feedback(self, step: StepFeedback) -> None:
        self.lm.rollback(common_prefix(self.lm.ids, step.ids))

    def reset(self) -> None:
        self.lm.reset()


class MultiDraftDrafter(_LMTreeDrafter):
    name = "multi-draft"

    def __init__(self, model: torch.nn.Module, num_drafts: int = 2):
        if num_drafts < 1:
            raise ValueError(f"num_drafts must be >= 1, got {num_drafts}")
        super().__init__(model)
        self.num_drafts = num_drafts

    def propose(self, ids: list[int], gamma: int, sampling: SamplingConfig,
                generator: torch.Generator) -> Proposal:
        uniforms = torch.rand(self.num_drafts, gamma, generator=generator, dtype=torch.float64)  # [m, γ]
        chains, rows = [], []
        for j in range(self.num_drafts):
            tokens, q = _chain(self.lm, ids, None, gamma, sampling, uniforms[j])
            chains.append(tokens)
            rows += q
        return Proposal(tokens=torch.tensor(sum(chains, [])), probs=torch.stack(rows),  # [m·γ], [m·γ, V]
                        calls=self.num_drafts * gamma, parents=_chains_to_tree(chains))


class TopKTreeDrafter(_LMTreeDrafter):
    name = "top-k-tree"

    def __init__(self, model: torch.nn.Module, k: int = 2):
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        super().__init__(model)
        self.k = k

    def propose(self, ids: list[int], gamma: int, sampling: SamplingConfig,
                generator: torch.Generator) -> Proposal:
        first = self.lm.logits_for(ids)[-1].float().topk(self.k).indices.tolist()  # k distinct root candidates
        greedy = SamplingConfig(temperature=0.0)  # each continued by the draft's argmax: deterministic nodes
        no_uniforms = torch.zeros(gamma, dtype=torch.float64)
        chains = [_chain(self.lm, ids, x, gamma, greedy, no_uniforms)[0] for x in first]
        return Proposal(tokens=torch.tensor(sum(chains, [])), probs=None,  # one-hot q: deterministic candidates
                        calls=1 + self.k * (gamma - 1), parents=_chains_to_tree(chains))
