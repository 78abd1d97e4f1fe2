"""What a claim is written with: the reproduction report's types, shared by ``notebooks/reproduction.py`` (which
judges and renders) and the per-document modules beside this one (which state the claims).

It imports nothing of the report or of the claims but ``family`` (a leaf), so that each document's module and the
report can both import it without a cycle. In order:

1. reading a run's CSVs: a missing file, column or row becomes :class:`Unreadable`, said plainly in its row;
2. tolerances, one per kind of number: exact (simulations, and fp32 measurements that carry no interval), an
   interval (fp32 acceptance and quality numbers that carry one, or counts to make a binomial one from), and
   machine-specific (speed, and bf16 numbers, which differ between CPUs);
3. the 95% confidence intervals the interval tolerances compute when a CSV carries counts or a standard error
   rather than its own interval (``wilson_interval``, ``bounded_mean_interval``, ``normal_interval`` of
   ``specrepro.core.stats``);
4. a judge's outcome, the regime a speed claim was made for against ours (``in_regime``), and a notebook's own
   verdicts read back;
5. :class:`Claim` and the :func:`claim` decorator that puts a claim's row above the judge that decides it.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Callable

from specrepro.metrics.verdict import FAILS, HOLDS, NOISY, UNDECIDED as NOTEBOOK_UNDECIDED, combine

from .family import holm  # (a leaf: it imports nothing of the claims or the report)


# Verdicts a judge gives. UNDECIDED is ``specrepro.metrics.verdict``'s word: the measurement cannot tell (its interval
# straddles the criterion, or too few prompts or sizes were measured); NOISY too: a speed row timed while other
# processes kept the CPU busy decides nothing; NOT_COMPARABLE is for a document that prints nothing to compare, or
# describes other data; OTHER_REGIME for a speed claim made for a memory-bound step, measured on a step that is not
# (``in_regime``).
REPRODUCED, NOT_REPRODUCED, UNDECIDED = "reproduced", "not reproduced", NOTEBOOK_UNDECIDED  # (the same words)
NOT_COMPARABLE, NO_RESULT, OTHER_REGIME = "not comparable", "no result", "other regime"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, UNDECIDED, NOISY, OTHER_REGIME, NOT_COMPARABLE, NO_RESULT)
# The notebooks' verdicts (``figures/VERDICTS.md``) and the report's verdict each stands for.
FROM_NOTEBOOK = {HOLDS: REPRODUCED, FAILS: NOT_REPRODUCED, NOTEBOOK_UNDECIDED: UNDECIDED, NOISY: NOISY}

FP32_NO_INTERVAL = "fp32 measurement with fixed seeds; the CSV carries no interval or count"
# A notebook that measures in ``specrepro.engine.models.exact_dtype()``: bf16 on a CPU where the engine's 4-bit kernels
# run (whose near-tied argmaxes differ between CPUs), fp32 elsewhere; either way the number depends on the machine.
EXACT_DTYPE = "measured in the machine's exact dtype (bf16 on the engine's kernels, else fp32) with fixed seeds"


# --- 1. Reading a run's CSVs -------------------------------------------------------------------------------------

class Unreadable(Exception):
    """An artifact that is absent, or present with other columns or rows than the report reads."""


class Row(dict):
    """One CSV row (column -> text) that names its file when a column is missing."""

    def __init__(self, values: dict, source: str):
        super().__init__(values)
        self.source = source

    def __missing__(self, column):
        raise Unreadable(f"column {column!r} missing in {self.source}")


class Tables:
    """The CSVs of one figures folder (``<folder>/<notebook>/<name>.csv``), each read once."""

    def __init__(self, folder: Path, absent: str = "not produced by this run"):
        self.folder = Path(folder)
        self.absent = absent  # how a missing file is said
        self._read: dict[str, tuple[list[str], list[Row]]] = {}

    def _load(self, name: str) -> tuple[list[str], list[Row]]:
        if name not in self._read:
            path = self.folder / name
            if not path.is_file():
                raise Unreadable(f"{self.absent}: {name}")
            with path.open(newline="") as handle:
                reader = csv.DictReader(handle)
                rows = [Row(r, name) for r in reader]
                self._read[name] = (list(reader.fieldnames or []), rows)
        return self._read[name]

    def rows(self, name: str) -> list[Row]:
        return self._load(name)[1]

    def columns(self, name: str) -> list[str]:
        return self._load(name)[0]


def num(row: Row, column: str) -> float | None:
    """A cell as a number; None for the notebooks' empty markers ('None', 'NA', 'n/a', '')."""
    text = row[column].strip()
    if text in ("", "None", "NA", "n/a", "nan"):
        return None
    try:
        return float(Fraction(text)) if "/" in text else float(text)
    except ValueError:
        raise Unreadable(f"{row.source}: {column} = {text!r} is not a number") from None


def pick(rows: list[Row], **where: str) -> Row:
    """The first row whose cells equal ``where`` (compared as text)."""
    for row in rows:
        if all(row[column] == str(value) for column, value in where.items()):
            return row
    source = rows[0].source if rows else "an empty table"
    raise Unreadable(f"no row with {where} in {source}")


def starting(rows: list[Row], column: str, prefix: str) -> list[Row]:
    """The rows whose ``column`` starts with ``prefix``; Unreadable when there are none."""
    found = [row for row in rows if row[column].startswith(prefix)]
    if not found:
        source = rows[0].source if rows else "an empty table"
        raise Unreadable(f"no row with {column} starting {prefix!r} in {source}")
    return found


def first_number(text: str) -> float:
    match = re.search(r"[-+]?\d+(?:\.\d+)?", text)
    if not match:
        raise Unreadable(f"no number in {text!r}")
    return float(match.group())


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def rel_gap(value: float, reference: float) -> float:
    return abs(value - reference) / max(abs(reference), 1e-12)


def agrees_with_printed(ours: float, printed: str) -> bool:
    """Ours equals a printed number to its last printed digit (within one unit: documents truncate as well as
    round, e.g. the survey's 6.101 for 6.1015625)."""
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    return abs(ours - float(printed)) <= 10.0 ** -decimals + 1e-12


# --- 2. Tolerances: how a number may move against the committed copy ---------------------------------------------

@dataclass(frozen=True)
class Estimate:
    value: float
    low: float
    high: float


@dataclass(frozen=True)
class Exact:
    """Any change is a move. Simulations, and fp32 measurements that carry no interval (said in ``why``)."""
    why: str = "simulation"
    columns: tuple[str, ...] | None = None  # None: every column


@dataclass(frozen=True)
class Interval:
    """A move is a value outside the committed run's interval for the same row."""
    how: str  # where the interval comes from, e.g. "the CSV's 90% bootstrap interval"
    estimates: Callable[[list[Row]], dict[str, Estimate]]


@dataclass(frozen=True)
class MachineSpecific:
    """Never a move: both numbers are shown (speed; bf16 numbers, which differ between CPUs)."""
    why: str
    key: Callable[[list[Row]], tuple[str, float]]  # (what, value) shown beside the committed one


@dataclass(frozen=True)
class Artifact:
    csv: str  # relative to the figures folder
    tolerance: Exact | Interval | MachineSpecific


# What the tolerances read: the number a machine-specific artifact shows, and the estimates (value and interval,
# by row) an interval tolerance compares.

def first_row(column: str, what: str) -> Callable[[list[Row]], tuple[str, float]]:
    """``column`` of the first row, shown as ``what``."""
    return lambda rows: (what, num(rows[0], column))


def largest(column: str, label_column: str) -> Callable[[list[Row]], tuple[str, float]]:
    def key(rows):
        best = max((r for r in rows if num(r, column) is not None), key=lambda r: num(r, column))
        return f"max {column} ({label_column} {best[label_column]})", num(best, column)
    return key


def by_label(label: Callable[[Row], str], value: str, interval) -> Callable[[list[Row]], dict[str, Estimate]]:
    """Estimates keyed by ``label(row)``: ``interval(row, v)`` gives (low, high) around ``v = row[value]``."""
    def estimates(rows):
        found = {}
        for r in rows:
            v = num(r, value)
            if v is not None:
                found[label(r)] = Estimate(v, *interval(r, v))
        return found
    return estimates


# --- 3. Confidence intervals the report computes itself ----------------------------------------------------------
# Only where a CSV carries counts or a standard error instead of its own interval: the closed forms of
# ``specrepro.core.stats`` (imported above), the package's one home for intervals.

# --- 4. Outcomes: what a judge returns ---------------------------------------------------------------------------

# What a verdict rests on (``Outcome.basis``). A measured row (``Claim.measured``) is decided only on an interval,
# or on an exact count inside it (a parameter count, say); a verdict it gives on anything else is a point estimate,
# which the report turns into "undecided" (``reproduction.judge``): the legend's rule, "no interval at all".
INTERVAL, EXACT = "interval", "exact"


@dataclass(frozen=True)
class Outcome:
    ours: str
    verdict: str
    reason: str
    paper: str | None = None  # the document's number, when a notebook wrote it into a CSV beside ours
    basis: str | None = None  # INTERVAL, EXACT, or None: the claim's kind (exact for theory, a point if measured)
    second: Outcome | None = None  # OTHER_REGIME's decided second line: our simulator for our regime (``in_regime``)


def judged(ok: bool, ours: str, yes: str, no: str, paper: str | None = None) -> Outcome:
    """A criterion checked on the numbers as they are: exact for a theory row; on a measured row, a point estimate,
    which decides nothing."""
    return Outcome(ours, REPRODUCED if ok else NOT_REPRODUCED, yes if ok else no, paper)


def judged_by_interval(holds: bool, fails: bool, ours: str, yes: str, no: str, open_: str,
                       paper: str | None = None) -> Outcome:
    """Reproduced when the interval lies on the claim's side, not reproduced when it lies on the other, else
    undecided (``open_`` says why)."""
    if holds:
        return Outcome(ours, REPRODUCED, yes, paper, INTERVAL)
    return (Outcome(ours, NOT_REPRODUCED, no, paper, INTERVAL) if fails
            else Outcome(ours, UNDECIDED, open_, paper, INTERVAL))


def without_interval(claim: "Claim", outcome: Outcome) -> Outcome:
    """``outcome`` as the legend reads it: a measured claim's verdict that rests on neither an interval nor an
    exact count is undecided, its point estimate's direction said (the report applies this to every row)."""
    if not claim.measured or outcome.verdict not in (REPRODUCED, NOT_REPRODUCED) or outcome.basis in (INTERVAL,
                                                                                                       EXACT):
        return outcome
    return Outcome(outcome.ours, UNDECIDED, f"no interval, so not decided (the point estimates alone would say "
                                            f"{outcome.verdict}: {outcome.reason})", outcome.paper)


# The regime. The documents' speed claims live on memory-bound steps (a GPU or TPU at batch 1, where scoring n tokens
# costs about one token's step: β(n) ≈ 1); a 2-core CPU is compute-bound beyond a few tokens. Such a claim is not
# tested by our hardware: its row says "other regime", quotes our step, and is decided on a second line instead.

MEMORY_BOUND_BETA = 1.5  # memory-bound: β(5) at B = 1 at most this (four more rows cost at most half a step, β ≈ 1)
MISS_RATE = 0.05  # how often a 95% interval misses the value it estimates by chance
PREDICTION_LEVEL = 0.025  # misses this unlikely by chance (one-sided binomial tail) fail the prediction


@dataclass(frozen=True)
class Regime:
    """Our decode step, as the row's own run measured it: β(n) = L(n)/L(1), the cost of scoring n tokens of one
    sequence in one forward over the cost of one, and the one-row step against its memory floor (the weights it
    reads over the copy bandwidth) where the run recorded both."""
    beta: dict[int, float]  # n -> β(n) at B = 1; must hold n = 5
    step_ms: float | None = None
    floor_ms: float | None = None

    def __post_init__(self):
        if 5 not in self.beta:
            raise Unreadable(f"no β(5) among the regime's β(n) (n = {sorted(self.beta)})")

    @property
    def memory_bound(self) -> bool:
        return self.beta[5] <= MEMORY_BOUND_BETA

    def line(self) -> str:
        betas = ", ".join(f"β({n}) = {b:.2f}" for n, b in sorted(self.beta.items()))
        if self.step_ms is not None and self.floor_ms is not None:
            step = (f"one-row step {self.step_ms:.2f} ms against its memory floor {self.floor_ms:.2f} ms "
                    f"({self.step_ms / self.floor_ms:.1f}x); ")
        else:
            step = "one-row step against its memory floor: not recorded by this run; "
        return f"our step: {step}{betas} at B = 1"


def in_regime(outcome: Outcome, regime: Regime, predicted: Callable[[], Outcome]) -> Outcome:
    """``outcome`` of a speed claim the document makes for a memory-bound step. Where our step is memory-bound too
    (β(5) ≤ ``MEMORY_BOUND_BETA``) it stands. Where it is not, the row says ``OTHER_REGIME``, never "not
    reproduced": it quotes our step (``Regime.line``) and what the claim alone would say, and carries a second,
    decided line, ``predicted()``: our simulator's prediction for the regime we measured, tested against our
    measurement on an interval like any other claim."""
    if regime.memory_bound:
        return outcome
    second = predicted()
    return Outcome(outcome.ours, OTHER_REGIME,
                   f"{regime.line()}: the document's claim is for a memory-bound step (β ≈ 1), ours is not (β(5) > "
                   f"{MEMORY_BOUND_BETA:g}), so the claim is not tested here (alone it would say {outcome.verdict}). "
                   f"Our regime's prediction {PREDICTION_WORDS[second.verdict]}: {second.reason}",
                   outcome.paper, second.basis, second)  # (what the row's verdict rests on: the second line)


PREDICTION_WORDS = {REPRODUCED: "holds", NOT_REPRODUCED: "fails", UNDECIDED: "is undecided"}


def prediction_within(points: list[tuple[str, float, float, float]], what: str) -> Outcome:
    """Our simulator's predictions against our measurements, point by point: each (label, predicted, low95, high95).
    Holds when every interval holds its prediction; fails when more intervals miss than 95% intervals would by
    chance (the binomial tail of that many misses at ``MISS_RATE`` below ``PREDICTION_LEVEL``); else undecided."""
    if not points:
        raise Unreadable(f"no points to test {what} on")
    missed = [(label, p, lo, hi) for label, p, lo, hi in points if not lo <= p <= hi]
    k, m = len(points), len(missed)
    tail = sum(math.comb(k, j) * MISS_RATE ** j * (1 - MISS_RATE) ** (k - j) for j in range(m, k + 1))
    shown = "; ".join(f"{label}: predicted {p:.2f}, measured [{lo:.2f}, {hi:.2f}]" for label, p, lo, hi in missed[:3])
    ours = f"{what}: the 95% interval holds the prediction at {k - m} of {k} points"
    if m == 0:
        return Outcome(ours, REPRODUCED, ours, basis=INTERVAL)
    verdict = NOT_REPRODUCED if tail < PREDICTION_LEVEL else UNDECIDED
    return Outcome(ours, verdict, f"{ours} ({m} misses have chance {tail:.2g} at a miss rate of {MISS_RATE:g}; "
                                  f"{shown}{'; …' if m > 3 else ''})", basis=INTERVAL)


@dataclass(frozen=True)
class Decision:
    """What the notebooks decided on some of their claims (``figures/*/verdicts.csv``), read back."""
    verdict: str  # all of them together: "fails" if any fails, "holds" if all hold, else undecided
    text: str  # "claim: estimate [low, high] (n) verdict; ..."
    why: str  # the parts whose verdict is the whole's: estimate, interval, threshold and rule, from the CSVs


def decided(t: Tables, *claims: str) -> Decision:
    """Read the verdicts the notebooks wrote (``<notebook>/verdicts.csv``: each claim is decided there, once, and
    this report does not decide it again). A claim id names its claim in whichever notebook decides it."""
    rows = {}
    for path in sorted(t.folder.glob("*/verdicts.csv")):
        rows.update((r["claim"], r) for r in t.rows(path.relative_to(t.folder).as_posix()))
    missing = [c for c in claims if c not in rows]
    if missing:
        raise Unreadable(f"no notebook's verdicts.csv has a row for {', '.join(missing)}")
    family = holm(list(rows.values()))  # the verdicts as the family of every notebook's claims decides them
    verdicts = [family[c].verdict for c in claims]
    together = combine(verdicts)
    text = "; ".join(f"{c}: {float(rows[c]['estimate']):.3g} [{float(rows[c]['low']):.3g}, "
                     f"{float(rows[c]['high']):.3g}] ({rows[c]['n']}) {family[c].verdict}" for c in claims)
    deciding = [c for c in claims if family[c].verdict == together] or list(claims[:1])
    why = "; ".join(f"{c} {family[c].verdict}: {float(rows[c]['estimate']):.3g} [{float(rows[c]['low']):.3g}, "
                    f"{float(rows[c]['high']):.3g}] against {float(rows[c]['threshold']):g} ({rows[c]['rule']}"
                    + (f"; {family[c].note}" if family[c].note.startswith(("holds", "fails")) else "") + ")"
                    for c in deciding)
    return Decision(together, text, why)


def from_verdict(decision: Decision, ours: str, yes: str, no: str, paper: str | None = None) -> Outcome:
    """A catalogue item judged by the notebooks' verdicts: holds → reproduced, fails → not reproduced, undecided →
    undecided (the interval cannot decide at this n, or too few prompts: the reason is the claim's own rule)."""
    verdict = FROM_NOTEBOOK[decision.verdict]
    reason = {REPRODUCED: yes, NOT_REPRODUCED: f"{no} — {decision.why}"}.get(verdict, decision.why)
    return Outcome(ours, verdict, reason, paper, INTERVAL)


# --- 5. Claims ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Quote:
    """Words of a founding document, verbatim (the test finds them in ``seed``)."""
    seed: str  # file name under shared/seeds/
    text: str


@dataclass(frozen=True)
class Claim:
    document: str  # the catalogue's document label
    item: str  # the catalogue's item, verbatim
    artifacts: tuple[Artifact, ...]  # what the row reads and compares with the committed copy
    printed: str  # the document's key number, in words ("" when the judge reads it from a CSV)
    source: Quote | None  # where the document prints it
    criterion: str  # when the row says "reproduced"
    judge: Callable[[Tables], Outcome]
    pictures: tuple[str, ...] = ()  # figures to link beside the CSVs' own
    decided_by: tuple[str, ...] = ()  # the notebooks' claims (VERDICTS.md) whose verdicts are this row's, if any
    measured: bool = False  # decided on our measurements (not a formula or printed digits): only on an interval


def claim(document: str, item: str, artifacts: tuple[Artifact, ...], printed: str, source: Quote | None,
          criterion: str, pictures: tuple[str, ...] = (), decided_by: tuple[str, ...] = (), measured: bool = False
          ) -> Callable[[Callable[[Tables], Outcome]], Claim]:
    """Make the judge below into its :class:`Claim`, so that a catalogue item's row (the document's number and
    where it is printed, the criterion, the artifacts read) is written where the function deciding it is.

    With ``decided_by``, the row's verdict is the notebooks' verdict on those claims (all of them together), read
    back by ``decided``: the judge writes only what the row shows, and the criterion says which claims decide it.
    A ``measured`` row is decided only on an interval (``without_interval``); ``decided_by`` makes a row measured."""
    if decided_by:
        criterion = f"{criterion}; decided by " + ", ".join(f"`{c}`" for c in decided_by) + " (VERDICTS.md)"

    def made(judge: Callable[[Tables], Outcome]) -> Claim:
        return Claim(document, item, artifacts, printed, source, criterion, judge, pictures, decided_by,
                     measured or bool(decided_by))
    return made
