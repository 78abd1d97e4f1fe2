"""A greedy draft (survey blog, "Analysis": q greedy, "probabilities 1 on the draft tokens and 0 elsewhere. Then we
accept its tokens with probability p(x)"), generalised to a top-k draft: the draft model proposes from its own k most
likely tokens, renormalised (k = 1: its argmax, a deterministic q). Verified by the exact rule with that q, so the
output is distributed as p at any temperature: lossless, whatever k."""
import dataclasses
from dataclasses import dataclass

import torch

from ..core.config import MethodParams, SamplingConfig, param, whole
from ..drafters import LMDrafter, Proposal
from .base import Cost, Loop, Method, Needs


@dataclass(frozen=True)
class Params(MethodParams):
    draft_top_k: int = param(1, "greedy-draft: the draft proposes from its own top-k tokens, renormalised "
                                "(1: its argmax, a deterministic q)", label="k", check=whole(1))


class TopKDrafter(LMDrafter):
    """The draft model's chain drawn from its top-k at the run's temperature (its argmax when k = 1); the q it
    returns is that truncated distribution, the one the exact rule must see."""

    name = "lm top-k"

    def __init__(self, model: torch.nn.Module, k: int):
        super().__init__(model)
        self.k = k

    def propose(self, ids: list[int], gamma: int, sampling: SamplingConfig, generator: torch.Generator) -> Proposal:
        own = (SamplingConfig(temperature=0.0) if self.k == 1 or sampling.greedy
               else dataclasses.replace(sampling, top_k=min(self.k, sampling.top_k or self.k)))
        return super().propose(ids, gamma, own, generator)


GREEDY_DRAFT = Method("greedy-draft", Loop.SPECULATIVE, Cost.DRAFT_MODEL, needs=Needs.DRAFT_MODEL, params=Params,
                      drafter=lambda draft, target, config: TopKDrafter(draft.model, config.params.draft_top_k),
                      drafter_type=TopKDrafter,
                      document="survey blog (q greedy)",
                      summary="the draft's argmax as a deterministic q (accepted w.p. p(x)); `--draft-top-k k`: its k "
                              "best, renormalised")
