"""Token trees from a draft language model: several candidate chains verified in one target forward.

- ``MultiDraftDrafter``: m chains of γ tokens, each sampled independently from q (the multi-draft setting of
  SpecTr, Sun et al. 2023, and SpecInfer, Miao et al. 2023). The chains are m siblings under the root; each
  first token was drawn from q independently of its siblings, so with the loop's recursive rejection rule the
  output is exactly p. m = 1 is classic speculative sampling.
- ``TopKTreeDrafter``: the draft's k most likely first tokens (deterministic, so q is one-hot), each continued
  greedily for γ − 1 tokens: a k·γ-node tree whose siblings are distinct, the "deterministic candidates" case
  of the recursive rule (rejecting a one-hot candidate removes its token from the residual).

Nodes are laid out chain after chain, each chain in order. ``MultiDraftDrafter`` runs one draft forward per
distinct prefix (at most m·γ, fewer where chains share tokens); ``TopKTreeDrafter`` 1 + k·(γ − 1).
"""
from __future__ import annotations

import torch

from ..core.config import SamplingConfig
from .base import Proposal
from .lm import LMDrafter, sample_chain


def _chains_to_tree(chains: list[list[int]]) -> torch.Tensor:
    """parents [m·γ] for m chains laid out one after another, each hanging from the root."""
    parents, start = [], 0
    for chain in chains:
        parents += [-1] + [start + i for i in range(len(chain) - 1)]
        start += len(chain)
    return torch.tensor(parents, dtype=torch.long)


class MultiDraftDrafter(LMDrafter):  # LMDrafter's draft cache, feedback and reset; a tree-shaped proposal
    name = "multi-draft"

    def __init__(self, model: torch.nn.Module, num_drafts: int = 2):
        if num_drafts < 1:
            raise ValueError(f"num_drafts must be >= 1, got {num_drafts}")
        super().__init__(model)
        self.num_drafts = num_drafts

    def propose(self, ids: list[int], gamma: int, sampling: SamplingConfig,
                generator: torch.Generator) -> Proposal:
        uniforms = torch.rand(self.num_drafts, gamma, generator=generator, dtype=torch.float64)  # [m, γ]
        # One draft forward per distinct prefix, shared by every chain through it: siblings drawn after the same
        # tokens get the same q row exactly (K-SEQ's i.i.d. candidates), in any dtype.
        chains, rows, known = [], [], {}
        for j in range(self.num_drafts):
            tokens, q = sample_chain(self.lm, ids, gamma, sampling, uniforms[j], known=known)
            chains.append(tokens)
            rows += q
        return Proposal(tokens=torch.tensor(sum(chains, [])), probs=torch.stack(rows),  # [m·γ], [m·γ, V]
                        calls=len(known), parents=_chains_to_tree(chains))


class TopKTreeDrafter(LMDrafter):
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
        chains = [sample_chain(self.lm, ids, gamma, greedy, no_uniforms, first=x)[0] for x in first]
        return Proposal(tokens=torch.tensor(sum(chains, [])), probs=None,  # one-hot q: deterministic candidates
                        calls=1 + self.k * (gamma - 1), parents=_chains_to_tree(chains))
