"""The family of claims (``notebooks/claims/family.py``: Holm's step-down over every simple claim) and the looks
(``notebooks/claims/looks.py``) that ``VERDICTS.md`` shows."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "notebooks"))
from claims import family, looks  # noqa: E402
from specrepro.metrics.verdict import FAILS, HOLDS, NOISY, UNDECIDED  # noqa: E402

FIGURES = ROOT / "figures"


def row(claim: str, estimate: float, low: float, high: float, threshold: float, verdict: str, side: str = "≥",
        rule: str | None = None) -> dict:
    return {"claim": claim, "estimate": estimate, "low": low, "high": high, "threshold": threshold,
            "verdict": verdict, "rule": rule or f"95% paired bootstrap interval against {side} {threshold:g}"}


def test_the_one_sided_p_follows_the_verdicts_direction_and_side():
    far = row("a", 2.0, 1.8, 2.2, 1.0, HOLDS)  # z = 1.0 / (0.4 / 3.92) ≈ 9.8
    assert family.one_sided_p(far) < 1e-12
    edge = row("b", 1.2, 1.0, 1.4, 1.0, HOLDS)  # the interval just touches the threshold: p ≈ 0.025
    assert family.one_sided_p(edge) == pytest.approx(0.025, rel=1e-3)
    assert family.one_sided_p(row("c", 0.5, 0.4, 0.6, 1.0, FAILS)) < 1e-12  # fails: p of the other side
    assert family.one_sided_p(row("d", 0.8, 0.6, 1.0, 1.0, HOLDS, side="≤")) == pytest.approx(0.025, rel=1e-3)
    straddle = family.one_sided_p(row("e", 1.05, 0.9, 1.2, 1.0, UNDECIDED))
    assert 0.2 < straddle < 0.5  # the smaller of the two sides
    assert family.one_sided_p(row("f", 1.5, 1.2, 1.8, 1.0, HOLDS, rule="holds if every part holds: x holds")) is None
    assert family.one_sided_p(row("g", 1.5, 1.2, 1.8, 1.0, NOISY)) is None


def test_holm_keeps_the_clear_verdicts_and_leaves_a_borderline_one_undecided():
    rows = [row("clear.holds", 2.0, 1.8, 2.2, 1.0, HOLDS), row("clear.fails", 0.5, 0.4, 0.6, 1.0, FAILS),
            row("borderline", 1.21, 1.01, 1.41, 1.0, HOLDS),  # holds alone, p ≈ 0.02
            row("open", 1.05, 0.9, 1.2, 1.0, UNDECIDED),
            row("compound", 1.5, 1.2, 1.8, 1.0, FAILS, rule="holds if every part holds: x fails"),
            row("loaded", 1.5, 1.2, 1.8, 1.0, NOISY)]
    got = family.holm(rows)
    assert got["clear.holds"].verdict == HOLDS and got["clear.fails"].verdict == FAILS
    assert got["borderline"].p < family.FAMILY_LEVEL <= got["borderline"].adjusted
    assert got["borderline"].verdict == UNDECIDED and "undecided after Holm's step-down over 4 claims" in \
        got["borderline"].note
    assert got["open"].verdict == UNDECIDED and got["open"].note == ""
    assert got["compound"].verdict == FAILS and "compound" in got["compound"].note and got["compound"].p is None
    assert got["loaded"].verdict == NOISY and got["loaded"].note == ""
    adjusted = sorted(a.adjusted for a in got.values() if a.adjusted is not None)
    assert adjusted == sorted(adjusted) and all(0 <= a <= 1 for a in adjusted)  # monotone, bounded
    alone = family.holm([rows[2]])  # one claim: nothing to adjust for, the verdict stands
    assert alone["borderline"].verdict == HOLDS and alone["borderline"].adjusted == pytest.approx(alone["borderline"].p)


def test_the_detectable_effect_is_2_8_standard_errors_of_the_claims_own_interval():
    half = 0.1  # a 95% interval of half-width 0.1: standard error 0.1 / 1.96
    assert family.detectable(row("a", 1.0, 0.9, 1.1, 1.0, UNDECIDED)) == pytest.approx(0.1 * (1.96 + 0.8416) / 1.96,
                                                                                       rel=1e-3)
    assert family.detectable(row("b", 1.0, 1.0 - 2 * half, 1.0 + 2 * half, 1.0, UNDECIDED)) == pytest.approx(
        2 * family.detectable(row("a", 1.0, 0.9, 1.1, 1.0, UNDECIDED)))  # twice as wide: twice the effect
    assert family.detectable(row("c", 1.5, 1.2, 1.8, 1.0, HOLDS, rule="holds if every part holds: x holds")) is None


@pytest.mark.skipif(not (FIGURES / "theory_speculative").is_dir(), reason="no committed figures/")
def test_every_look_names_claims_the_notebooks_decide():
    from artifacts import collect_verdicts
    ids = [r["claim"] for r in collect_verdicts(FIGURES)]
    for key in looks.LOOKS:
        assert [c for c in ids if c == key or (key.endswith(".") and c.startswith(key))], key
    assert len(looks.looks("mentored.speedup.D1")) == 3 and looks.looks("theory.none") == ()
    text = (FIGURES / "VERDICTS.md").read_text()
    assert "Holm's step-down" in text and "| looks |" in text and "| detectable |" in text
