"""Medusa (survey blog; PPD paper's baseline): heads on the target's last hidden state draft a token tree."""
from .base import Needs
from .self_drafting import self_drafting

MEDUSA = self_drafting("medusa", Needs.MEDUSA_HEADS,
                       "Medusa heads draft a sparse token tree; `--tree-size`, default hardware-aware",
                       document="survey blog, PPD paper")
