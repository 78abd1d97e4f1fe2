"""Slides (003): the slides on Leviathan et al., *Fast Inference from Transformers via Speculative Decoding*
(ICML 2023). Their theory (expected tokens, optimal γ, walltime and operations factors) is checked against the
formulas restated in :mod:`claims.formulas`; their Tables 2 and 3 against our measured speedups and α.

Here are its claims, one per catalogue item of ``shared/seeds/README.md``, in the catalogue's order. Each is one block:
the artifact paths it reads, then its row (``@claim``: the catalogue item, the document's number and the words
that print it, the criterion, the artifacts and how each may move against the committed copy) above the judge
that decides it. A new item is one more block here and its name in ``CLAIMS``.
"""

from __future__ import annotations

from specrepro.metrics.verdict import MIN_PROMPTS

from .base import (FP32_NO_INTERVAL, UNDECIDED, Artifact, Exact, MachineSpecific, Outcome, Quote, Regime, Tables, claim,
                   in_regime, judged, judged_by_interval, largest, mean, num, pick, prediction_within, rel_gap)
from .formulas import FORMULA_RTOL, best_speedup, expected_tokens, operations_factor, walltime_factor

DOCUMENT = "Slides (003)"  # the catalogue's label
SEED = "003_98d09c7997ae498b.txt"  # under shared/seeds/


FIG2 = "theory_speculative/slides_fig2_expected_tokens.csv"


@claim(DOCUMENT, "Fig. 2 expected tokens vs α for several γ", (Artifact(FIG2, Exact()),),
       "no values (a chart of the formula; the slides note γ + 1 = 7 at α = 1 for the top curve)",
       Quote(SEED, "So, red line should be close to 7 at $\\alpha = 1.0$"),
       "our closed form equals (1 − α^(γ+1))/(1 − α) recomputed here, and Monte Carlo agrees (|z| < 4)")
def slides_fig2(t: Tables) -> Outcome:
    rows = t.rows(FIG2)
    off = max(rel_gap(num(r, "tau_closed_form"), expected_tokens(num(r, "alpha"), int(num(r, "gamma")))) for r in rows)
    worst_z = max(abs(num(r, "z_score")) for r in rows)
    top = max(rows, key=lambda r: (num(r, "gamma"), num(r, "alpha")))
    ours = (f"τ(γ = {top['gamma']}, α = {top['alpha']}) = {num(top, 'tau_closed_form'):.3f}; {len(rows)} points, "
            f"Monte Carlo max |z| {worst_z:.1f}")
    return judged(off < FORMULA_RTOL and worst_z < 4, ours, "the document's formula at every point; simulation agrees",
                  f"formula gap {off:.1e}, Monte Carlo max |z| {worst_z:.1f}")


FIG3 = "theory_speculative/slides_fig3_optimal_gamma.csv"


@claim(DOCUMENT, "Fig. 3 optimal γ vs α for several c", (Artifact(FIG3, Exact()),),
       "no values (a chart)", Quote(SEED, "Figure 3. The optimal $\\gamma$ as a function of $\\alpha$"),
       "the speedup at our optimal γ equals the best over γ = 1…200 of the formula recomputed here")
def slides_fig3(t: Tables) -> Outcome:
    rows = t.rows(FIG3)
    off = max(rel_gap(num(r, "speedup_at_optimum"), best_speedup(num(r, "alpha"), num(r, "c"))) for r in rows)
    same = sum(r["optimal_gamma"] == r["monte_carlo_optimal_gamma"] for r in rows)
    example = max((r for r in rows if num(r, "c") == min(num(x, "c") for x in rows)), key=lambda r: num(r, "alpha"))
    ours = (f"optimal γ = {example['optimal_gamma']} at c = {example['c']}, α = {example['alpha']}; "
            f"Monte Carlo picks the same γ at {same} of {len(rows)} points")
    return judged(off < FORMULA_RTOL, ours, "each optimum is the best γ of the document's formula (ties and "
                  "near-ties aside, where Monte Carlo may pick a neighbour)", f"optimum off the formula by {off:.1e}")


S33 = "theory_speculative/slides_s3_3_walltime_factor.csv"


@claim(DOCUMENT, "§3.3 walltime factor", (Artifact(S33, Exact()),),
       "a formula, no values",
       Quote(SEED, "Speculative decode ありでの 1 token の生成時間は以下の式になる"),
       "equals the formula (exponent restored) recomputed here")
def slides_s33(t: Tables) -> Outcome:
    rows = t.rows(S33)
    off = max(rel_gap(num(r, "walltime_factor"), walltime_factor(num(r, "alpha"), int(num(r, "gamma")), num(r, "c")))
              for r in rows)
    simulated = max(rel_gap(num(r, "monte_carlo"), num(r, "walltime_factor")) for r in rows)
    ours = f"{len(rows)} (c, γ, α) points; Monte Carlo within {simulated:.1%} (no standard error in the CSV)"
    return judged(off < FORMULA_RTOL, ours, "the formula with 1 − α^(γ+1) at every point",
                  f"formula gap {off:.1e}")


S34 = "theory_speculative/slides_s3_4_operations_factor.csv"


@claim(DOCUMENT, "§3.4 arithmetic-operations factor", (Artifact(S34, Exact()),),
       "", Quote(SEED, "計算量は $\\gamma + 1$ 倍になる"),
       "the slides' example (γ + 1 at α = 0, ĉ = 0) and the formula recomputed here")
def slides_s34(t: Tables) -> Outcome:
    rows = t.rows(S34)
    off = max(max(rel_gap(num(r, "operations_c_hat_0"), operations_factor(num(r, "alpha"), int(num(r, "gamma")), 0)),
                  rel_gap(num(r, "operations_c_hat_0.05"), operations_factor(num(r, "alpha"), int(num(r, "gamma")),
                                                                             0.05)))
              for r in rows)
    examples = [r for r in rows if num(r, "slides_example_alpha0_c_hat0") is not None]
    example_ok = all(num(r, "operations_c_hat_0") == num(r, "slides_example_alpha0_c_hat0") for r in examples)
    g = examples[-1]
    ours = f"α = 0, ĉ = 0: {num(g, 'operations_c_hat_0'):g} at γ = {g['gamma']} ({len(examples)} γ values checked)"
    return judged(off < FORMULA_RTOL and example_ok and bool(examples), ours,
                  "the slides' example and the formula at every point", f"formula gap {off:.1e} or example differs",
                  paper=f"γ + 1 at α = 0, ĉ = 0 (column slides_example_alpha0_c_hat0: "
                        f"{num(g, 'slides_example_alpha0_c_hat0'):g} at γ = {g['gamma']})")


T2_OURS = "speculative_slides_tables/slides_table2_speedup.csv"
T2_PUBLISHED = "speculative_slides_tables/slides_table2_published.csv"
T2_IMPLIED = "theory_speculative/slides_table2_implied_cost.csv"


def is_lm_draft(name: str) -> bool:
    """Whether Table 2's ``draft`` names a language-model draft (not an n-gram or prompt-lookup one)."""
    return name not in ("unigram", "bigram", "prompt-lookup")


@claim(DOCUMENT, "Table 2 empirical speedups (draft, temperature, γ, α, speed)",
       (Artifact(T2_OURS, MachineSpecific("speed", largest("speedup", "gamma"))),
        Artifact(T2_PUBLISHED, Exact("the published rows and the cost c they imply")),
        Artifact(T2_IMPLIED, Exact())),
       "", Quote(SEED, "They achieved 2-3 times speed up."),
       "speculative sampling with an LM draft runs faster than AR at some (T, γ) (speedup above 1x: the direction of "
       "the slides' 2–3x, whose size belongs to T5-XXL on TPUs): reproduced when a point's 95% paired bootstrap "
       f"interval over at least {MIN_PROMPTS} prompts lies above 1, not reproduced when every point's lies below 1; "
       "the size is reported beside theirs. The slides' speedups come from memory-bound steps (T5-XXL on TPUs); where "
       "our β(5) says ours is not, the row is 'other regime', decided instead on whether the speedup our simulator "
       "predicts from the measured α, c and β lies within each measured point's interval",
       pictures=("speculative_slides_tables/speedup_vs_gamma_measured_vs_predicted.png",), measured=True)
def slides_table2(t: Tables) -> Outcome:
    outcome = slides_table2_direction(t)
    rows = [r for r in t.rows(T2_OURS) if is_lm_draft(r["draft"])]
    if "low95" not in rows[0] or num(rows[0], "low95") is None:
        return outcome  # (a run written before the intervals: no prediction can be tested)
    step = rows[0]  # L_fp(1) and its floor, where the run recorded them (from the bench's device profile)
    regime = Regime({int(r["gamma"]) + 1: num(r, "beta") for r in rows},  # β(γ + 1), as calibrated for the bench
                    num(step, "step_ms") if "step_ms" in step else None,
                    num(step, "floor_ms") if "floor_ms" in step else None)
    return in_regime(outcome, regime, lambda: prediction_within(
        [(f"T = {r['T']}, γ = {r['gamma']}", num(r, "predicted_speedup"), num(r, "low95"), num(r, "high95"))
         for r in rows], "speedup over AR predicted from α, c and β (simulations.speculative)"))


def slides_table2_direction(t: Tables) -> Outcome:
    """Table 2 on the slides' own claim: some (T, γ) faster than AR."""
    published = t.rows(T2_PUBLISHED)
    best_paper = max(published, key=lambda r: num(r, "speedup"))
    rows = [r for r in t.rows(T2_OURS) if is_lm_draft(r["draft"])]
    best = max(rows, key=lambda r: num(r, "speedup"))
    alphas = [num(r, "alpha") for r in rows]
    ours = (f"best {num(best, 'speedup'):.2f}x ({best['draft']}, T = {best['T']}, γ = {best['gamma']}, "
            f"{best['dtype']}); α {min(alphas):.2f}–{max(alphas):.2f}")
    why = (f"α ≤ {max(alphas):.2f} and c ≈ {mean(num(r, 'c') for r in rows):.2f} on this CPU predict at most "
           f"{max(num(r, 'predicted_speedup') for r in rows):.2f}x: our draft is weak and not cheap enough")
    paper = (f"{num(best_paper, 'speedup'):g}x ({best_paper['task']}, {best_paper['draft']}, T = {best_paper['T']}, "
             f"γ = {best_paper['gamma']}, α = {best_paper['alpha']}; slides_table2_published.csv)")
    if "low95" not in best or num(best, "low95") is None:  # (a run written before the intervals: points alone)
        return judged(num(best, "speedup") > 1, ours, f"faster than AR ({num(best, 'speedup'):.2f}x; the slides' "
                      "2–3x)", why, paper=paper)
    ours += (f"; 95% interval of the best point [{num(best, 'low95'):.2f}, {num(best, 'high95'):.2f}], every point's "
             f"upper end ≤ {max(num(r, 'high95') for r in rows):.2f} ({num(best, 'prompts'):.0f} prompts)")
    if num(best, "prompts") < MIN_PROMPTS:
        return Outcome(ours, UNDECIDED, f"fewer than {MIN_PROMPTS} prompts: undecided whatever the interval", paper)
    return judged_by_interval(any(num(r, "low95") > 1 for r in rows), all(num(r, "high95") < 1 for r in rows), ours,
                              f"faster than AR at some (T, γ), its whole interval above 1 (the slides' 2–3x)",
                              f"slower than AR at every (T, γ), each whole interval below 1: {why}",
                              "no point's interval lies wholly above 1, and not every one lies below it", paper)


T3_ALPHA = "speculative_slides_tables/slides_table3_alpha.csv"
T3_GAPS = "speculative_slides_tables/slides_table3_alpha_gaps.csv"
LM = "LM"  # how the slides' tables name a language-model draft


@claim(DOCUMENT, "Table 3 empirical α for unigram, bigram and LM drafts at T=0 and T=1",
       (Artifact(T3_ALPHA, Exact(FP32_NO_INTERVAL)), Artifact(T3_GAPS, Exact("α gaps with their paired intervals"))),
       "", Quote(SEED, "T5-XXL (ENDE) T5-SMALL T=0 0.75"),
       "α rises with the draft's strength at every T, unigram < bigram < LM, as in every published column: "
       "reproduced when both steps' 95% paired bootstrap intervals over at least "
       f"{MIN_PROMPTS} prompts lie above 0 at every T, not reproduced when one lies below 0 (the published α belong "
       "to other models and tasks: shown, not tested)", measured=True)
def slides_table3(t: Tables) -> Outcome:
    rows = t.rows(T3_ALPHA)
    published = ("alpha_gpt_like_97m", "alpha_t5_xxl_ende", "alpha_t5_xxl_cnndm", "alpha_lamda_137b")
    lm = [r for r in rows if r["draft"].startswith(LM)]
    paper_lm = [v for r in lm for c in published if (v := num(r, c)) is not None]
    lm_alpha = {r["T"]: num(r, "alpha_ours") for r in lm}
    ordered = all(num(pick(rows, draft="unigram", T=temp), "alpha_ours")
                  < num(pick(rows, draft="bigram", T=temp), "alpha_ours") < lm_alpha[temp] for temp in lm_alpha)
    ours = "; ".join(f"T = {temp}: unigram {num(pick(rows, draft='unigram', T=temp), 'alpha_ours'):.2f}, bigram "
                     f"{num(pick(rows, draft='bigram', T=temp), 'alpha_ours'):.2f}, LM {a:.2f}"
                     for temp, a in lm_alpha.items())
    t5 = num(pick(lm, T="0"), "alpha_t5_xxl_ende")
    weak = (f"; our LM α is below every published LM-draft α ({min(paper_lm):.2f}–{max(paper_lm):.2f})"
            if min(lm_alpha.values()) < min(paper_lm) else "")
    paper = (f"LM draft α {min(paper_lm):.2f}–{max(paper_lm):.2f} (T5-small on T5-XXL EnDe, T = 0: {t5:g}); "
             f"slides_table3_alpha.csv")
    if not (t.folder / T3_GAPS).is_file():  # (a run written before the intervals: its point estimates alone)
        return judged(ordered, ours, f"unigram < bigram < LM at every T, as published{weak}",
                      f"the ordering unigram < bigram < LM fails at some T{weak}", paper=paper)
    gaps = t.rows(T3_GAPS)
    ours += "; steps: " + ", ".join(f"T = {g['T']} {g['comparison']} {num(g, 'gap'):+.3f} [{num(g, 'gap_low95'):+.3f}, "
                                    f"{num(g, 'gap_high95'):+.3f}]" for g in gaps)
    ours += f" ({num(gaps[0], 'prompts'):.0f} prompts)"
    if num(gaps[0], "prompts") < MIN_PROMPTS:
        return Outcome(ours, UNDECIDED, f"fewer than {MIN_PROMPTS} prompts: undecided whatever the interval", paper)
    below = [f"T = {g['T']} {g['comparison']}" for g in gaps if num(g, "gap_high95") < 0]
    return judged_by_interval(all(num(g, "gap_low95") > 0 for g in gaps), bool(below), ours,
                              f"unigram < bigram < LM at every T, each step's interval above 0, as published{weak}",
                              f"the order is reversed at {', '.join(below)}, the whole interval below 0{weak}",
                              f"some step's interval straddles 0{weak}", paper)


CLAIMS = (slides_fig2, slides_fig3, slides_s33, slides_s34, slides_table2, slides_table3)
