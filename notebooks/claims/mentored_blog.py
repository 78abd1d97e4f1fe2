"""Mentored blog (001): the blog post *An optimal lossy variant of speculative decoding* (mentored decoding). The
blog swaps the letters: its p is our q (the draft) and its q our p (the target).

Here are its claims, one per catalogue item of ``shared/seeds/README.md``, in the catalogue's order. Each is one block:
the artifact paths it reads, then its row (``@claim``: the catalogue item, the document's number and the words
that print it, the criterion, the artifacts and how each may move against the committed copy) above the judge
that decides it. A new item is one more block here and its name in ``CLAIMS``.
"""

from __future__ import annotations

from specrepro.core.stats import bounded_mean_interval

from .base import (Artifact, Exact, Interval, MachineSpecific, Outcome, Quote, Tables, by_label, claim, decided,
                   first_row, from_verdict, judged, largest, num, pick)

DOCUMENT = "Mentored blog (001)"  # the catalogue's label
SEED = "001_7f66a908324184a0.txt"  # under shared/seeds/


MENTORED_THEORY = "theory_mentored/mentored_acceptance_vs_kl.csv"
MENTORED_EXAMPLE = "theory_mentored/mentored_three_token_example.csv"
MENTORED_REAL = "survey_mentored_staged_batch/mentored_acceptance_vs_kl_real.csv"
MENTORED_COST = "survey_mentored_staged_batch/mentored_solver_cost.csv"


@claim(DOCUMENT, "acceptance probability vs KL bound for one token",
       (Artifact(MENTORED_THEORY, Exact()), Artifact(MENTORED_EXAMPLE, Exact()),
        Artifact(MENTORED_REAL, Interval("normal 95% bound for a mean of `rows` values in [0, 1]", by_label(
            lambda r: f"D={r['D']}", "mean_accept", lambda r, v: bounded_mean_interval(v, num(r, "rows"))))),
        Artifact(MENTORED_COST, MachineSpecific("speed", first_row("ms", "solver ms per row")))),
       "no values (a chart)",
       Quote(SEED, "The following chart illustrates the balance between the probability to accept"),
       "acceptance rises with D (theory and real rows) and the solver meets the closed form")
def mentored_acceptance(t: Tables) -> Outcome:
    example = t.rows(MENTORED_EXAMPLE)
    solver_gap = max(abs(num(r, "solver") - num(r, "closed_form_1.8-exp(-D)")) for r in example)
    theory = [num(r, "mean_accept") for r in t.rows(MENTORED_THEORY)]
    real = t.rows(MENTORED_REAL)
    accept = [num(r, "mean_accept") for r in real]
    at_one = pick(real, D="1")
    rising = all(b >= a - 1e-9 for a, b in zip(accept, accept[1:])) and all(
        b >= a - 1e-9 for a, b in zip(theory, theory[1:]))
    ours = (f"real rows: {accept[0]:.2f} at D = {real[0]['D']} → {num(at_one, 'mean_accept'):.2f} at D = 1; "
            f"solver vs closed form on the three-token example within {solver_gap:.2g}")
    return judged(rising and solver_gap < 1e-4, ours, "acceptance rises with the KL bound, real rows and theory",
                  "acceptance does not rise with D, or the solver misses the closed form")


MENTORED_SQ = "mentored_speed_quality/mentored_speed_quality.csv"
MENTORED_SQ_THEORY = "theory_mentored/mentored_speed_vs_quality.csv"
MENTORED_SQ_ROUGE = "survey_mentored_staged_batch/mentored_speed_vs_quality_measured.csv"
MENTORED_DECIDED_BY = ("mentored.speedup_within_quality_noise",)


@claim(DOCUMENT, "speed vs task quality for multinomial sampling, speculative decoding and mentored decoding at "
                 "several draft lengths and KL bounds",
       (Artifact(MENTORED_SQ, Interval("the CSV's 95% paired bootstrap interval of the NLL drop", by_label(
           lambda r: r["method"], "nll_drop",
           lambda r, v: (num(r, "nll_drop_ci_low"), num(r, "nll_drop_ci_high"))))),
        Artifact(MENTORED_SQ, MachineSpecific("speed", largest("over_speculative", "method"))),
        Artifact(MENTORED_SQ_THEORY, Exact()),
        Artifact(MENTORED_SQ_ROUGE, MachineSpecific("speed", largest("speed_over_speculative", "variant")))),
       "no values (a chart); mentored is faster, its smallest D without a clear quality loss",
       Quote(SEED, "Mentored decoding further increases the number of tokens generated per second"),
       "≥ 1.3x speculative sampling's tokens/s at a KL bound D whose NLL rise over the lossless methods is ≤ 0.05 "
       "nats per token (95% paired bootstrap, both)",
       decided_by=MENTORED_DECIDED_BY)
def mentored_speed_quality(t: Tables) -> Outcome:
    """The verdict is the notebook's (one per claim, on paired-bootstrap intervals): this reads it back and shows
    the trade-off at each KL bound."""
    rows = t.rows(MENTORED_SQ)
    lossy = sorted((r for r in rows if r["method"].startswith("mentored")), key=lambda r: num(r, "kl_bound"))
    at_each = "; ".join(f"D = {r['kl_bound']}: {num(r, 'over_speculative'):.2f}x speculative (speed "
                        f"{r['speed_verdict']}), NLL {r['nll_verdict']}" for r in lossy)
    decision = decided(t, *MENTORED_DECIDED_BY)
    return from_verdict(decision, f"{at_each} ({decision.text})",
                        "mentored decoding is faster at a quality within its margin",
                        "at no KL bound is mentored decoding both ≥ 1.3x speculative and within the NLL margin: the "
                        "speed comes only with a quality loss (the trade-off itself holds)")


CLAIMS = (mentored_acceptance, mentored_speed_quality)
