"""BiLD (the MJSD paper's baseline): the draft runs until its confidence falls below τ1, the target rolls back
from the first token whose cross-entropy exceeds τ2 (LOSSY)."""
from dataclasses import dataclass

from ..acceptance import BILD_RULE
from ..core.config import MethodParams, number, param
from ..drafters.bild import BiLDDrafter
from .base import Cost, Loop, Method, Needs


@dataclass(frozen=True)
class Params(MethodParams):
    fallback_threshold: float = param(0.9, "bild: the draft stops where its max probability falls below this (τ1)",
                                      label="f", check=number(0.0, 1.0))
    rollback_threshold: float = param(2.0, "bild: roll back from the first token with −log p(x) above this "
                                           "(τ2, nats)", label="r", check=number(0.0))


BILD = Method("bild", Loop.SPECULATIVE, Cost.DRAFT_MODEL, needs=Needs.DRAFT_MODEL, params=Params,
              rule=lambda params: BILD_RULE.with_params(rollback_threshold=params.rollback_threshold),
              drafter=lambda draft, target, config: BiLDDrafter(draft.model,
                                                                fallback_threshold=config.params.fallback_threshold),
              drafter_type=BiLDDrafter,
              document="MJSD paper (baseline)", output="lossy, no bound; token-identical to argmax at T = 0",
              summary="draft until its confidence < τ1, roll back at −log p > τ2")
