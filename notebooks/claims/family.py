"""How the family of claims the notebooks decide is controlled: Holm's step-down over every simple claim at once.

Each notebook decides its claims one at a time on a 95% paired-bootstrap interval (``specrepro.metrics.verdict``):
"holds" when the whole interval lies on the claimed side of the threshold, "fails" when it lies on the other. That is
a one-sided test at 2.5% per claim and direction. With some twenty claims tested together, about one in twenty
decisions made at that level on a true threshold would be wrong by chance alone; so the report decides the family,
not each claim alone:

1. each simple claim's one-sided p-value against its threshold, in the direction of its verdict (for an undecided
   claim, the smaller of the two), from its interval by the normal approximation: the standard error is the
   interval's width over 2 × 1.96, the z-score the estimate's distance to the threshold over it;
2. Holm's step-down adjustment over the m claims that have one (ordered by p, the i-th multiplied by m − i + 1,
   made monotone);
3. a claim keeps "holds" or "fails" only where its adjusted p stays below ``FAMILY_LEVEL`` (the notebooks' own
   per-direction level, so the chance of any wrong decision in the family stays below it); else it is undecided,
   and the rule says so.

Not adjusted: a compound claim ("holds if every part holds"), whose parts' intervals the verdicts do not carry
(its verdict stands as its notebook decided it, and the rule says so); a claim timed under load (noisy: decided
nothing). The normal approximation reads a percentile interval as symmetric; where it is not, the p-value is
approximate, which the header of ``VERDICTS.md`` says.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from specrepro.metrics.verdict import FAILS, HOLDS, NOISY, UNDECIDED

FAMILY_LEVEL = 0.025  # one-sided, per direction: the level each notebook's 95% two-sided interval decides at
Z95 = 1.959963984540054
METHOD = "Holm's step-down"


@dataclass(frozen=True)
class Adjusted:
    """One claim in the family: its one-sided p, Holm's adjusted p (None where not adjusted), its verdict after."""
    p: float | None
    adjusted: float | None
    verdict: str
    note: str  # how the family changed the verdict, or why it was not adjusted ("" when it stands as decided)


def direction(rule: str) -> str | None:
    """"at_least" or "at_most" from a verdict's rule ("… against ≥ 1.3"), None for a compound claim's."""
    if rule.startswith("holds if every part holds"):
        return None
    return "at_least" if "≥" in rule else "at_most" if "≤" in rule else None


def _phi(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def one_sided_p(row: dict) -> float | None:
    """The claim's one-sided p-value in the direction of its verdict (module docstring, step 1), or None where it is
    not adjusted (a compound claim; noisy)."""
    side = direction(row["rule"])
    if side is None or row["verdict"] == NOISY:
        return None
    estimate, low, high, threshold = (float(row[k]) for k in ("estimate", "low", "high", "threshold"))
    se = (high - low) / (2 * Z95)
    gap = (estimate - threshold) if side == "at_least" else (threshold - estimate)  # > 0: on the claimed side
    if se <= 0:
        z = math.inf if gap > 0 else -math.inf if gap < 0 else 0.0
    else:
        z = gap / se
    holds, fails = 1.0 - _phi(z), _phi(z)
    return {HOLDS: holds, FAILS: fails}.get(row["verdict"], min(holds, fails))


Z80 = 0.8416212335729143  # the normal quantile of 80% power


def detectable(row: dict) -> float | None:
    """The smallest distance between the statistic and its threshold that the claim's n detects with 80% power at the
    per-direction level of its interval: (1.96 + 0.84) standard errors, the standard error read from the interval as
    in ``one_sided_p``. None where that is not read (a compound claim; noisy). A document's effect smaller than this
    needs a larger n: about n · (detectable / effect)² by the same approximation."""
    if direction(row["rule"]) is None or row["verdict"] == NOISY:
        return None
    return (Z95 + Z80) * (float(row["high"]) - float(row["low"])) / (2 * Z95)


def holm(rows: list[dict]) -> dict[str, Adjusted]:
    """claim id -> its place in the family (module docstring) for every row of the notebooks' ``verdicts.csv``."""
    ps = {r["claim"]: one_sided_p(r) for r in rows}
    ranked = sorted((p, c) for c, p in ps.items() if p is not None)
    m, running, adjusted = len(ranked), 0.0, {}
    for i, (p, c) in enumerate(ranked):
        running = max(running, min(1.0, (m - i) * p))
        adjusted[c] = running
    out = {}
    for r in rows:
        c, verdict = r["claim"], r["verdict"]
        if ps[c] is None:
            note = "" if verdict == NOISY else "a compound claim: decided by its parts, not adjusted"
            out[c] = Adjusted(None, None, verdict, note)
        elif verdict in (HOLDS, FAILS) and adjusted[c] >= FAMILY_LEVEL:
            out[c] = Adjusted(ps[c], adjusted[c], UNDECIDED, f"{verdict} alone (one-sided p {ps[c]:.2g}), undecided "
                              f"after {METHOD} over {m} claims (adjusted p {adjusted[c]:.2g} ≥ {FAMILY_LEVEL:g})")
        else:
            out[c] = Adjusted(ps[c], adjusted[c], verdict, "")
    return out
