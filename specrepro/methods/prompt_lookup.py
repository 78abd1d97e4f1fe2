"""Prompt lookup decoding: the continuation of the last n-gram's earlier occurrence in the context (c = 0)."""
from ..drafters import PromptLookupDrafter
from .base import Cost, Loop, Method

PROMPT_LOOKUP = Method("prompt-lookup", Loop.SPECULATIVE, Cost.MODEL_FREE,
                       drafter=lambda source, target, config: PromptLookupDrafter(),
                       drafter_type=PromptLookupDrafter, document="survey blog",
                       summary="copies what followed the latest match of the context's suffix (c = 0)")
