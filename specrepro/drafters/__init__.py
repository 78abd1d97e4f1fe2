from .base import Drafter, Proposal
from .lm import LMDrafter

__all__ = ["Drafter", "Proposal", "LMDrafter"]
