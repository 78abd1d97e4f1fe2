"""A draft language model q: γ tokens sampled autoregressively, each with its warped distribution."""
from __future__ import annotations

from typing import Callable

import torch

from ..core.config import SamplingConfig
from ..core.kvcache import CachedModel, common_prefix
from ..core.warping import sample, warp
from .base import Drafter, Proposal, StepFeedback


def sample_chain(lm: CachedModel, prefix: list[int], length: int, sampling: SamplingConfig,
                 uniforms: torch.Tensor, first: int | None = None,
                 stop: Callable[[torch.Tensor, torch.Tensor], bool] | None = None,
                 known: dict[tuple[int, ...], torch.Tensor] | None = None,
                 ) -> tuple[list[int], list[torch.Tensor]]:
    """``length`` tokens after ``prefix``, each drawn from the draft's warped q with one uniform (uniforms
    [length]); ``first``, when given, is forced at the first position and costs no draft forward; ``stop(logits
    [V], q [V])``, when given, ends the chain before the position it is true at (that forward was run). Returns the
    tokens and the q rows [V] they were drawn from (none for a forced first token).

    ``known`` maps the chain's tokens so far (after ``prefix``) to the draft's logits [V] there: a position whose
    tokens are in it takes those logits and runs no forward, and the logits of every forward run are added. Chains
    sampled with one ``known`` therefore draw from the very same q row wherever they share a prefix. (Computed
    again, the row would depend on how many positions that forward ran: in bf16 a 1-token and a 3-token forward
    round differently, and i.i.d. siblings would no longer share one q.)"""
    seq, tokens, rows = list(prefix), [], []
    for i in range(length):
        if i == 0 and first is not None:  # forced: its q is one-hot, given by the caller
            x_i = first
        else:
            key = tuple(tokens)
            if known is not None and key in known:
                logits = known[key]  # [V]
            else:
                # The cache keeps the common prefix with `seq`; only new positions are run (1 after the first).
                logits = lm.logits_for(seq)[-1]  # [V]
                if known is not None:
                    known[key] = logits
            q_i = warp(logits, sampling)  # [V]
            if stop is not None and stop(logits, q_i):
                break
            x_i = sample(q_i, uniforms[i])
            rows.append(q_i)
        tokens.append(x_i)
        seq.append(x_i)
    return tokens, rows


class LMDrafter(Drafter):
    name = "lm"
    batching = "speculative sampling: a draft model's chain, its forwards batched across rows"

    def __init__(self, model: torch.nn.Module):
        self.lm = CachedModel(model)

    def propose(self, ids: list[int], gamma: int, sampling: SamplingConfig,
                generator: torch.Generator) -> Proposal:
        uniforms = torch.rand(gamma, generator=generator, dtype=torch.float64)  # [γ]
        tokens, probs = sample_chain(self.lm, ids, gamma, sampling, uniforms)
        return Proposal(tokens=torch.tensor(tokens), probs=torch.stack(probs), calls=gamma)

    def feedback(self, step: StepFeedback) -> None:
        # Keep only the cached positions that were committed; x_γ was never run through the draft.
        self.lm.rollback(common_prefix(self.lm.ids, step.ids))

    def reset(self) -> None:
        self.lm.reset()
