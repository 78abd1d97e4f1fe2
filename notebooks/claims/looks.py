"""The looks: every time a claim's n (prompts, seeds, tokens, training budget) was changed after its result had been
seen, read from the commits that changed it. A claim decided after k looks has had k + 1 chances to be decided, so
``VERDICTS.md`` shows the count beside each verdict. A change of n made before any result was seen is not a look.

A new look is one more ``Look`` under the claim ids (or id prefixes, ending in ".") it touched, in the same commit as
the change of n; ``tests/test_claims_family.py`` checks that every id here names a claim the notebooks decide.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Look:
    commit: str
    change: str  # what n became, after what was seen


MENTORED_1 = Look("411dc34", "3 seeds per prompt (was 1)")
MENTORED_2 = Look("2f58209", "16 prompts x 3 seeds (was 8), after the NLL rise at D = 0.03 read 0.59 [-0.04, 1.31]")
MENTORED_3 = Look("df7d8e3", "40 tokens (was 20), after two undecided claims")
MJSD_1 = Look("2f58209", "8 test prompts per kind (was 3), after SpecTr's tokens per call read 1.18 [0.92, 1.45]")
MJSD_2 = Look("1327bd7", "12 test prompts per kind (was 8), after 1.13 [0.99, 1.28] and MJSD vs BiLD +0.0% "
                         "[-21.3%, +24.9%]")

LOOKS: dict[str, tuple[Look, ...]] = {
    "mentored.": (MENTORED_1, MENTORED_2, MENTORED_3),
    "online.held_out_alpha_gain": (Look("411dc34", "18 held-out prompts (was 9), after an interval ±0.11 wide "
                                                   "against a +0.10 threshold"),),
    "mjsd.": (MJSD_1, MJSD_2),
    "distillspec.": (Look("028bb78", "8 steps x 4 sequences on 16 train prompts, 8 held-out prompts per suite on 32 "
                                     "tokens (was 4 x 2 on 8, 4 per suite on 16), after all three claims were "
                                     "undecided"),),
}


def looks(claim: str) -> tuple[Look, ...]:
    """The looks taken at ``claim`` (by its id, or a prefix of it ending in ".")."""
    return tuple(look for key, found in LOOKS.items() if claim == key or (key.endswith(".") and claim.startswith(key))
                 for look in found)
