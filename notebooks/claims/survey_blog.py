"""Survey blog (004): the blog post *Speculative Decoding*, a survey of the technique and its variants (speedup with
c and β, MoE expert loading, DistillSpec, online and staged speculative decoding, Chen et al.'s speedups by task).

Here are its claims, one per catalogue item of ``shared/seeds/README.md``, in the catalogue's order. Each is one block:
the artifact paths it reads, then its row (``@claim``: the catalogue item, the document's number and the words
that print it, the criterion, the artifacts and how each may move against the committed copy) above the judge
that decides it. A new item is one more block here and its name in ``CLAIMS``.
"""

from __future__ import annotations

from specrepro.core.stats import normal_interval, wilson_interval
from specrepro.metrics.verdict import MIN_PROMPTS

from .base import (INTERVAL, NOT_COMPARABLE, NOT_REPRODUCED, REPRODUCED, UNDECIDED, Artifact, Estimate, Exact,
                   Interval, MachineSpecific, Outcome, Quote, Regime, Row, Tables, Unreadable, agrees_with_printed,
                   by_label, claim, decided, from_verdict, in_regime, judged, judged_by_interval, largest, num, pick,
                   rel_gap)
from .formulas import FORMULA_RTOL, best_speedup, expected_experts, expected_speedup, expected_tokens

DOCUMENT = "Survey blog (004)"  # the catalogue's label
SEED = "004_8417a3a73169c52c.txt"  # under shared/seeds/


SURFACE = "theory_speculative/blog_speedup_surface.csv"


@claim(DOCUMENT, "expected speedup with c and β", (Artifact(SURFACE, Exact()),),
       "a formula, no values",
       Quote(SEED, "If the cost ratio between running the model on one token and running on the draft "
                   "tokens is $\\beta$, the expected speedup is"),
       "our speedups equal the formula, and our optima its best γ, recomputed here")
def survey_surface(t: Tables) -> Outcome:
    rows = t.rows(SURFACE)
    off = max(max(rel_gap(num(r, "speedup_gamma_4"), expected_speedup(num(r, "alpha"), 4, num(r, "c"), num(r, "beta"))),
                  rel_gap(num(r, "speedup_at_optimum"), best_speedup(num(r, "alpha"), num(r, "c"), num(r, "beta"))))
              for r in rows)
    r = pick(rows, c="0.01", beta="2", alpha="0.8")
    ours = (f"{len(rows)} (c, β, α) points; e.g. c = 0.01, β = 2, α = 0.8: {num(r, 'speedup_at_optimum'):.2f}x "
            f"at γ = {r['optimal_gamma']}")
    return judged(off < FORMULA_RTOL, ours, "the document's formula at every point", f"formula gap {off:.1e}")


BETA_BOUND = "theory_speculative/blog_beta_bound.csv"


@claim(DOCUMENT, "the β bound example (k=5, c=0.01, α=2/3 gives β ≤ 2.69)", (Artifact(BETA_BOUND, Exact()),),
       "", Quote(SEED, "\\beta \\lessapprox 2.69"),
       "equals τ − kc recomputed here and the printed value to its last digit")
def survey_beta_bound(t: Tables) -> Outcome:
    r = t.rows(BETA_BOUND)[0]
    k, c, alpha = int(num(r, "k")), num(r, "c"), num(r, "alpha")
    formula = expected_tokens(alpha, k) - k * c
    ours = num(r, "ours")
    ok = rel_gap(ours, formula) < FORMULA_RTOL and agrees_with_printed(ours, r["blog_beta_bound"])
    return judged(ok, f"β ≤ {ours:.4f} (k = {k}, c = {c:g}, α = {r['alpha']})", "equals the printed value to its "
                  "last digit", f"ours {ours:.4f} vs printed {r['blog_beta_bound']}",
                  paper=f"β ≲ {r['blog_beta_bound']} (column blog_beta_bound)")


BETA_BATCH = "survey_mentored_staged_batch/batch_beta_vs_batch_size.csv"
BETA_NEAR_ONE = 1.5  # "β ≈ 1 at small batch": β(5) at B = 1 at most this (5 rows cost at most 1.5 one-row steps)
BETA_SLIPS = 1  # "β gets closer to k" as B grows: at most this many steps between neighbouring batch sizes fall


@claim(DOCUMENT, "β measured against batch size",
       (Artifact(BETA_BATCH, MachineSpecific("speed", lambda rows: (
           "β at B = 1, γ = 4", num(pick(rows, batch_size="1", gamma="4"), "beta")))),),
       "no values: β ≈ 1 at small batch, nearer k when compute-bound",
       Quote(SEED, "the matmuls become compute bound and $\\beta$ gets closer to $k$"),
       f"β(γ + 1 = 5) at B = 1 within {BETA_NEAR_ONE} (β ≈ 1 at small batch), and rising with B towards γ + 1 "
       "(β(5) at the largest B over β(5) at B = 1 above 1), each on its 95% interval over at least "
       f"{MIN_PROMPTS} independent repeats. 'β ≈ 1 at small batch' is said of a memory-bound step; where our β(5) "
       "at B = 1 says ours is not, the row is 'other regime', decided instead on the document's prediction for a "
       "compute-bound step: β rising with B towards γ + 1", measured=True)
def survey_beta_batch(t: Tables) -> Outcome:
    rows = t.rows(BETA_BATCH)
    ones = [r for r in rows if r["batch_size"] == "1"]
    regime = Regime({int(r["gamma"]) + 1: num(r, "beta") for r in ones},
                    step_ms=num(ones[0], "latency_1_ms") if ones else None,
                    floor_ms=num(ones[0], "floor_ms") if ones and "floor_ms" in ones[0] else None)
    return in_regime(survey_beta_direction(t), regime, lambda: survey_beta_rises(t))


def beta_rows(t: Tables) -> list[Row]:
    """The γ = 4 rows (β(5)) by batch size; Unreadable with fewer than 3 sizes or without B = 1."""
    rows = sorted((r for r in t.rows(BETA_BATCH) if r["gamma"] == "4"), key=lambda r: num(r, "batch_size"))
    if len(rows) < 3 or rows[0]["batch_size"] != "1":
        raise Unreadable(f"fewer than 3 batch sizes with γ = 4 rows, B = 1 among them, in {BETA_BATCH}")
    return rows


def with_intervals(rows: list[Row]) -> bool:
    """Whether the run wrote β's intervals over its repeats (a run before them: point estimates only)."""
    return "rise_low95" in rows[-1] and num(rows[-1], "rise_low95") is not None


def survey_beta_rises(t: Tables) -> Outcome:
    """The compute-bound half of the sentence ("β gets closer to k"): β(5) at the largest B over β(5) at B = 1,
    paired by repeat, its interval above 1 (below 1: it falls); fewer than MIN_PROMPTS repeats, or no interval:
    undecided."""
    rows = beta_rows(t)
    top = rows[-1]
    ours = ", ".join(f"β(5) {num(r, 'beta'):.2f} at B = {r['batch_size']}" for r in rows)
    if not with_intervals(rows):
        return Outcome(ours, UNDECIDED, f"β(5) by B without an interval ({ours}): not decided")
    rise = (f"β(5) at B = {top['batch_size']} over B = 1: {num(top, 'rise_over_b1'):.2f} "
            f"[{num(top, 'rise_low95'):.2f}, {num(top, 'rise_high95'):.2f}] ({num(top, 'repeats'):.0f} repeats)")
    if num(top, "repeats") < MIN_PROMPTS:
        return Outcome(ours, UNDECIDED, f"{rise}: fewer than {MIN_PROMPTS} repeats, undecided whatever the "
                                        "interval", basis=INTERVAL)
    return judged_by_interval(num(top, "rise_low95") > 1, num(top, "rise_high95") < 1, ours,
                              f"{rise}: β rises with B towards γ + 1 = 5, the interval above 1",
                              f"{rise}: β falls with B, the interval below 1", f"{rise}: the interval straddles 1")


def survey_beta_direction(t: Tables) -> Outcome:
    """The whole sentence, as a memory-bound step would show it: β(5) near 1 at B = 1 and rising with B."""
    rows = beta_rows(t)
    low, high = rows[0], rows[-1]
    betas = [num(r, "beta") for r in rows]
    ours = ("β(γ + 1 = 5) by B: " + ", ".join(f"{b:.2f} (B = {r['batch_size']})" for r, b in zip(rows, betas))
            + f" (compute-bound limit {high['compute_bound_limit']}); break-even β "
              f"{num(low, 'blog_break_even_beta'):.2f} at α {num(low, 'alpha'):.2f}")
    if with_intervals(rows):
        rises = survey_beta_rises(t)
        near = f"β(5) at B = 1 {betas[0]:.2f} [{num(low, 'beta_low95'):.2f}, {num(low, 'beta_high95'):.2f}]"
        small, not_small = num(low, "beta_high95") <= BETA_NEAR_ONE, num(low, "beta_low95") > BETA_NEAR_ONE
        return judged_by_interval(small and rises.verdict == REPRODUCED,
                                  not_small or rises.verdict == NOT_REPRODUCED, ours,
                                  f"{near}, within {BETA_NEAR_ONE}; {rises.reason}",
                                  f"{near}{f', above {BETA_NEAR_ONE}' if not_small else ''}; {rises.reason}",
                                  f"{near}; {rises.reason}")
    slips = sum(b < a for a, b in zip(betas, betas[1:]))
    small = betas[0] <= BETA_NEAR_ONE
    rising = betas[-1] > betas[0] and slips <= BETA_SLIPS
    return judged(small and rising, ours, "β is near 1 at B = 1 and grows with batch size towards γ + 1",
                  f"β(5) at B = {low['batch_size']} is {betas[0]:.2f}"
                  + (f" (above {BETA_NEAR_ONE})" if not small else "")
                  + (f"; it does not rise with B ({slips} of {len(betas) - 1} steps fall)" if not rising
                     else f"; it rises with B ({slips} of {len(betas) - 1} steps fall)"))


MOE_EXPERTS = "theory_moe/blog_moe_expected_experts.csv"
MOE_BETA = "theory_moe/blog_moe_beta.csv"
MOE_SPEEDUP = "theory_moe/blog_moe_speedup.csv"


@claim(DOCUMENT, "MoE expected experts E(1-((E-k)/E)^T) and the Mixtral example (8 experts, top-2, 5 tokens: "
                 "6.10 experts, β ≈ 3.05)",
       (Artifact(MOE_EXPERTS, Exact()), Artifact(MOE_BETA, Exact()), Artifact(MOE_SPEEDUP, Exact())),
       "", Quote(SEED, "8 (1 - (\\frac{2}{8})^{5}) \\approx 6.101"),
       "E(1 − ((E − k)/E)^T) recomputed here, and both printed values to their last digit")
def survey_moe(t: Tables) -> Outcome:
    experts = pick(t.rows(MOE_EXPERTS), router="uniform", T="5")
    beta = pick(t.rows(MOE_BETA), router="uniform", T="5")
    ours_e, ours_b = num(experts, "experts_closed_form"), num(beta, "beta")
    formula_ok = rel_gap(ours_e, expected_experts(8, 2, 5)) < FORMULA_RTOL
    z = max(abs(num(r, "z_score")) for r in t.rows(MOE_EXPERTS))
    ok = formula_ok and agrees_with_printed(ours_e, experts["blog"]) and agrees_with_printed(ours_b, beta["blog"])
    return judged(ok, f"{ours_e:.4f} experts, β = {ours_b:.4f}; Monte Carlo max |z| {z:.1f} over all routers and T",
                  "both printed values to their last digit (the blog's (2/8)^5 is a typo for (6/8)^5)",
                  f"ours {ours_e:.4f} / {ours_b:.4f} vs printed {experts['blog']} / {beta['blog']}",
                  paper=f"{experts['blog']} experts, β ≈ {beta['blog']} (column blog)")


DISTILL = "distillspec_study/distillspec_grid.csv"


@claim(DOCUMENT, "DistillSpec table (relative gain in accepted tokens by divergence and by where training data "
                 "comes from)",
       (Artifact(DISTILL, Interval("the CSV's 90% paired bootstrap interval (gain_lo90, gain_hi90)", by_label(
           lambda r: f"{r['source']}-{r['divergence']}", "gain_tau",
           lambda r, v: (num(r, "gain_lo90"), num(r, "gain_hi90"))))),),
       "no values (an image); distilled drafts gain",
       Quote(SEED, "Distilled draft models result in additional speedups."),
       "the mean τ gain of the distilled drafts over the shipped draft ≥ 0 (95% paired bootstrap)",
       decided_by=("distillspec.distilled_drafts_gain",))
def survey_distillspec(t: Tables) -> Outcome:
    decision = decided(t, "distillspec.distilled_drafts_gain")
    return from_verdict(decision, decision.text,
                        "distilled drafts gain τ over the undistilled draft, as the survey reports",
                        "distillation on this budget does not gain τ over the undistilled draft")


ONLINE = "online_speculative_stream/online_alpha_held_out_paired.csv"
ONLINE_TASKS = "online_speculative_stream/online_alpha_held_out.csv"
ONLINE_SEQ = "online_speculative_stream_sequences/online_alpha_held_out_paired.csv"

# The paired tables carry a mean difference and its standard error, not an interval.
PAIRED_NORMAL = Interval("normal 95% interval from the CSV's standard error", by_label(
    lambda r: "paired mean", "mean_difference", lambda r, v: normal_interval(v, num(r, "standard_error"))))


@claim(DOCUMENT, "online speculative decoding acceptance over time",
       (Artifact(ONLINE, PAIRED_NORMAL),
        Artifact(ONLINE_TASKS, Interval("binomial (Wilson) 95% interval from the tested counts", by_label(
            lambda r: r["task"], "alpha_online", lambda r, v: wilson_interval(v, num(r, "tested_online"))))),
        Artifact(ONLINE_SEQ, PAIRED_NORMAL)),
       "no values (a chart); acceptance improves",
       Quote(SEED, "one can get substantially improved acceptance rates"),
       "held-out α of the online draft minus the frozen draft's ≥ +0.10 (95% paired bootstrap)",
       pictures=("online_speculative_stream/online_alpha_over_stream.png",),
       decided_by=("online.held_out_alpha_gain",))
def survey_online(t: Tables) -> Outcome:
    decision = decided(t, "online.held_out_alpha_gain")
    return from_verdict(decision, decision.text, "the online draft's held-out α is substantially higher (≥ +0.10)",
                        "the online draft did not raise held-out α by +0.10 on this stream")


STAGED = "survey_mentored_staged_batch/staged_token_sources.csv"
STAGED_BENCH = "survey_mentored_staged_batch/staged_fused_bench.csv"


def staged_n(rows: list[Row], row: Row) -> float:
    """The tokens of ``row``'s drafter on ``row``'s prompt: the trials its share is a proportion of."""
    return sum(num(r, "tokens") for r in rows if r["drafter"] == row["drafter"] and r["prompt_id"] == row["prompt_id"])


def staged_estimates(rows: list[Row]) -> dict[str, Estimate]:
    """Each token source's share, with its Wilson interval over the tokens it is a share of."""
    return by_label(lambda r: f"{r['drafter']}/{r['source']}/{r['prompt_id']}", "share",
                    lambda r, v: wilson_interval(v, staged_n(rows, r)))(rows)


@claim(DOCUMENT, "staged speculative decoding token-source picture",
       (Artifact(STAGED, Interval("binomial (Wilson) 95% interval from the token counts", staged_estimates)),
        Artifact(STAGED_BENCH, MachineSpecific("speed", lambda rows: (
            "staged over the draft alone", num(pick(rows, method="staged"), "speed_over_draft_alone"))))),
       "no values (a picture)", Quote(SEED, "Green tokens are accepted N-gram tokens"),
       "none: the picture has no numbers")
def survey_staged(t: Tables) -> Outcome:
    rows = [r for r in t.rows(STAGED) if r["drafter"] == "staged"]
    shares = ", ".join(f"{r['source']} {num(r, 'share'):.0%}" for r in rows)
    return Outcome(f"staged token sources on {rows[0]['prompt_id']}: {shares}", NOT_COMPARABLE,
                   "the survey shows a picture (GPT-2 with a 40M draft and an N-gram model) and prints no shares")


CHEN = "survey_mentored_staged_batch/speedup_by_task.csv"


@claim(DOCUMENT, "the speedups Chen et al. report by task (quoted in the survey)",
       (Artifact(CHEN, MachineSpecific("speed", largest("speedup", "suite"))),),
       "Chen et al. 2023, Table 1 (Chinchilla 70B, 4B draft, TPU v4): XSum 1.92x nucleus, 2.01x greedy; "
       "HumanEval 2.46x nucleus", Quote(SEED, "The speedup is task dependent"),
       f"code's sampling speedup above summarisation's, the 95% intervals apart, on at least {MIN_PROMPTS} prompts "
       "per suite", measured=True)
def survey_chen(t: Tables) -> Outcome:
    """Chen et al.'s point, that the speedup depends on the task (code gains more than summarisation), on our
    speedup-by-task table: code's sampling row above summarisation's with the two 95% intervals apart."""
    rows = t.rows(CHEN)
    code, text = pick(rows, suite="humaneval", decoding="sampling"), pick(rows, suite="summarize", decoding="sampling")
    prompts = min(num(r, "prompts") for r in (code, text))
    ours = "; ".join(f"{r['suite']} {r['decoding']} {num(r, 'speedup'):.2f}x [{num(r, 'speedup_low'):.2f}, "
                     f"{num(r, 'speedup_high'):.2f}]" for r in rows) + f" ({prompts:.0f} prompts per suite)"
    paper = "Chen et al. 2023, Table 1, not printed in the seed (it says only the words below): " + "; ".join(
        f"{r['paper_task']} {r['paper_decoding']} {r['paper_speedup']}x" for r in rows
        if r["paper_speedup"] not in ("", "None"))
    if prompts < MIN_PROMPTS:  # the notebooks' rule (specrepro.metrics.verdict): a few prompts' interval says nothing
        return Outcome(ours, UNDECIDED, f"{prompts:.0f} prompts per suite, fewer than {MIN_PROMPTS}: undecided "
                       f"whatever the intervals", paper)
    return judged_by_interval(
        num(code, "speedup_low") > num(text, "speedup_high"), num(code, "speedup_high") < num(text, "speedup_low"),
        ours, "task dependent as in Chen et al.: code (HumanEval) gains more than summarisation (XSum), the two 95% "
              "intervals apart",
        "summarisation gains more than code here, the two 95% intervals apart: the other way from Chen et al.",
        "the two 95% intervals overlap: code's and summarisation's speedups are not told apart at this n (absolute "
        "speedups differ: a 135M pair on a CPU, not Chinchilla 70B on TPU v4)", paper=paper)


CLAIMS = (survey_surface, survey_beta_bound, survey_beta_batch, survey_moe, survey_distillspec, survey_online,
          survey_staged, survey_chen)
