from .base import Drafter, Proposal, Scorer, Scores, StepFeedback, TreeDrafter, score_tree
from .lm import LMDrafter
from .ngram import NGramDrafter, NGramTable, fit_ngram
from .prompt_lookup import PromptLookupDrafter

__all__ = ["Drafter", "Proposal", "Scorer", "Scores", "StepFeedback", "TreeDrafter", "score_tree", "LMDrafter",
           "NGramDrafter", "NGramTable", "fit_ngram", "PromptLookupDrafter"]
