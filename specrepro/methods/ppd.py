"""Parallel prompt decoding (seed 002): trained prompt tokens draft a token tree in the target's own forward."""
from .base import Needs
from .self_drafting import self_drafting

PPD = self_drafting("ppd", Needs.PPD_PROMPT_TOKENS,
                    "trained prompt tokens in the same forward guess the next step's tree (dynamic sparse tree)",
                    document="PPD paper")
