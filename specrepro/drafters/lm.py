"""A draft language model q: γ tokens sampled autoregressively, each with its warped distribution."""
from __future__ import annotations

import torch

from ..config import SamplingConfig
from ..kvcache import CachedModel, common_prefix
from ..warping import sample, warp
from .base import Drafter, Proposal, StepFeedback


class LMDrafter(Drafter):
    name = "lm"

    def __init__(self, model: torch.nn.Module):
        self.lm = CachedModel(model)

    def propose(self, ids: list[int], gamma: int, sampling: SamplingConfig,
                generator: torch.Generator) -> Proposal:
        seq = list(ids)
        tokens, probs = [], []
        uniforms = torch.rand(gamma, generator=generator, dtype=torch.float64)  # [γ]
        for i in range(gamma):
            # The cache keeps the common prefix with `seq`; only new positions are run (1 after the first).
            q_i = warp(self.lm.logits_for(seq)[-1], sampling)  # [V]
            x_i = sample(q_i, uniforms[i])
            tokens.append(x_i)
            probs.append(q_i)
            seq.append(x_i)
        return Proposal(tokens=torch.tensor(tokens), probs=torch.stack(probs), calls=gamma)

    def feedback(self, step: StepFeedback) -> None:
        # Keep only the cached positions that were committed; x_γ was never run through the draft.
        self.lm.rollback(common_prefix(self.lm.ids, step.ids))

    def reset(self) -> None:
        self.lm.reset()
