"""Mentored decoding (mentored blog, seed 001): speculative sampling's chain verified with the KL-bounded optimal
acceptance, KL(target ‖ result) ≤ D per token; exact (lossless) at D = 0."""
import dataclasses
from dataclasses import dataclass

from ..acceptance import MENTORED_RULE
from ..core.config import MethodParams, number, param
from ..drafters import LMDrafter
from .base import Cost, Loop, Method, Needs


@dataclass(frozen=True)
class Params(MethodParams):
    kl_bound: float = param(0.1, "mentored: D, the bound on KL(target ‖ resulting distribution) per token "
                                 "(0: exact)", label="kl", check=number(0.0))


def rule(params: Params):
    """At D = 0 the rule is speculative sampling: labelled lossless there, lossy above."""
    return dataclasses.replace(MENTORED_RULE.with_params(kl_bound=params.kl_bound), lossless=params.kl_bound == 0)


MENTORED = Method("mentored", Loop.SPECULATIVE, Cost.DRAFT_MODEL, needs=Needs.DRAFT_MODEL, params=Params, rule=rule,
                  drafter=lambda draft, target, config: LMDrafter(draft.model), drafter_type=LMDrafter,
                  document="mentored blog", output="lossy: KL(p ‖ output) ≤ D per token; D = 0 lossless",
                  summary="the draft's chain with the optimal acceptance under a KL bound D")
