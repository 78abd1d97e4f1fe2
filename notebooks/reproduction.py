#!/usr/bin/env python
"""The reproduction report, ``figures/REPRODUCTION.md``: one row per item of the founding documents' catalogue.

    python notebooks/reproduction.py [--figures DIR] [--committed DIR | --against-head] [--out PATH]

Every item listed under "Every figure and table to regenerate" in ``shared/seeds/README.md`` gets a row with the
document's number, ours (read from the run's CSVs, never written here), a verdict and whether our numbers moved
against the committed copy. ``notebooks/run_notebooks.py`` calls :func:`write_reproduction` after every run.

The claims themselves live beside this file, one module per founding document (``notebooks/claims/<document>.py``:
each item's paths, row and judge together); the types they are written with (reading a CSV, tolerances, outcomes)
are in ``notebooks/claims/base.py``. This module is the engine that uses them, top to bottom:

1. the catalogue, read from the seeds' README, so that an item no claim covers still gets its row;
2. the movement of one artifact between this run and the committed copy, by its tolerance;
3. evaluating every claim (its judge, then its movements), never raising for one bad artifact;
4. the run's conditions (profile, machine, wall time) from ``timings.json`` and the notebooks' ``index.json``;
5. writing the Markdown; :func:`committed_copy` for runs that overwrite figures/.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from claims import CLAIMS
from verdicts_report import VERDICTS_NAME, md as _md, render_verdicts, rows_decided_by, write_verdicts  # noqa: F401
from claims.base import (FROM_NOTEBOOK, MEMORY_BOUND_BETA, NO_RESULT, NOISY, NOT_COMPARABLE, NOT_REPRODUCED,
                         OTHER_REGIME, REPRODUCED, UNDECIDED, VERDICTS, Artifact, Claim, Exact,
                         Interval, MachineSpecific, Outcome, Row, Tables, Unreadable, decided, without_interval)

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT.parent / "shared" / "seeds"  # the founding documents sit beside the clone, as in CI
REPORT_NAME = "REPRODUCTION.md"

# What a row says about the committed copy.
MOVED, UNCHANGED, NEW, MACHINE, NOT_COMPARED = "moved", "unchanged", "new", "machine-specific", "not compared"
MOVEMENTS = (MOVED, UNCHANGED, NEW, MACHINE, NOT_COMPARED)
# How the header counts the "other regime" rows' second lines (our regime's prediction), by its verdict
SECOND_COUNTS = {REPRODUCED: "holds", NOT_REPRODUCED: "fails", UNDECIDED: "undecided"}


# --- 1. The catalogue --------------------------------------------------------------------------------------------

def catalogue(readme: Path = SEEDS / "README.md") -> list[tuple[str, str]]:
    """(document, item) of every item under "Every figure and table to regenerate" in the seeds README."""
    text = Path(readme).read_text()
    section = text.split("## Every figure and table to regenerate", 1)[1].split("\n## ", 1)[0]
    items = []
    for line in section.splitlines():
        match = re.match(r"- \*\*(.+?)\*\*: (.+)", line.strip())
        if not match:
            continue
        depth, start, body = 0, 0, match.group(2).rstrip(".")
        for i, char in enumerate(body + ";"):
            depth += {"(": 1, ")": -1}.get(char, 0)
            if char == ";" and depth == 0:
                items.append((match.group(1), body[start:i].strip()))
                start = i + 1
    return items


# --- 2. Movement against the committed copy ----------------------------------------------------------------------

@dataclass(frozen=True)
class Movement:
    status: str
    detail: str


def _same(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return float(a) == float(b)
    except ValueError:
        return False


def _compare_interval(tol: Interval, stem: str, now: list[Row], before: list[Row]) -> Movement:
    new_e, old_e = tol.estimates(now), tol.estimates(before)
    if set(new_e) != set(old_e):
        return Movement(MOVED, f"{stem}: rows changed ({sorted(set(new_e) ^ set(old_e))[:3]})")
    outside = [k for k in new_e if not old_e[k].low <= new_e[k].value <= old_e[k].high]
    if outside:
        k = outside[0]
        return Movement(MOVED, f"{stem}: {len(outside)} of {len(new_e)} outside the committed interval (first {k}: "
                               f"{old_e[k].value:.4g} → {new_e[k].value:.4g}, interval {old_e[k].low:.4g} to "
                               f"{old_e[k].high:.4g}; {tol.how})")
    shift = max((abs(new_e[k].value - old_e[k].value) for k in new_e), default=0.0)
    return Movement(UNCHANGED, f"{stem}: {'identical' if shift == 0 else f'largest shift {shift:.3g}'}, all "
                               f"{len(new_e)} within the committed interval ({tol.how})")


def _compare_exact(tol: Exact, stem: str, now: list[Row], before: list[Row], columns_now: list[str],
                   columns_before: list[str]) -> Movement:
    columns = list(tol.columns or columns_now)
    lost = [c for c in columns if c not in columns_before]
    if lost or (tol.columns is None and columns_now != columns_before):
        return Movement(MOVED, f"{stem}: columns changed ({', '.join(lost) or 'order or new columns'})")
    if len(now) != len(before):
        return Movement(MOVED, f"{stem}: {len(before)} → {len(now)} rows")
    changed = [(i, c) for i, (a, b) in enumerate(zip(now, before)) for c in columns if not _same(a[c], b[c])]
    if changed:
        i, c = changed[0]
        return Movement(MOVED, f"{stem}: {len(changed)} cells changed (first: row {i + 1}, {c}: {before[i][c]} → "
                               f"{now[i][c]}; exact: {tol.why})")
    return Movement(UNCHANGED, f"{stem}: identical (exact: {tol.why})")


def compare(artifact: Artifact, run: Tables, committed: Tables | None, stem: str) -> Movement:
    """Whether one artifact's numbers moved against the committed copy, by its tolerance (``stem`` names it)."""
    name, tol = artifact.csv, artifact.tolerance
    try:
        now = run.rows(name)
    except Unreadable as error:
        return Movement(NOT_COMPARED, str(error))
    if committed is None:
        return Movement(NEW, f"{stem}: no committed copy to compare")
    try:
        before = committed.rows(name)
    except Unreadable:
        return Movement(NEW, f"{stem}: not in the committed copy")
    if isinstance(tol, MachineSpecific):
        (what, value), (_, old) = tol.key(now), tol.key(before)
        return Movement(MACHINE, f"{stem}: {what} {value:.3g} now, {old:.3g} committed ({tol.why})")
    if isinstance(tol, Interval):
        return _compare_interval(tol, stem, now, before)
    return _compare_exact(tol, stem, now, before, run.columns(name), committed.columns(name))


def overall(movements: list[Movement]) -> str:
    """One status for a row: not compared if anything is missing, else the strongest of moved > new > unchanged;
    machine-specific only when every artifact is."""
    statuses = {m.status for m in movements}
    if not statuses or NOT_COMPARED in statuses:
        return NOT_COMPARED
    for status in (MOVED, NEW, UNCHANGED):
        if status in statuses:
            return status
    return MACHINE


# --- 3. Evaluating every claim -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReportRow:
    claim: Claim
    outcome: Outcome
    movement: str
    movements: tuple[Movement, ...]


def _names(paths: list[str], keep_suffix: bool = False) -> list[str]:
    """Short names for paths (the file name), with the folder where two different paths share one."""
    short = [Path(p).name if keep_suffix else Path(p).stem for p in paths]
    return [s if len({p for p, t in zip(paths, short) if t == s}) == 1 else str(Path(p).parent / s)
            for p, s in zip(paths, short)]


def timed_under_load(claim: Claim, run: Tables) -> str | None:
    """Why ``claim``'s speed artifacts decide nothing: the first one written while other processes kept at least
    ``BUSY_CORES`` cores busy on average (``machine_load`` in its notebook's index.json); None when none was."""
    from specrepro.core.provenance import BUSY_CORES

    for artifact in claim.artifacts:
        if not (isinstance(artifact.tolerance, MachineSpecific) and "speed" in artifact.tolerance.why):
            continue
        entries = _json(run.folder / artifact.csv.split("/")[0] / "index.json") or []
        load = next((e.get("machine_load") for e in entries if e.get("artifact") == artifact.csv), None)
        if load and load.get("mean", 0) >= BUSY_CORES:
            return (f"{artifact.csv} was timed while other processes kept {load['mean']:.2f} cores busy on average "
                    f"(≥ {BUSY_CORES:g}; at worst {load['max']:.2f}): not decided")
    return None


def judge(claim: Claim, run: Tables) -> Outcome:
    """``claim``'s outcome on ``run``; never raises. A row decided by the notebooks' claims (``decided_by``) cannot
    disagree with ``VERDICTS.md``: a judge that returns another verdict gives no result, saying so. A measured row
    decided on no interval is undecided (``claims.base.without_interval``). A row judged here on timings taken under
    load is noisy (its notebook's claims already say so for the rows they decide)."""
    try:
        outcome = without_interval(claim, claim.judge(run))
        if claim.decided_by and outcome.verdict != NO_RESULT:
            theirs = FROM_NOTEBOOK[decided(run, *claim.decided_by).verdict]
            if outcome.verdict != theirs:
                return Outcome(outcome.ours, NO_RESULT, f"the judge says {outcome.verdict!r} where VERDICTS.md's "
                                                        f"{', '.join(claim.decided_by)} say {theirs!r}")
        loaded = None if claim.decided_by else timed_under_load(claim, run)
        if loaded and outcome.verdict in (REPRODUCED, NOT_REPRODUCED, UNDECIDED):
            return Outcome(outcome.ours, NOISY, f"{loaded} (the criterion alone would say {outcome.verdict}: "
                                                f"{outcome.reason})", outcome.paper)
        return outcome
    except Unreadable as error:
        return Outcome("—", NO_RESULT, str(error))
    except Exception as error:  # a run's odd CSV must never stop the report: say what failed instead
        return Outcome("—", NO_RESULT, f"could not read: {type(error).__name__}: {error}")


def evaluate(figures: Path, committed: Path | None) -> list[ReportRow]:
    """Every claim judged on ``figures`` and compared with ``committed``; never raises for one bad artifact."""
    run = Tables(figures)
    before = Tables(committed, "not in the committed copy") if committed is not None else None
    profiles_now = {stem: c.profiles for stem, c in run_conditions(figures).items()}
    profiles_then = {stem: c.profiles for stem, c in run_conditions(committed).items()} if committed else {}

    def other_profile(csv_name: str) -> str | None:
        """Why this artifact is not compared: this run used another profile than the committed copy (a smoke run's
        tiny settings against the committed quick run), so its numbers differ by design; None if comparable."""
        stem = csv_name.split("/")[0]
        now, then = profiles_now.get(stem, frozenset()), profiles_then.get(stem, frozenset())
        if now and then and not now & then:
            return f"this run is profile {'/'.join(sorted(now))}, the committed copy {'/'.join(sorted(then))}"
        return None

    rows = []
    for claim in CLAIMS:
        outcome = judge(claim, run)
        movements = []
        for artifact, name in zip(claim.artifacts, _names([a.csv for a in claim.artifacts])):
            reason = other_profile(artifact.csv)
            if reason:
                movements.append(Movement(NOT_COMPARED, f"{name}: {reason}"))
                continue
            try:
                movements.append(compare(artifact, run, before, name))
            except Exception as error:
                movements.append(Movement(NOT_COMPARED, f"{name}: could not compare ({type(error).__name__}: "
                                                        f"{error})"))
        status = overall(movements) if claim.artifacts else NOT_COMPARED
        if not claim.artifacts:
            movements.append(Movement(NOT_COMPARED, "nothing regenerated"))
        rows.append(ReportRow(claim, outcome, status, tuple(movements)))
    if SEEDS.joinpath("README.md").is_file():  # a catalogue item no claim covers still gets its row
        known = {(c.document, c.item) for c in CLAIMS}
        for document, item in catalogue():
            if (document, item) not in known:
                claim = Claim(document, item, (), "", None, "none", lambda t: None)
                missing = Outcome("—", NO_RESULT, "not mapped: no module in notebooks/claims/ has a claim for this "
                                                  "catalogue item")
                rows.append(ReportRow(claim, missing, NOT_COMPARED, (Movement(NOT_COMPARED, "not mapped"),)))
    return rows


# --- 4. The run's conditions -------------------------------------------------------------------------------------

def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


@dataclass(frozen=True)
class Conditions:
    """How one notebook run was made, as far as the figures folder records it."""
    profiles: frozenset[str]
    machines: frozenset[str]
    wall_min: float | None
    source: str


def _json(path: Path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def run_conditions(figures: Path) -> dict[str, Conditions]:
    """Notebook folder -> its profile and machine: from ``timings.json`` (written by run_notebooks.py: profile,
    CPU, GPU and wall time of each run) where it has the run, else from the folder's ``index.json`` (fields named
    profile / machine / device, or the descriptions' phrases "profile quick" and "CPU …")."""
    found = {}
    for index in sorted(Path(figures).glob("*/index.json")):
        data = _json(index)
        profiles, machines = set(), set()
        for entry in data if isinstance(data, list) else [data]:
            if isinstance(entry, dict):
                profiles |= {str(entry[k]) for k in ("profile",) if k in entry}
                machines |= {str(entry[k]) for k in ("machine", "device") if k in entry}
            for text in _strings(entry):
                profiles |= set(re.findall(r"\bprofile (smoke|quick|full)\b", text))
                machines |= {m.strip() for m in re.findall(r"\b((?:CPU|GPU) [A-Z][\w\- ]*?)(?= ·|,|;|\)|$)", text)}
        found[index.parent.name] = Conditions(frozenset(profiles), frozenset(machines), None, "index.json")
    timings = _json(Path(figures) / "timings.json") or {}
    for name, run in (timings.get("runs") or {}).items():
        where = str(run.get("cpu")) + (f", GPU {run['gpu']}" if run.get("gpu") else "")
        wall = run.get("wall_s")
        found[name.replace("-", "_")] = Conditions(frozenset({str(run.get("profile"))}), frozenset({where}),
                                                   wall / 60 if wall is not None else None, "timings.json")
    return dict(sorted(found.items()))


def _conditions_line(figures: Path) -> str:
    """The run's profile and machine: timings.json's last run where there is one, else what the indexes say."""
    timings = _json(Path(figures) / "timings.json") or {}
    last = timings.get("last_run")
    if last:
        box = last.get("machine") or {}
        gpu = f", GPU {box['gpu']}" if box.get("gpu") else ""
        calls = timings.get("calls") or [{}]
        runs = f" for {len(calls[-1]['runs'])} run(s)" if calls[-1].get("runs") else ""
        wall = f", {last['wall_s'] / 60:.1f} min{runs}" if last.get("wall_s") is not None else ""
        model = f"{box['cpu_model']}, " if box.get("cpu_model") else ""  # (a VM's name may not tell a Zen 1 from a 4)
        return (f"profile {last.get('profile')} · machine {box.get('cpu')} ({model}{box.get('cores')} cores{gpu}) · "
                f"{last.get('jobs')} notebook(s) at a time{wall}, started {last.get('started_utc')} (timings.json)")
    conditions = run_conditions(figures)
    profiles = sorted({p for c in conditions.values() for p in c.profiles}) or ["not recorded"]
    machines = sorted({m for c in conditions.values() for m in c.machines}) or ["not recorded"]
    recorded = sum(bool(c.profiles or c.machines) for c in conditions.values())
    return (f"profile {', '.join(profiles)} · machine {', '.join(machines)} (recorded in the `index.json` of "
            f"{recorded} of {len(conditions)} notebook folders)")


# --- 5. Writing the Markdown -------------------------------------------------------------------------------------

def _links(claim: Claim, figures: Path, base: Path) -> str:
    paths = []
    for name in [a.csv for a in claim.artifacts] + list(claim.pictures):
        for path in (name, str(Path(name).with_suffix(".png"))):
            if path not in paths and (figures / path).is_file():
                paths.append(path)
    links = [f"[{label}]({_md(os.path.relpath(figures / p, base))})"
             for p, label in zip(paths, _names(paths, keep_suffix=True))]
    return "<br>".join(links) if links else "—"


def _document_cell(claim: Claim, outcome: Outcome) -> str:
    number = outcome.paper or claim.printed or "—"
    if claim.source is None:
        return _md(number)
    return f"{_md(number)}<br>*{claim.source.seed[:3]}:* “{_md(claim.source.text)}”"


def _counts(rows: list[ReportRow]) -> tuple[dict[str, int], dict[str, int]]:
    verdicts = {v: sum(r.outcome.verdict == v for r in rows) for v in VERDICTS}
    movements = {m: sum(r.movement == m for r in rows) for m in MOVEMENTS}
    return verdicts, movements


GUIDE = """\
## How to read it

- **Document's number**: what the document prints, with its words quoted from the seed text (`000`–`004` name the
  seed files in `shared/seeds/`), or read from the column where a notebook wrote it beside ours.
- **Ours**: read from this run's CSVs. Our models are SmolLM2-135M and its draft on a CPU; the documents used
  7B–137B models on GPUs and TPUs, so measured rows test the claim's direction and report its size.
- **Verdict**: *reproduced* or *not reproduced* by the criterion written in the row, with the measured reason.
  Theory rows recompute the document's formula here, or match its printed value to the last digit; measured rows
  ask whether the claim's direction holds, and are decided only on an interval: a measured row whose CSV carries
  none is undecided, and says what its point estimates alone would say. A row whose criterion
  says "decided by" takes its verdict from those claims in `VERDICTS.md` (holds → reproduced, fails → not
  reproduced), the one place they are decided, as a family (Holm's adjustment over every simple claim: a claim
  keeps its verdict only where its adjusted p stays below the level its own interval decides at). *Undecided, n
  too small*: the measurement cannot tell (its interval straddles the criterion, fewer than {min_prompts} prompts,
  too few sizes, or no interval at all). *Noisy, timed under
  load*: a speed row whose timings were taken while other processes kept at least half a core busy on average
  (each artifact records the load its notebook ran under); it decides nothing. *Other regime*: a speed claim the
  document makes for a memory-bound step (a GPU or TPU at batch 1, where scoring 5 tokens costs about one: β ≈ 1),
  measured on a step that is not (β(5) above {memory_bound_beta:g} at B = 1 in the row's own run): the row quotes our
  step and what the claim alone would say, and is decided instead on a second line, our simulator's prediction for
  the regime we measured against our measurement, on its interval; such rows are counted apart. *Not comparable*: the
  document prints nothing to compare, or describes other data. *No result*: this run did not write a CSV the row
  reads, or wrote it with other columns or rows.
- **vs committed**: *exact* tolerances (simulations; fp32 measurements that carry no interval) call any changed
  cell a move; *interval* tolerances call a move when a value leaves the committed run's interval (its source is
  named); speed and bf16 numbers are *machine-specific*: both are shown, never called moved. A row has moved if
  any of its artifacts moved; *new* means the committed copy lacks the artifact.
"""


def _header(rows: list[ReportRow], figures: Path, committed: Path | None,
            made: dict[str, str] | None = None) -> list[str]:
    verdicts, movements = _counts(rows)
    commits = sorted({m.split()[0] for m in (made or {}).values()})
    runs = (f"The figures come from {len(made)} notebook folders made at {len(commits)} commit(s) "
            f"({', '.join(commits)}; each row names its own below, and the run conditions close the report). "
            if made else "")
    no_result = f" · {verdicts[NO_RESULT]} no result" if verdicts[NO_RESULT] else ""
    noisy = f" · {verdicts[NOISY]} {NOISY}" if verdicts[NOISY] else ""
    seconds = [r.outcome.second.verdict for r in rows if r.outcome.verdict == OTHER_REGIME and r.outcome.second]
    regime = (f" · {verdicts[OTHER_REGIME]} other regime (our regime's prediction: "
              + ", ".join(f"{seconds.count(v)} {word}" for v, word in SECOND_COUNTS.items() if seconds.count(v))
              + ")" if verdicts[OTHER_REGIME] else "")
    before = (f" Committed copy: {_conditions_line(committed)}." if committed is not None
              else " No committed copy was given: every row is new.")
    return [
        "# Reproduction report",
        "",
        "Written by `notebooks/reproduction.py` at the end of every `make figures` run; do not edit by hand. One "
        "row per item of the catalogue in `shared/seeds/README.md` (\"Every figure and table to regenerate\").",
        "",
        f"**{len(rows)} items: {verdicts[REPRODUCED]} reproduced · {verdicts[NOT_REPRODUCED]} not reproduced · "
        f"{verdicts[UNDECIDED]} undecided, n too small{noisy}{regime} · {verdicts[NOT_COMPARABLE]} not comparable"
        f"{no_result}.**",
        "",
        f"**Against the committed copy: {movements[MOVED]} moved · {movements[UNCHANGED]} unchanged · "
        f"{movements[NEW]} new · {movements[MACHINE]} machine-specific only · {movements[NOT_COMPARED]} not "
        f"compared.**",
        "",
        f"{runs}The last `make figures` call: {_conditions_line(figures)}.{before}",
        "",
    ]


def _at_a_glance(rows: list[ReportRow]) -> list[str]:
    """Each verdict's items, with the reason where it is not 'reproduced', and what moved."""
    lines = ["## At a glance", ""]
    for verdict in VERDICTS:
        chosen = [r for r in rows if r.outcome.verdict == verdict]
        if not chosen:
            continue
        lines.append(f"**{verdict.capitalize()}** ({len(chosen)}):")
        lines.append("")
        for r in chosen:
            why = "" if verdict == REPRODUCED else f" — {_md(r.outcome.reason)}"
            lines.append(f"- {_md(r.claim.document)}: {_md(r.claim.item)}{why}")
        lines.append("")
    moved = [r for r in rows if r.movement == MOVED]
    lines += [f"**Moved since the committed copy** ({len(moved)}):", ""]
    lines += [f"- {_md(r.claim.document)}: {_md(r.claim.item)} — "
              + "; ".join(_md(m.detail) for m in r.movements if m.status == MOVED) for r in moved] or ["- none"]
    return lines + [""]


def _document_table(rows: list[ReportRow], document: str, figures: Path, base: Path,
                    made: dict[str, str] | None = None) -> list[str]:
    """One document's rows; ``made`` (artifact folder -> which run made it, ``freshness.made_by``) adds each row's
    run."""
    lines = [f"## {document}", "", "| item (artifacts) | document's number | ours | verdict | vs committed |",
             "|---|---|---|---|---|"]
    for r in rows:
        if r.claim.document != document:
            continue
        verdict = f"**{r.outcome.verdict}**: {_md(r.outcome.reason)}<br>*criterion:* {_md(r.claim.criterion)}"
        moved = f"**{r.movement}**<br>" + "<br>".join(_md(m.detail) for m in r.movements)
        runs = sorted({made[f] for f in {Path(a.csv).parts[0] for a in r.claim.artifacts} if f in (made or {})})
        run = "".join(f"<br>*made at* {_md(m)}" for m in runs)
        lines.append(f"| {_md(r.claim.item)}<br>{_links(r.claim, figures, base)}{run} | "
                     f"{_document_cell(r.claim, r.outcome)} | {_md(r.outcome.ours)} | {verdict} | {moved} |")
    return lines + [""]


def _conditions_table(figures: Path) -> list[str]:
    lines = ["## Run conditions by notebook", "", "| notebook run | profile | machine | wall time (min) | from |",
             "|---|---|---|---|---|"]
    for name, c in run_conditions(figures).items():
        wall = f"{c.wall_min:.1f}" if c.wall_min is not None else "—"
        lines.append(f"| {name} | {', '.join(sorted(c.profiles)) or 'not recorded'} | "
                     f"{_md(', '.join(sorted(c.machines)) or 'not recorded')} | {wall} | {c.source} |")
    return lines + [""]


def render(rows: list[ReportRow], figures: Path, committed: Path | None, base: Path,
           made: dict[str, str] | None = None) -> str:
    """The report's Markdown; links are relative to ``base``, the folder the report is written to; ``made``: which
    run made each artifact folder."""
    from specrepro.metrics.verdict import MIN_PROMPTS
    guide = GUIDE.format(min_prompts=MIN_PROMPTS, memory_bound_beta=MEMORY_BOUND_BETA)
    lines = _header(rows, figures, committed, made) + guide.splitlines() + [""] + _at_a_glance(rows)
    for document in dict.fromkeys(r.claim.document for r in rows):
        lines += _document_table(rows, document, figures, base, made)
    return "\n".join(lines + _conditions_table(figures))


def write_reproduction(figures: Path, committed: Path | None, out: Path | None = None,
                       executed: Path | None = None, unless_rows_same: bool = False) -> Path:
    """Write ``<figures>/REPRODUCTION.md`` (or ``out``) comparing the run in ``figures`` with ``committed``; with
    the ``executed`` notebooks' folder, also which run made each folder and which are stale (``freshness.staleness``).
    ``unless_rows_same`` (a call that ran no notebook): leave the report as it is when its rows would not change,
    so that its column against the committed copy keeps saying what the last run moved."""
    from freshness import made_by, report_lines, staleness

    figures = Path(figures)
    out = Path(out) if out is not None else figures / REPORT_NAME
    rows = evaluate(figures, committed)
    out.parent.mkdir(parents=True, exist_ok=True)
    runs = staleness(figures, executed, ROOT) if executed is not None else None
    text = render(rows, figures, committed, out.parent, made_by(runs) if runs is not None else None)
    if runs is not None:
        text += "\n" + "\n".join(report_lines(runs))
    if unless_rows_same and out.is_file() and report_rows(out.read_text()) == report_rows(text):
        return out
    out.write_text(text)
    return out


def report_rows(text: str) -> dict[str, list[str]]:
    """A report's item rows: item -> [item cell without its run, document's number, ours, verdict]. What the CSVs
    and the claims decide; the column against the committed copy and the commit that made each row are left out."""
    found = {}
    for line in text.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if not line.startswith("| ") or len(cells) != 5 or not cells[3].startswith("**"):  # a verdict cell
            continue
        item = re.sub(r"<br>\*made at\* [^<]*", "", cells[0])
        found[item.split("<br>")[0]] = [item, *cells[1:4]]
    return found


def committed_copy(repo_root: Path, dest: Path) -> Path | None:
    """HEAD's ``figures/**/*.csv`` and ``figures/*/index.json`` extracted under ``dest`` (same layout as figures/);
    None when git or HEAD is unavailable."""
    try:
        archive = subprocess.run(
            ["git", "archive", "--format=tar", "HEAD", "--", "figures/*.csv", "figures/*/index.json"],
            cwd=repo_root, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            if not member.isfile() or parts[0] != "figures" or ".." in parts:
                continue
            target = dest.joinpath(*parts[1:])
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(tar.extractfile(member).read())
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--figures", type=Path, default=ROOT / "figures", help="the folder a run wrote")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--committed", type=Path, help="a folder holding the committed copy")
    group.add_argument("--against-head", action="store_true", help="compare with HEAD's figures/ (git)")
    parser.add_argument("--out", type=Path, help=f"where to write (default <figures>/{REPORT_NAME})")
    args = parser.parse_args(argv)
    # the checkout's own figures: each row names the run that made it (its executed notebook's record)
    executed = ROOT / "notebooks" / "executed" if args.figures.resolve() == (ROOT / "figures").resolve() else None
    if args.against_head:
        import tempfile
        with tempfile.TemporaryDirectory() as scratch:
            path = write_reproduction(args.figures, committed_copy(ROOT, Path(scratch)), args.out, executed)
    else:
        path = write_reproduction(args.figures, args.committed, args.out, executed)
    print(f"reproduction report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
