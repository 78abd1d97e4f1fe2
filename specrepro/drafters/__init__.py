from .base import Drafter, PromptNodes, Proposal, StepFeedback
from .lm import LMDrafter
from .ngram import NGramDrafter, NGramTable, fit_ngram
from .prompt_lookup import PromptLookupDrafter

__all__ = ["Drafter", "PromptNodes", "Proposal", "StepFeedback", "LMDrafter", "NGramDrafter", "NGramTable", "fit_ngram", "PromptLookupDrafter"]
