"""MJSD (000): the paper *Multi-Token Joint Speculative Decoding* (MJGD, MJSD, and the BiLD and SpecTr baselines).

Here are its claims, one per catalogue item of ``shared/seeds/README.md``, in the catalogue's order. Each is one block:
the artifact paths it reads, then its row (``@claim``: the catalogue item, the document's number and the words
that print it, the criterion, the artifacts and how each may move against the committed copy) above the judge
that decides it. A new item is one more block here and its name in ``CLAIMS``.
"""

from __future__ import annotations

from .base import (EXACT_DTYPE, NOT_COMPARABLE, UNDECIDED, Artifact, Exact, MachineSpecific, Outcome, Quote, Row,
                   Tables, claim, decided, first_number, first_row, from_verdict, judged, mean, num, pick,
                   starting)

DOCUMENT = "MJSD (000)"  # the catalogue's label
SEED = "000_c24b55bca4e940a6.txt"  # under shared/seeds/


MJGD = "mjsd_joint_decoding/mjsd_fig1_mjgd.csv"


MJGD_DECIDED_BY = ("mjsd.mjgd_perplexity_falls_with_k",)


@claim(DOCUMENT, "Fig. 1 MJGD perplexity and ROUGE-L vs K",
       (Artifact(MJGD, MachineSpecific(EXACT_DTYPE, first_row("perplexity", "perplexity at K = 1"))),
        Artifact(MJGD, MachineSpecific("speed", first_row("tokens_per_s", "tokens/s at K = 1")))),
       "no values (a chart); perplexity falls from K = 1 to 2 and beyond",
       Quote(SEED, "there is a significant improvement in perplexity"),
       "perplexity at K = 2 and at the largest K below K = 1's (95% paired bootstrap over prompts)",
       decided_by=MJGD_DECIDED_BY)
def mjsd_fig1(t: Tables) -> Outcome:
    rows = sorted(t.rows(MJGD), key=lambda r: num(r, "K"))
    ppl = [num(r, "perplexity") for r in rows]
    decision = decided(t, *MJGD_DECIDED_BY)
    ours = "perplexity by K: " + " → ".join(f"{p:.2f}" for p in ppl) + f" ({decision.text})"
    return from_verdict(decision, ours, f"falls from K = 1 to 2 ({ppl[1] / ppl[0] - 1:+.1%}) and to K = "
                        f"{rows[-1]['K']} ({ppl[-1] / ppl[0] - 1:+.1%})",
                        f"perplexity does not fall from K = 1 (K = 2: {ppl[1] / ppl[0] - 1:+.1%}, K = "
                        f"{rows[-1]['K']}: {ppl[-1] / ppl[0] - 1:+.1%})")


MJSD_T1 = "mjsd_joint_decoding/mjsd_table1_batch_cost.csv"
MJSD_T1_FIT = "theory_energy/mjsd_table1_energy_fit.csv"
MJSD_EQ2 = "theory_energy/mjsd_eq2_fitted_powers.csv"


@claim(DOCUMENT, "Table 1 batch size vs energy and time",
       (Artifact(MJSD_T1, MachineSpecific("speed", lambda rows: ("time per run at b = 16 / b = 1", num(
           pick(starting(rows, "source", "ours"), batch_size="16"), "time_per_run_vs_b1")))),
        Artifact(MJSD_T1_FIT, Exact("a fit to the paper's numbers")), Artifact(MJSD_EQ2, Exact())),
       "", Quote(SEED, "the energy consumption per run increases slightly"),
       "energy per run at the largest b over b = 1 above 1 and below b (it 'increases slightly': more than a run of "
       "one input, much less than b of them); no energy counter on the machine: undecided", measured=True)
def mjsd_table1(t: Tables) -> Outcome:
    rows = t.rows(MJSD_T1)
    ours_rows, paper_rows = starting(rows, "source", "ours"), starting(rows, "source", "paper")
    ours, paper = (max(rs, key=lambda r: num(r, "batch_size")) for rs in (ours_rows, paper_rows))
    b, energy = num(ours, "batch_size"), num(ours, "energy_per_run_vs_b1")
    said = (f"a run of b = {ours['batch_size']} takes {num(ours, 'time_per_run_vs_b1'):.2f}x a run of 1; energy "
            + (f"{energy:.2f}x" if energy is not None else "not measured (no energy counter)"))
    printed = (f"{num(paper, 'energy_per_run_vs_b1'):.2f}x energy, {num(paper, 'time_per_run_vs_b1'):.2f}x time per "
               f"run at b = {paper['batch_size']} (paper rows of the CSV)")
    if energy is None:
        return Outcome(said, UNDECIDED, "the sentence is about energy, and this machine exposes no energy counter "
                       "(RAPL or NVML): not measured, so not decided (time per run is shown)", printed)
    return judged(1 < energy < b, said, f"energy per run rises, by less than b = {ours['batch_size']} runs of one",
                  f"energy per run at b = {ours['batch_size']} is {energy:.2f}x b = 1's: "
                  + ("it does not rise" if energy <= 1 else f"not slightly: at least b = {ours['batch_size']} runs' "
                     "worth"), paper=printed)


MJSD_T2 = "mjsd_joint_decoding/mjsd_table2_methods.csv"
MJSD_T2_ENERGY = "theory_energy/mjsd_table2_energy_vs_speedup.csv"
MJSD_T2_RATIO = "theory_energy/mjsd_table2_predicted_ratio.csv"
MJSD_CLAIMS = "mjsd_joint_decoding/mjsd_claims.csv"
MJSD_T2_DECIDED_BY = ("mjsd.speedup_over_ar_sampling", "mjsd.perplexity_vs_bild")


def mjsd_speed(rows: list[Row]) -> tuple[str, float]:
    """The speed Table 2's machine-specific tolerance shows: MJSD's speedup, averaged over our task kinds."""
    mjsd = starting(starting(rows, "source", "ours"), "method", "MJSD")
    return "MJSD speedup, mean over kinds", mean(num(r, "speedup") for r in mjsd)


@claim(DOCUMENT, "Table 2 speed, speedup, energy/token and perplexity of greedy, speculative, BiLD, SpecTr and MJSD "
                 "on three task kinds and two model pairs",
       (Artifact(MJSD_T2, MachineSpecific(EXACT_DTYPE, first_row("perplexity", "AR's perplexity, first kind"))),
        Artifact(MJSD_T2, MachineSpecific("speed", mjsd_speed)),
        Artifact(MJSD_T2_ENERGY, Exact("the paper's numbers")), Artifact(MJSD_T2_RATIO, Exact())),
       "", Quote(SEED, "On average, the output perplexity of MJSD is 21.2"),
       "MJSD ≥ 1.5x AR sampling's speed and its perplexity ≥ 20% below BiLD's (95% paired bootstrap, both)",
       decided_by=MJSD_T2_DECIDED_BY)
def mjsd_table2(t: Tables) -> Outcome:
    claims = t.rows(MJSD_CLAIMS)
    paper_speed = starting(claims, "claim", "MJSD speedup over AR sampling")[0]["paper"]
    paper_ppl = starting(claims, "claim", "MJSD perplexity change vs BiLD")[0]["paper"]
    decision = decided(t, *MJSD_T2_DECIDED_BY)
    return from_verdict(decision, decision.text, "≥ 1.5x AR sampling with perplexity ≥ 20% below BiLD's",
                        "MJSD's Table 2 claims do not both hold on this CPU",
                        paper=f"{first_number(paper_speed):g}x speedup, {first_number(paper_ppl):g}% perplexity vs "
                              f"BiLD (mjsd_claims.csv)")


MJSD_FIG3 = "mjsd_joint_decoding/mjsd_fig3_accepted_per_iteration.csv"
MJSD_FIG3_DECIDED_BY = ("mjsd.accepted_per_iteration_over_speculative",)


@claim(DOCUMENT, "Fig. 3 accepted tokens per iteration",
       (Artifact(MJSD_FIG3, MachineSpecific(EXACT_DTYPE, first_row("ratio_mjsd_over_speculative",
                                                                   "MJSD over speculative, first kind"))),),
       "", Quote(SEED, "acceptance length of MJSD is on average 2.15"),
       "MJSD's accepted tokens per iteration over speculative's ≥ 1 (the paired ratio over prompts, 95% bootstrap)",
       decided_by=MJSD_FIG3_DECIDED_BY)
def mjsd_fig3(t: Tables) -> Outcome:
    rows = t.rows(MJSD_FIG3)
    by_kind = ", ".join(f"{r['kind']} {num(r, 'ratio_mjsd_over_speculative'):.2f}x" for r in rows)
    decision = decided(t, *MJSD_FIG3_DECIDED_BY)
    return from_verdict(decision, f"{decision.text}; by task kind (pooled): {by_kind}",
                        "MJSD accepts more tokens per iteration", "MJSD does not accept more tokens per iteration",
                        paper=f"{num(rows[0], 'paper_ratio_mean_over_its_columns'):g}x (column "
                              f"paper_ratio_mean_over_its_columns)")


MJSD_T3 = "mjsd_joint_decoding/mjsd_table3_beams.csv"
MJSD_T3_DECIDED_BY = ("mjsd.more_beams_better",)


@claim(DOCUMENT, "Table 3 number of beams",
       (Artifact(MJSD_T3, MachineSpecific(EXACT_DTYPE, first_row("perplexity", "perplexity at the fewest beams"))),
        Artifact(MJSD_T3, MachineSpecific("speed", lambda rows: ("tokens/s at the most beams", num(max(
            starting(rows, "source", "ours"), key=lambda r: num(r, "beams")), "tokens_per_s"))))),
       "", Quote(SEED, "Increasing the number of beams improves the quality of the draft tokens"),
       "from the fewest to the most beams, perplexity falls and tokens/s rise, each on a 95% paired bootstrap over "
       "the instruct prompts", decided_by=MJSD_T3_DECIDED_BY)
def mjsd_table3(t: Tables) -> Outcome:
    rows = t.rows(MJSD_T3)
    ours = sorted(starting(rows, "source", "ours"), key=lambda r: num(r, "beams"))
    llama = sorted(starting(rows, "source", "paper: Llama"), key=lambda r: num(r, "beams"))
    few, most = ours[0], ours[-1]
    decision = decided(t, *MJSD_T3_DECIDED_BY)
    said = (f"beams {few['beams']} → {most['beams']} (pooled): perplexity {num(few, 'perplexity'):.2f} → "
            f"{num(most, 'perplexity'):.2f}, {num(few, 'tokens_per_s'):.2f} → {num(most, 'tokens_per_s'):.2f} tok/s; "
            f"{decision.text}")
    return from_verdict(decision, said, "more beams give lower perplexity and more speed",
                        "more beams do not give both lower perplexity and more speed on this CPU",
                        paper=f"Llama-2: perplexity {num(llama[0], 'perplexity'):g} → "
                              f"{num(llama[-1], 'perplexity'):g}, {num(llama[0], 'tokens_per_s'):g} → "
                              f"{num(llama[-1], 'tokens_per_s'):g} tok/s (paper rows)")


MJSD_FIG4 = "mjsd_joint_decoding/mjsd_fig4_threshold.csv"
MJSD_FIG4_DECIDED_BY = ("mjsd.threshold_effect",)


@claim(DOCUMENT, "Fig. 4 acceptance threshold τ vs perplexity and speed",
       (Artifact(MJSD_FIG4, MachineSpecific(EXACT_DTYPE, first_row("perplexity", "perplexity at τ = 0"))),
        Artifact(MJSD_FIG4, MachineSpecific("speed", first_row("tokens_per_s", "tokens/s at τ = 0")))),
       "no values (a chart); speed drops with τ, perplexity rises near τ = 1",
       Quote(SEED, "the efficiency indeed drops when"),
       "tokens/s at the largest τ at most τ = 0's (the efficiency 'drops when τ increases'), and perplexity at the "
       "largest τ at least that at the next smaller τ (it 'increases when τ is close to 1'), each on a 95% paired "
       "bootstrap over the instruct prompts", decided_by=MJSD_FIG4_DECIDED_BY)
def mjsd_fig4(t: Tables) -> Outcome:
    rows = sorted(t.rows(MJSD_FIG4), key=lambda r: num(r, "tau"))
    decision = decided(t, *MJSD_FIG4_DECIDED_BY)
    said = (f"τ {rows[0]['tau']} → {rows[-1]['tau']} (pooled): {num(rows[0], 'tokens_per_s'):.2f} → "
            f"{num(rows[-1], 'tokens_per_s'):.2f} tok/s; perplexity by τ "
            + ", ".join(f"{num(r, 'perplexity'):.2f} ({r['tau']})" for r in rows) + f"; {decision.text}")
    return from_verdict(decision, said, "speed drops with τ and perplexity rises near τ = 1",
                        "speed does not drop with τ, or perplexity does not rise near τ = 1")


MJSD_T4 = "mjsd_joint_decoding/mjsd_table4_suites.csv"
MJSD_T5 = "mjsd_joint_decoding/mjsd_table5_hyperparameters.csv"
MJSD_T5_GRID = "mjsd_joint_decoding/mjsd_table5_validation_grid.csv"


@claim(DOCUMENT, "Tables 4–5 dataset statistics and hyper-parameters",
       (Artifact(MJSD_T4, Exact("prompt statistics")),
        Artifact(MJSD_T5, Exact("the hyper-parameters chosen on the validation grid, " + EXACT_DTYPE)),
        Artifact(MJSD_T5_GRID, MachineSpecific(EXACT_DTYPE, first_row("perplexity",
                                                                      "perplexity, first grid point")))),
       "dataset sizes and chosen hyper-parameters (no headline number)",
       Quote(SEED, "Table 4: Dataset Statistics"), "none: different data")
def mjsd_tables45(t: Tables) -> Outcome:
    suites = starting(t.rows(MJSD_T4), "source", "ours")
    chosen = [r for r in t.rows(MJSD_T5) if r["how_chosen"].startswith("best validation")]
    pairs = (("ours CP (instruct)", "paper Llama CP"), ("ours CA (chat)", "paper Llama CA"),
             ("ours CD (summarize)", "paper Llama CD"))
    same = sum(num(r, a) == num(r, b) for r in chosen for a, b in pairs)
    said = (f"{', '.join(r['test_prompts'] for r in suites)} test prompts per suite; {same} of "
            f"{len(chosen) * len(pairs)} validation-chosen hyper-parameters equal the paper's Llama choice")
    return Outcome(said, NOT_COMPARABLE, "our suites stand in for ChatGPT-Prompts, ChatAlpaca and CNN/DailyMail, "
                   "and our models for Llama-2/OPT: the statistics and the chosen values describe different data")


CLAIMS = (mjsd_fig1, mjsd_table1, mjsd_table2, mjsd_fig3, mjsd_table3, mjsd_fig4, mjsd_tables45)
