"""One verdict per claim: a claim is decided by where a confidence interval lies against its threshold.

A claim ("mentored decoding is at least 1.3× speculative sampling", "its NLL rises by at most 0.05 nats per token")
is a statistic and a threshold. Its interval comes from a paired bootstrap over the units that vary — prompts, and
seeds when there are several — so that each resample keeps every method's runs on the same prompts together and a
prompt's own difficulty cancels (``specrepro.core.stats.paired_bootstrap``, the package's one interval, beside the
estimators a statistic is usually one of). Then, for a claim "statistic ≥ threshold" (:func:`at_least`):

- **holds** when the whole interval lies at or above the threshold;
- **fails** when the whole interval lies below it;
- **undecided, n too small** when the interval straddles it: more prompts or seeds would be needed to tell;
- **noisy, timed under load** when the statistic rests on timings (``timed``) and other processes kept at least
  ``BUSY_CORES`` cores busy while they were taken (:func:`under_load`, from the notebook's ``LoadWatch``): not
  decided, whatever the interval says. A compound claim is decided again from its parts.

:func:`at_most` is the mirror. Nothing is decided from the range of single runs: a few runs' spread says little about
the mean, and with few prompts it covers every outcome. A notebook decides each claim it owns once and writes the
verdicts with ``Artifacts.verdicts``; ``run_notebooks.py`` gathers them into ``figures/VERDICTS.md`` and refuses a
claim decided in two places.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Callable

import numpy as np

from ..core.provenance import BUSY_CORES
from ..core.stats import LEVEL, paired_bootstrap  # the one interval

HOLDS, FAILS, UNDECIDED, NOISY = "holds", "fails", "undecided, n too small", "noisy, timed under load"
VERDICTS = (HOLDS, FAILS, UNDECIDED, NOISY)
MIN_PROMPTS = 8  # fewer prompts: a bootstrap interval takes only a few values and says nothing; undecided

__all__ = ["FAILS", "HOLDS", "LEVEL", "MIN_PROMPTS", "NOISY", "UNDECIDED", "VERDICTS", "Verdict", "all_of", "at_least",
           "at_most", "combine", "decide", "paired_bootstrap", "under_load"]


@dataclass(frozen=True)
class Verdict:
    """One claim, decided. ``low``/``high`` is the ``LEVEL`` interval of ``estimate``; ``n`` says what it rests on
    (e.g. "8 prompts × 3 seeds")."""
    claim: str  # a stable id, unique across the notebooks, e.g. "mentored.speedup_within_quality_noise"
    statement: str  # the claim in words, with its threshold
    n: str
    estimate: float
    low: float
    high: float
    threshold: float
    verdict: str  # one of VERDICTS
    rule: str  # how the interval was made and read
    timed: bool = False  # the statistic rests on timings (tokens/s, wall time): noisy when timed under load
    parts: tuple["Verdict", ...] = field(default=(), repr=False)  # a compound claim's parts (``all_of``)

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if not self.claim or any(ch.isspace() for ch in self.claim):
            raise ValueError(f"a claim id is one word, got {self.claim!r}")

    def row(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "parts"}


def _checked(interval) -> tuple[float, float]:
    """``interval`` as two floats, refused unless finite and ordered (it checks an interval; it makes none)."""
    low, high = (float(v) for v in interval)
    if not (math.isfinite(low) and math.isfinite(high)) or low > high:
        raise ValueError(f"an interval is (low, high) with finite low <= high, got {interval!r}")
    return low, high


def at_least(claim: str, statement: str, n: str, estimate: float, interval, threshold: float,
             rule: str = "", timed: bool = False) -> Verdict:
    """The claim "statistic ≥ threshold": holds if low ≥ threshold, fails if high < threshold, else undecided."""
    low, high = _checked(interval)
    verdict = HOLDS if low >= threshold else FAILS if high < threshold else UNDECIDED
    rule = rule or f"{LEVEL:.0%} paired bootstrap interval against ≥ {threshold:g}"
    return Verdict(claim, statement, n, float(estimate), low, high, float(threshold), verdict, rule, timed)


def at_most(claim: str, statement: str, n: str, estimate: float, interval, threshold: float,
            rule: str = "", timed: bool = False) -> Verdict:
    """The claim "statistic ≤ threshold": holds if high ≤ threshold, fails if low > threshold, else undecided."""
    low, high = _checked(interval)
    verdict = HOLDS if high <= threshold else FAILS if low > threshold else UNDECIDED
    rule = rule or f"{LEVEL:.0%} paired bootstrap interval against ≤ {threshold:g}"
    return Verdict(claim, statement, n, float(estimate), low, high, float(threshold), verdict, rule, timed)


def combine(verdicts: list[str]) -> str:
    """The verdict of a conjunction of verdicts: fails if any fails; else noisy if a part was timed under load;
    holds if every one holds; else undecided."""
    if FAILS in verdicts:
        return FAILS
    return NOISY if NOISY in verdicts else HOLDS if set(verdicts) == {HOLDS} else UNDECIDED


def all_of(claim: str, statement: str, parts: list[Verdict], rule: str = "") -> Verdict:
    """A conjunction: holds if every part holds, fails if any fails, else undecided (``combine``). It reports the
    first part's estimate and interval (the one the statement leads with), and is timed if a part is."""
    if not parts:
        raise ValueError("all_of needs at least one part")
    verdict = combine([p.verdict for p in parts])
    lead = parts[0]
    rule = rule or "holds if every part holds: " + "; ".join(f"{p.claim} {p.verdict}" for p in parts)
    return Verdict(claim, statement, lead.n, lead.estimate, lead.low, lead.high, lead.threshold, verdict, rule,
                   any(p.timed for p in parts), tuple(parts))


def under_load(verdict: Verdict, busy: float) -> Verdict:
    """``verdict`` for timings taken while other processes kept ``busy`` cores busy on average: unchanged below
    ``BUSY_CORES``; else a timed claim is noisy, not decided, and a compound one is decided again from its parts
    (a part that fails on what was not timed still fails it)."""
    if busy < BUSY_CORES or not verdict.timed:
        return verdict
    load = f"timed while other processes kept {busy:.2f} cores busy on average (≥ {BUSY_CORES:g})"
    if verdict.parts:
        parts = tuple(under_load(p, busy) for p in verdict.parts)
        again = combine([p.verdict for p in parts])
        rule = verdict.rule if again == verdict.verdict else f"{verdict.rule}; its timed parts were {load}: {again}"
        return replace(verdict, verdict=again, rule=rule, parts=parts)
    return replace(verdict, verdict=NOISY, rule=f"{load}: not decided ({verdict.rule})")


def decide(claim: str, statement: str, x, statistic: Callable[[np.ndarray], float], threshold: float,
           side: str = "at_least", *, n: str | None = None, seed: int = 0, resamples: int = 2000,
           timed: bool = False) -> Verdict:
    """The claim "statistic ≥ threshold" (``side="at_least"``) or "≤" (``"at_most"``) on ``x`` [P] or [P, S, ...]:
    the estimate, its :func:`paired_bootstrap` interval, and the verdict. With fewer than ``MIN_PROMPTS`` prompts
    it is undecided whatever the interval (a handful of prompts gives a narrow interval that means nothing).
    ``n`` says what it rests on (default "P prompts × S seeds"); ``timed``, that the statistic rests on timings."""
    decide_by = {"at_least": at_least, "at_most": at_most}.get(side)
    if decide_by is None:
        raise ValueError(f"side must be 'at_least' or 'at_most', got {side!r}")
    x = np.asarray(x, dtype=float)
    if n is None:
        seeds = x.shape[1] if x.ndim >= 2 else 1
        n = f"{len(x)} prompt{'s' if len(x) != 1 else ''}" + (f" × {seeds} seeds" if seeds > 1 else "")
    low, high = paired_bootstrap(x, statistic, resamples=resamples, seed=seed)
    verdict = decide_by(claim, statement, n, statistic(x), (low, high), threshold, timed=timed)
    if len(x) < MIN_PROMPTS:
        return replace(verdict, verdict=UNDECIDED,
                       rule=f"fewer than {MIN_PROMPTS} prompts: undecided whatever the interval ({verdict.rule})")
    return verdict
