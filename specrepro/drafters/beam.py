"""A draft language model proposing γ tokens by beam sampling: MJSD's drafter (Qin et al., Algorithm 1 line 2).

``x, q ← beamSample(M_q, input)``: the γ tokens of the best of ``num_beams`` beams (``specrepro.core.beam.beam_sample``),
each beam drawing candidates from the draft's warped distribution and the beams ranked by their joint likelihood
under it. The proposal's q rows are the draft's warped rows along the chosen beam, so the verification rule can
form q(x_1:j | input) = Π q rows[i, x_i] (Algorithm 1's 𝒒_j). Paper default: 8 beams (Table 5).

At T = 0 the warped rows are one-hot and beam sampling is greedy drafting (``specrepro.core.beam``). The draft's batch-1
cache holds the committed tokens only: the beams live in their own cache, gone after each proposal.
"""
from __future__ import annotations

import torch

from ..core.beam import beam_sample
from ..core.config import SamplingConfig
from .base import Proposal
from .lm import LMDrafter


class BeamDrafter(LMDrafter):  # LMDrafter's draft cache, feedback (roll back to the committed ids) and reset
    name = "beam"

    def __init__(self, model: torch.nn.Module, num_beams: int = 8):
        if isinstance(num_beams, bool) or not isinstance(num_beams, int) or num_beams < 1:
            raise ValueError(f"num_beams must be an integer >= 1, got {num_beams!r}")
        super().__init__(model)
        self.num_beams = num_beams

    def propose(self, ids: list[int], gamma: int, sampling: SamplingConfig,
                generator: torch.Generator) -> Proposal:
        best = beam_sample(self.lm, ids, gamma, self.num_beams, sampling, generator)
        return Proposal(tokens=torch.tensor(best.tokens), probs=best.probs, calls=best.forwards)  # [γ], [γ, V]
