"""BiLD's small model with its fallback policy: draft while confident, hand over to the target when not.

Kim et al. 2023, *Speculative Decoding with Big Little Decoder* (NeurIPS; arXiv 2302.07863, §3, "Fallback
policy"), a baseline of the MJSD paper (seed 000, §5 and §6: "BiLD only calls the large model when the
probability output by the small model is below a pre-defined threshold τ1"; Table 5: τ1 ∈ {0.3, 0.9}, γ = 10).

The small model drafts autoregressively, at most γ tokens, and stops before the first position where its
confidence, the largest probability of its next-token distribution, falls below τ1 (α_FB in BiLD's paper): the
target writes that token (the verification loop's next token, ``acceptance.bild``'s rule). Confidence is read
from the warped q the token would be drawn from, the MJSD setting (top-k 20, top-p 0.9); at T = 0 the warped q
is one-hot and would always read 1, so there it is read from the plain softmax of the draft's logits, BiLD's own
greedy setting. The drafter counts every draft forward it ran, the one that found low confidence included; a
fallback at the first position gives an empty proposal (the loop then takes one plain target step).
"""
from __future__ import annotations

import torch

from ..core.config import SamplingConfig
from .base import Proposal
from .lm import LMDrafter, sample_chain


def draft_confidence(
    logits: torch.Tensor,  # [V] the draft's next-token logits
    q: torch.Tensor,  # [V] the same logits warped by ``sampling``
    sampling: SamplingConfig,
) -> float:
    """max_x q(x), BiLD's fallback statistic; at T = 0 max_x softmax(logits)(x) (the warped q is one-hot)."""
    probs = logits.float().softmax(-1) if sampling.greedy else q
    return float(probs.max())


class BiLDDrafter(LMDrafter):  # LMDrafter's draft cache, feedback and reset; proposals cut by the fallback policy
    name = "bild"

    def __init__(self, model: torch.nn.Module, fallback_threshold: float = 0.9):
        if not (isinstance(fallback_threshold, (int, float)) and 0.0 <= fallback_threshold <= 1.0):
            raise ValueError(f"fallback_threshold (τ1, a probability) must be in [0, 1], got {fallback_threshold!r}")
        super().__init__(model)
        self.fallback_threshold = fallback_threshold  # τ1: draft while the draft's max probability is >= τ1

    def propose(self, ids: list[int], gamma: int, sampling: SamplingConfig,
                generator: torch.Generator) -> Proposal:
        uniforms = torch.rand(gamma, generator=generator, dtype=torch.float64)  # [γ]
        # fallback: the chain stops where the draft's confidence is below τ1 and the target writes that position
        def unsure(logits: torch.Tensor, q: torch.Tensor) -> bool:  # logits [V], q [V]
            return draft_confidence(logits, q, sampling) < self.fallback_threshold

        tokens, rows = sample_chain(self.lm, ids, gamma, sampling, uniforms, stop=unsure)
        calls = len(tokens) + (len(tokens) < gamma)  # the forward that found low confidence counts too
        return Proposal(tokens=torch.tensor(tokens, dtype=torch.long),  # [n ≤ γ]
                        probs=torch.stack(rows) if rows else None, calls=calls)  # [n, V]
