"""``figures/VERDICTS.md``: every claim the notebooks decide, one row each, as the family decides them.

Each notebook decides its own claims on a 95% paired-bootstrap interval and writes them to its ``verdicts.csv``
(``Artifacts.verdicts``); this module gathers them (``artifacts.collect_verdicts``, which refuses a claim decided in
two places) and renders them with what the family of claims adds: each simple claim's one-sided p-value, Holm's
adjusted p over all of them, and the verdict that stands after it (``claims.family``), and the number of looks taken
at the claim, each change of its n after a result had been seen (``claims.looks``). ``notebooks/reproduction.py``
re-exports it; ``run_notebooks.py`` writes the file at the end of every call.
"""
from __future__ import annotations

from pathlib import Path

from claims import CLAIMS
from claims.base import FROM_NOTEBOOK, NOISY
from claims.family import FAMILY_LEVEL, METHOD, detectable, holm
from claims.looks import looks

VERDICTS_NAME = "VERDICTS.md"


def md(text) -> str:
    """A Markdown table cell: pipes escaped, one line."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def rows_decided_by(claims=CLAIMS) -> dict[str, list[str]]:
    """Notebook claim id -> the catalogue rows (``document: item``) whose verdict it decides."""
    found: dict[str, list[str]] = {}
    for c in claims:
        for claim_id in c.decided_by:
            found.setdefault(claim_id, []).append(f"{c.document}: {c.item}")
    return found


def _header(rows: list[dict], counts: dict[str, int], adjusted: int) -> list[str]:
    from specrepro.core.provenance import BUSY_CORES
    from specrepro.metrics.verdict import MIN_PROMPTS

    return ["# Verdicts: one per claim", "",
            f"Written by `notebooks/reproduction.py` from each notebook's `verdicts.csv` at the end of every `make "
            f"figures` run; do not edit by hand. Each claim is decided in one notebook (`specrepro/metrics/verdict.py`)"
            f", by where the 95% paired-bootstrap interval of its statistic lies against the threshold: **holds** (the "
            f"whole interval on the claimed side), **fails** (the whole interval on the other side), **undecided, n "
            f"too small** (it straddles the threshold). A claim measured on fewer than {MIN_PROMPTS} prompts is "
            f"undecided whatever its interval; a claim resting on timings taken while other processes kept at least "
            f"{BUSY_CORES:g} cores busy on average is **{NOISY}**, not decided (`others_busy_cores` in its "
            f"`verdicts.csv`); a compound claim (\"holds if …\") is decided by its parts. The rule column says "
            f"which applied.", "",
            f"**The family.** The claims are decided together, not one at a time: {METHOD} adjustment over the "
            f"{adjusted} simple claims (`notebooks/claims/family.py`). Each one's one-sided p-value against its "
            f"threshold comes from its interval by the normal approximation (approximate where a percentile interval "
            f"is not symmetric); a claim keeps **holds** or **fails** only where its adjusted p stays below "
            f"{FAMILY_LEVEL:g}, the level each interval decides at alone, and is otherwise undecided. A compound "
            f"claim stands as its notebook decided it: its parts' intervals are not in the CSVs. The verdict column "
            f"is the family's; where the last column names a row of `REPRODUCTION.md`, that row's verdict is this "
            f"one (holds → reproduced, fails → not reproduced, noisy → noisy), never decided again.", "",
            "**Power.** The detectable column is the smallest distance from the threshold that the claim's n finds "
            "with 80% power at the level its interval decides at (2.80 standard errors, the standard error read from "
            "the interval): an effect the document states below it needs more prompts or seeds than were run "
            "(`claims.family.detectable`).", "",
            "**Looks.** The looks column counts the times a claim's n was changed after a result had been seen "
            "(`notebooks/claims/looks.py`, with the commits): each is one more chance to be decided that the "
            "interval does not account for.", "",
            ", ".join(f"{n} {v}" for v, n in counts.items()) + f" ({len(rows)} claims).", ""]


def render_verdicts(rows: list[dict], decides: dict[str, list[str]]) -> str:
    """``VERDICTS.md``'s Markdown: one row per notebook claim, decided as a family, with its looks, its rule and the
    report rows it decides."""
    family = holm(rows)
    counts = {v: sum(family[r["claim"]].verdict == v for r in rows) for v in FROM_NOTEBOOK}
    counts = {v: n for v, n in counts.items() if n or v != NOISY}  # noisy named only when a claim is
    adjusted = sum(a.adjusted is not None for a in family.values())
    lines = _header(rows, counts, adjusted)
    lines += ["| claim | statement | n | estimate | 95% interval | threshold | detectable | one-sided p (Holm) | "
              "verdict | looks | rule | decided in | decides the report's row |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        where = r["artifact"].replace(".csv", ".md")
        a = family[r["claim"]]
        p = "—" if a.p is None else f"{a.p:.2g} ({a.adjusted:.2g})"
        power = detectable(r)
        power = "—" if power is None else f"±{power:.3g}"
        seen = looks(r["claim"])
        looked = f"{len(seen)}: " + "; ".join(f"{x.commit} {x.change}" for x in seen) if seen else "0"
        rule = r["rule"] + (f"; {a.note}" if a.note else "")
        lines.append(f"| `{r['claim']}` | {md(r['statement'])} | {md(r['n'])} | {r['estimate']} | "
                     f"[{r['low']}, {r['high']}] | {r['threshold']} | {power} | {p} | **{a.verdict}** | {md(looked)} | "
                     f"{md(rule)} | [{where}]({where}) | {md('; '.join(decides.get(r['claim'], [])) or '—')} |")
    return "\n".join(lines) + "\n"


def write_verdicts(figures: Path) -> Path:
    """``<figures>/VERDICTS.md`` from the notebooks' ``verdicts.csv`` (a claim decided twice is a ValueError)."""
    from artifacts import collect_verdicts

    path = Path(figures) / VERDICTS_NAME
    path.write_text(render_verdicts(collect_verdicts(figures), rows_decided_by()))
    return path
