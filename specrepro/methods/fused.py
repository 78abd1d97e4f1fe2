"""Fused drafting (survey blog): prompt lookup copies when the context matches, the draft model drafts otherwise."""
from ..drafters import PromptLookupDrafter
from ..drafters.staged import FusedDrafter
from .base import Cost, Loop, Method, Needs

FUSED = Method("fused", Loop.SPECULATIVE, Cost.DRAFT_MODEL, needs=Needs.DRAFT_MODEL,
               drafter=lambda draft, target, config: FusedDrafter(draft.model, PromptLookupDrafter()),
               drafter_type=FusedDrafter,
               document="survey blog",
               summary="prompt-lookup copies when the context matches, the draft model's chain otherwise")
