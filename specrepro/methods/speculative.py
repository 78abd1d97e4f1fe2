"""Speculative sampling with a draft model's chain of γ tokens (Leviathan et al., Chen et al.; the slides §2)."""
from ..drafters import LMDrafter
from .base import Cost, Loop, Method, Needs

SPECULATIVE = Method("speculative", Loop.SPECULATIVE, Cost.DRAFT_MODEL, needs=Needs.DRAFT_MODEL,
                     drafter=lambda draft, target, config: LMDrafter(draft.model), drafter_type=LMDrafter,
                     document="slides",
                     summary="a chain of γ draft-model tokens, speculative sampling; `--draft` also takes "
                             "`layers:K`, the target's first K layers")
