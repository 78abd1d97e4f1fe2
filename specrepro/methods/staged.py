"""Staged speculative decoding (survey blog): the draft model's own chain is drafted by prompt lookup and verified
by the draft, two exact levels."""
from ..drafters import PromptLookupDrafter
from ..drafters.staged import StagedDrafter
from .base import Cost, Loop, Method, Needs

STAGED = Method("staged", Loop.SPECULATIVE, Cost.DRAFT_MODEL, needs=Needs.DRAFT_MODEL,
                drafter=lambda draft, target, config: StagedDrafter(draft.model, PromptLookupDrafter()),
                drafter_type=StagedDrafter,
                document="survey blog",
                summary="the draft model's chain, itself drafted by prompt lookup and verified by the draft")
