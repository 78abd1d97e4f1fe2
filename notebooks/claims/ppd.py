"""PPD (002): the paper *Hardware-Aware Parallel Prompt Decoding* (prompt tokens, ensemble prompt tokens, dynamic
sparse trees, and the comparison with Medusa).

Here are its claims, one per catalogue item of ``shared/seeds/README.md``, in the catalogue's order. Each is one block:
the artifact paths it reads, then its row (``@claim``: the catalogue item, the document's number and the words
that print it, the criterion, the artifacts and how each may move against the committed copy) above the judge
that decides it. A new item is one more block here and its name in ``CLAIMS``.
"""

from __future__ import annotations

from dataclasses import dataclass

from specrepro.metrics.verdict import MIN_PROMPTS

from .base import (EXACT, EXACT_DTYPE, FP32_NO_INTERVAL, NOT_REPRODUCED, UNDECIDED, Artifact, Exact, MachineSpecific,
                   Outcome, Quote, Regime, Tables, Unreadable, claim, first_row, in_regime, judged, judged_by_interval,
                   largest, num, pick, prediction_within, starting)

DOCUMENT = "PPD (002)"  # the catalogue's label
SEED = "002_8fd6c99e0d766e03.txt"  # under shared/seeds/


PPD_DIR = "ppd_parallel_prompt_decoding"
PPD_COST = f"{PPD_DIR}/ppd_fig7_fig1_memory_speed_training.csv"


@claim(DOCUMENT, "Fig. 1 memory/speedup/training cost",
       (Artifact(PPD_COST, Exact("parameter and memory counts", ("method", "extra_params", "extra_weight_MB",
                                                                  "extra_pct_of_target"))),
        Artifact(PPD_COST, MachineSpecific("speed", lambda rows: (
            "PPD speedup", num(pick(rows, method="PPD"), "speedup"))))),
       "0.0002% trainable parameters, trained in 16 GPU-hours; throughput like Medusa's",
       Quote(SEED, "enabling efficient training on a single A100-40GB GPU in just 16 hours"),
       "PPD's extra parameters under 1% of Medusa's, and its tokens/s at least Medusa's: the 95% paired bootstrap "
       f"interval of PPD over Medusa at or above 1 on at least {MIN_PROMPTS} prompts (below 1: not reproduced; else "
       "undecided)",
       pictures=(f"{PPD_DIR}/ppd_fig7_fig1_memory_speed_training.png",), measured=True)
def ppd_fig1(t: Tables) -> Outcome:
    rows = t.rows(PPD_COST)
    ppd, medusa = pick(rows, method="PPD"), pick(rows, method="Medusa")
    said = (f"PPD +{num(ppd, 'extra_pct_of_target'):.4f}% parameters (Medusa "
            f"{num(medusa, 'extra_pct_of_target'):.2f}%), {num(ppd, 'train_cpu_min'):.0f} CPU-min training; ")
    if num(ppd, "extra_params") >= 0.01 * num(medusa, "extra_params"):
        return Outcome(said, NOT_REPRODUCED, "PPD's extra parameters are not under 1% of Medusa's", basis=EXACT)
    if "over_medusa" not in ppd or num(ppd, "over_medusa_low95") is None:
        return Outcome(said + f"{num(ppd, 'speedup'):.2f}x vs Medusa {num(medusa, 'speedup'):.2f}x (pooled, no "
                       f"interval)", UNDECIDED, "PPD needs under 1% of Medusa's parameters; its speed against Medusa's "
                       "is not decided: the CSV carries pooled speedups without a paired interval")
    ratio, low, high, prompts = (num(ppd, c) for c in ("over_medusa", "over_medusa_low95", "over_medusa_high95",
                                                       "prompts"))
    said += f"PPD over Medusa {ratio:.2f}x [{low:.2f}, {high:.2f}] ({prompts:.0f} prompts, pooled tokens/s)"
    if prompts < MIN_PROMPTS:
        return Outcome(said, UNDECIDED, f"{prompts:.0f} prompts, fewer than {MIN_PROMPTS}: undecided whatever the "
                       f"interval")
    return judged_by_interval(low >= 1, high < 1, said, "PPD needs under 1% of Medusa's parameters and runs at least "
                              "as fast", "PPD needs under 1% of Medusa's parameters but runs slower than Medusa, the "
                              "whole interval below 1", "PPD needs under 1% of Medusa's parameters; its speed against "
                              "Medusa's: the interval straddles 1")


PPD_T1 = f"{PPD_DIR}/ppd_table1.csv"
PPD_MEDUSA_T1 = "medusa_trees/ppd_table1_medusa_rows.csv"
PPD_T1_THEORY = "theory_ppd/ppd_table1_tree_shape.csv"
PPD_FIG8A = f"{PPD_DIR}/ppd_fig8a_accept_length.csv"
PPD_MEDUSA_FIG8A = "medusa_trees/ppd_fig8a_medusa_accept_length_vs_tree_size.csv"
FIG8A_TAU = MachineSpecific(EXACT_DTYPE, first_row("tau_dynamic", "τ of the dynamic tree, smallest size"))
MEDUSA_FIG8A_TAU = MachineSpecific(EXACT_DTYPE, first_row("tau_sparse", "τ of the sparse tree, smallest size"))


@claim(DOCUMENT, "Table 1 throughput, accept length, forward latency, quality, trainable parameters, input length",
       (Artifact(PPD_T1, MachineSpecific("speed; Medusa and vanilla rows in bf16", lambda rows: (
           "PPD τ", num(starting(rows, "method", "PPD")[0], "tau")))),
        Artifact(PPD_MEDUSA_T1, MachineSpecific("speed and bf16", lambda rows: (
            "Medusa τ", num(starting(rows, "method", "Medusa")[0], "tau")))),
        Artifact(PPD_T1_THEORY, Exact()), Artifact(PPD_FIG8A, FIG8A_TAU),
        Artifact(PPD_MEDUSA_FIG8A, MEDUSA_FIG8A_TAU)),
       "", Quote(SEED, "V-7B Vanilla 39.2 1.00 0.026 5.99 NA NA 1"),
       "PPD's accept length τ above Medusa's at every tree size both were measured at (Fig. 8(a) runs), and PPD's "
       "throughput above Medusa's and plain decoding's: not reproduced when the 95% paired bootstrap interval of PPD's "
       f"tokens/s over either lies below 1 on at least {MIN_PROMPTS} prompts (Fig. 1's and Fig. 4's columns); the τ "
       "part, on the τ grid's few prompts without an interval, cannot make it reproduced (quality: not measured, no "
       "MT-Bench judge)",
       measured=True)
def ppd_table1(t: Tables) -> Outcome:
    rows = t.rows(PPD_T1)
    ours = starting(rows, "model", "smollm2")
    ppd, medusa = starting(ours, "method", "PPD")[0], starting(ours, "method", "Medusa")[0]
    paper_ppd = pick(rows, model="Vicuna-7B (paper)", method="PPD")
    paper_medusa = pick(rows, model="Vicuna-7B (paper)", method="Medusa")
    # Table 1's own rows use different trees, so τ is also compared at the tree sizes both Fig. 8(a) runs measured.
    ppd_tau = {r["tree_size"]: num(r, "tau_dynamic") for r in t.rows(PPD_FIG8A)}
    medusa_tau = {r["tree_size"]: num(r, "tau_sparse") for r in t.rows(PPD_MEDUSA_FIG8A)}
    common = sorted(set(ppd_tau) & set(medusa_tau), key=float)
    if not common:
        raise Unreadable("no tree size measured for both PPD and Medusa in Fig. 8(a)")
    said = (f"Table 1 rows: τ PPD {num(ppd, 'tau'):.2f} (tree {ppd['S_tr']}) vs Medusa {num(medusa, 'tau'):.2f} "
            f"(tree {medusa['S_tr']}); at equal tree sizes {', '.join(common)}: PPD "
            f"{' / '.join(f'{ppd_tau[n]:.2f}' for n in common)} vs Medusa "
            f"{' / '.join(f'{medusa_tau[n]:.2f}' for n in common)}")
    vanilla = starting(ours, "method", "vanilla")[0]
    speeds = {name: num(row, "throughput_tok_s")
              for name, row in (("PPD", ppd), ("Medusa", medusa), ("vanilla", vanilla))}
    said += "; tokens/s " + ", ".join(f"{name} {v:.2f}" for name, v in speeds.items())
    # The Medusa notebook runs its own Table 1 rows (another run, at another time): both are shown, and the one
    # decided on is this CSV's, whose rows ran in the same bench as PPD's.
    other = starting(starting(t.rows(PPD_MEDUSA_T1), "model", "smollm2"), "method", "Medusa")[0]
    said += (f" (ppd_table1.csv, one run; the Medusa notebook's own run: τ {num(other, 'tau'):.2f}, "
             f"{num(other, 'throughput_tok_s'):.2f} tokens/s)")
    longer = all(ppd_tau[n] > medusa_tau[n] for n in common)
    faster = speeds["PPD"] > max(speeds["Medusa"], speeds["vanilla"])
    paper = (f"Vicuna-7B: τ PPD {num(paper_ppd, 'tau'):g} vs Medusa {num(paper_medusa, 'tau'):g}, "
             f"{num(paper_ppd, 'throughput_tok_s'):g} vs {num(paper_medusa, 'throughput_tok_s'):g} tokens/s "
             f"(paper rows of ppd_table1.csv)")
    cost, fig4 = pick(t.rows(PPD_COST), method="PPD"), pick(t.rows(PPD_FIG4), method="ppd")
    if "low95" in fig4 and num(cost, "over_medusa_low95") is not None:  # the throughputs' paired intervals
        over = {"Medusa": [num(cost, c) for c in ("over_medusa", "over_medusa_low95", "over_medusa_high95")],
                "vanilla": [num(fig4, c) for c in ("speedup", "low95", "high95")]}
        said += "; PPD over " + ", ".join(f"{k} {v[0]:.2f}x [{v[1]:.2f}, {v[2]:.2f}]" for k, v in over.items()) + (
            f" ({num(fig4, 'prompts'):.0f} prompts)")
        slower = [k for k, v in over.items() if v[2] < 1]
        if num(fig4, "prompts") < MIN_PROMPTS:
            return Outcome(said, UNDECIDED, f"fewer than {MIN_PROMPTS} prompts", paper)
        if slower:
            return judged_by_interval(False, True, said, "", f"PPD's throughput is below {' and '.join(slower)}'s, "
                                      "the whole interval below 1", "", paper)
        return Outcome(said, UNDECIDED, "the throughputs' intervals do not show PPD slower; its accept length is "
                       "compared on the τ grid's few prompts without an interval, which decides nothing", paper)
    return judged(longer and faster, said,
                  f"PPD accepts more per step than Medusa at every common tree size and runs fastest (τ "
                  f"{num(ppd, 'tau'):.2f} vs the paper's {num(paper_ppd, 'tau'):g}, on a 135M model)",
                  ("PPD accepts more per step than Medusa" if longer else
                   "Medusa accepts as much or more per step at some tree size")
                  + ("" if faster else f", but PPD's throughput ({speeds['PPD']:.2f} tokens/s) is below "
                     + " and ".join(f"{k}'s ({v:.2f})" for k, v in speeds.items()
                                    if k != "PPD" and v >= speeds["PPD"])),
                  paper=f"Vicuna-7B: τ PPD {num(paper_ppd, 'tau'):g} vs Medusa {num(paper_medusa, 'tau'):g}, "
                        f"{num(paper_ppd, 'throughput_tok_s'):g} vs {num(paper_medusa, 'throughput_tok_s'):g} tokens/s "
                        f"(paper rows of ppd_table1.csv)")


PPD_FIG4 = f"{PPD_DIR}/ppd_fig4_speedup_vs_methods.csv"


@claim(DOCUMENT, "Fig. 4 speedup vs other parallel decoders",
       (Artifact(PPD_FIG4, MachineSpecific("speed", lambda rows: (
           "PPD speedup", num(pick(rows, method="ppd"), "speedup")))),),
       "PPD up to 13.8% over Medusa, 2–3x the other parallel decoders",
       Quote(SEED, "PPD achieves speedups up to 13.8% higher than Medusa"),
       "PPD the fastest of the methods compared: PPD's tokens/s over each other method's, its 95% paired bootstrap "
       f"interval over at least {MIN_PROMPTS} prompts above 1 for every method (below 1 for one: not reproduced; "
       "else undecided). The paper's speedups come from memory-bound steps (a 7B model on a GPU); where our β(5) "
       "says ours is not, the row is 'other regime', decided instead on whether the speedup our bench predicts for "
       "each method (its measured τ or α, its drafting and the device profile) lies within that method's interval",
       pictures=(f"{PPD_DIR}/ppd_fig4_fig5_speedup_and_throughput.png",), measured=True)
def ppd_fig4(t: Tables) -> Outcome:
    outcome = ppd_fig4_direction(t)
    rows = t.rows(PPD_FIG4)
    if "beta5" not in rows[0] or "low95" not in rows[0]:  # (a run written before the regime columns)
        return outcome
    step = pick(rows, method="ppd")
    regime = Regime({5: num(step, "beta5")}, num(step, "step_ms"),
                    num(step, "floor_ms") if step["floor_ms"] not in ("", "None") else None)
    return in_regime(outcome, regime, lambda: prediction_within(
        [(r["method"], num(r, "predicted_speedup"), num(r, "low95"), num(r, "high95")) for r in rows
         if r["predicted_speedup"] not in ("", "None")],
        "each method's speedup over AR as the bench predicts it from its τ (or α), drafting and device profile"))


def ppd_fig4_direction(t: Tables) -> Outcome:
    """Fig. 4 on the paper's own claim: PPD faster than every other method compared."""
    rows = t.rows(PPD_FIG4)
    ppd = pick(rows, method="ppd")
    others = [r for r in rows if r is not ppd]
    medusa = pick(rows, method="medusa")
    gain = num(ppd, "speedup") / num(medusa, "speedup") - 1
    if "ppd_over_low95" not in ppd:  # (a run written before the intervals: its point estimates alone)
        fastest = max(rows, key=lambda r: num(r, "speedup"))
        said = ", ".join(f"{r['method']} {num(r, 'speedup'):.2f}x" for r in rows)
        return judged(fastest is ppd, said, f"PPD is the fastest ({gain:+.0%} over Medusa)",
                      f"{fastest['method']} runs {num(fastest, 'speedup'):.2f}x, PPD {num(ppd, 'speedup'):.2f}x on "
                      f"this CPU (PPD {gain:+.0%} over Medusa)")
    said = ", ".join(f"{r['method']} {num(r, 'speedup'):.2f}x [{num(r, 'low95'):.2f}, {num(r, 'high95'):.2f}]"
                     for r in rows) + "; PPD over " + ", ".join(
        f"{r['method']} {num(r, 'ppd_over'):.2f}x [{num(r, 'ppd_over_low95'):.2f}, {num(r, 'ppd_over_high95'):.2f}]"
        for r in others) + f" ({num(ppd, 'prompts'):.0f} prompts)"
    if num(ppd, "prompts") < MIN_PROMPTS:
        return Outcome(said, UNDECIDED, f"fewer than {MIN_PROMPTS} prompts: undecided whatever the interval")
    slower = [r["method"] for r in others if num(r, "ppd_over_high95") < 1]
    return judged_by_interval(all(num(r, "ppd_over_low95") > 1 for r in others), bool(slower), said,
                              f"PPD is faster than every other method ({gain:+.0%} over Medusa)",
                              f"PPD is slower than {', '.join(slower)}, the whole interval below 1 (PPD {gain:+.0%} "
                              f"over Medusa on this CPU)", "PPD against the fastest other method: an interval "
                              "straddles 1")


PPD_FIG5 = f"{PPD_DIR}/ppd_fig5_throughput_by_task.csv"


@claim(DOCUMENT, "Fig. 5 throughput by task",
       (Artifact(PPD_FIG5, MachineSpecific("speed", largest("ppd_speedup", "suite"))),),
       "2.12x to 2.49x across tasks",
       Quote(SEED, "achieves consistent walltime speedup ratios from 2.12"),
       "PPD's speedup above 1x on every task: each task's 95% paired bootstrap interval over at least "
       f"{MIN_PROMPTS} of its prompts above 1 (one task's below 1: not reproduced; else undecided)",
       pictures=(f"{PPD_DIR}/ppd_fig4_fig5_speedup_and_throughput.png",), measured=True)
def ppd_fig5(t: Tables) -> Outcome:
    rows = t.rows(PPD_FIG5)
    tasks = [r for r in rows if r["suite"] != "all"]
    said = ", ".join(f"{r['suite']} {num(r, 'ppd_speedup'):.2f}x" for r in rows)
    if "low95" not in rows[0]:  # (a run written before the intervals: its point estimates alone)
        slow = [f"{r['suite']} {num(r, 'ppd_speedup'):.2f}x" for r in tasks if num(r, "ppd_speedup") <= 1]
        return judged(not slow, said, "PPD is faster than plain decoding on every task",
                      f"PPD is slower than plain decoding on this CPU: {', '.join(slow)}")
    bounds = lambda r: "[—]" if r["low95"] in ("", "None") else f"[{num(r, 'low95'):.2f}, {num(r, 'high95'):.2f}]"
    said = ", ".join(f"{r['suite']} {num(r, 'ppd_speedup'):.2f}x {bounds(r)} ({num(r, 'prompts'):.0f} prompts)"
                     for r in rows)
    enough = [r for r in tasks if num(r, "prompts") >= MIN_PROMPTS and r["low95"] not in ("", "None")]
    slow = [r["suite"] for r in enough if num(r, "high95") < 1]
    if slow:
        return judged_by_interval(False, True, said, "", f"PPD is slower than plain decoding on {', '.join(slow)}, "
                                  "the whole interval below 1", "")
    if len(enough) < len(tasks):
        return Outcome(said, UNDECIDED, f"{len(tasks) - len(enough)} of {len(tasks)} tasks have fewer than "
                       f"{MIN_PROMPTS} prompts: undecided whatever their intervals (the pooled row says how PPD does "
                       "over every task together)")
    return judged_by_interval(all(num(r, "low95") > 1 for r in tasks), False, said,
                              "PPD is faster than plain decoding on every task", "",
                              "some task's interval straddles 1")


PPD_FIG6 = f"{PPD_DIR}/ppd_fig6_topk_accuracy.csv"
PPD_FIG6_MEDUSA = "medusa_trees/ppd_fig6_medusa_topk_accuracy.csv"


@claim(DOCUMENT, "Fig. 6 accumulated top-k accuracy by token distance (PPD vs Medusa, 100 vs 1 EPT, model size)",
       (Artifact(PPD_FIG6, Exact(FP32_NO_INTERVAL)), Artifact(PPD_FIG6_MEDUSA, Exact(FP32_NO_INTERVAL))),
       "", Quote(SEED, "consistently outperforms Medusa in accuracy across all token positions"),
       "PPD's accuracy above Medusa's at every token distance and every k measured ('consistently outperforms "
       "Medusa in accuracy across all token positions'): every PPD − Medusa gap's 95% interval over the held-out "
       "conversations above 0 (one wholly below 0: not reproduced; else undecided); the top-10 gap's change with "
       "distance is shown ('widens with the increased token distance'), not decided", measured=True)
def ppd_fig6(t: Tables) -> Outcome:
    rows = t.rows(PPD_FIG6)
    top10 = sorted((r for r in rows if r["k"] == "10"), key=lambda r: num(r, "distance"))
    if len(top10) < 2:
        raise Unreadable(f"fewer than 2 distances with top-10 rows in {PPD_FIG6}")
    gaps = [num(r, "ppd_zoo") - num(r, "medusa_zoo") for r in top10]
    said = (f"top-10 gap PPD − Medusa by distance: {', '.join(f'{g:+.3f}' for g in gaps)}; top-1 @1 "
            f"{num(pick(rows, distance='1', k='1'), 'ppd_zoo'):.3f}")
    paper = (f"top-10 gap 0.03 → 0.12 with distance (quoted); top-1 @1 "
             f"{num(pick(rows, distance='1', k='1'), 'ppd_paper_vicuna7b'):g} on Vicuna-7B (column ppd_paper_vicuna7b)")
    if "gap_low95" not in rows[0]:  # (a run written before the intervals: its point estimates alone)
        behind = [f"distance {r['distance']} top-{r['k']} {num(r, 'ppd_zoo') - num(r, 'medusa_zoo'):+.3f}"
                  for r in rows if num(r, "ppd_zoo") <= num(r, "medusa_zoo")]
        return judged(not behind, said, "PPD ahead of Medusa at every distance and k",
                      f"PPD is not ahead at {len(behind)} (distance, k): {'; '.join(behind[:4])}", paper=paper)
    behind = [f"distance {r['distance']} top-{r['k']} {num(r, 'gap'):+.3f} [{num(r, 'gap_low95'):+.3f}, "
              f"{num(r, 'gap_high95'):+.3f}]" for r in rows if num(r, "gap_high95") < 0]
    ahead = sum(num(r, "gap_low95") > 0 for r in rows)
    said += (f"; PPD ahead (interval above 0) at {ahead} of {len(rows)} (distance, k), behind (below 0) at "
             f"{len(behind)}, over {num(rows[0], 'units'):.0f} held-out conversations")
    if num(rows[0], "units") < MIN_PROMPTS:
        return Outcome(said, UNDECIDED, f"fewer than {MIN_PROMPTS} held-out conversations", paper)
    return judged_by_interval(ahead == len(rows), bool(behind), said, "PPD ahead of Medusa at every distance and k",
                              f"PPD is behind Medusa at {len(behind)} (distance, k): {'; '.join(behind[:4])}",
                              f"PPD ahead at {ahead} of {len(rows)} (distance, k); the other gaps' intervals "
                              "straddle 0",
                              paper)


FIG7_RATIO = 0.004e-2  # "The memory overhead of PPD is just 0.004% of Medusa's"


@claim(DOCUMENT, "Fig. 7 memory",
       (Artifact(PPD_COST, Exact("parameter and memory counts", ("method", "extra_params", "extra_weight_MB"))),),
       "PPD's memory overhead 0.004% of Medusa's",
       Quote(SEED, "The memory overhead of PPD is just 0.004% of Medusa"),
       f"PPD's extra weights at most {2.5 * FIG7_RATIO:.3%} of Medusa's: the document's {FIG7_RATIO:.3%}, within "
       "its order of magnitude (a count, exact)",
       pictures=(f"{PPD_DIR}/ppd_fig7_fig1_memory_speed_training.png",))
def ppd_fig7(t: Tables) -> Outcome:
    rows = t.rows(PPD_COST)
    ppd, medusa = pick(rows, method="PPD"), pick(rows, method="Medusa")
    ratio = num(ppd, "extra_weight_MB") / num(medusa, "extra_weight_MB")
    said = (f"PPD's extra weights are {ratio:.3%} of Medusa's ({num(ppd, 'extra_params'):.0f} against "
            f"{num(medusa, 'extra_params'):.0f} parameters)")
    return judged(ratio <= 2.5 * FIG7_RATIO, said, f"within the document's order of magnitude ({FIG7_RATIO:.3%})",
                  f"{ratio / FIG7_RATIO:.0f}x the document's {FIG7_RATIO:.3%}: our Medusa heads are residual blocks "
                  "that share the target's LM head, where the document's Medusa carries heads that 'scale with "
                  "vocabulary size', so its ratio is far smaller than ours")


PPD_FIG8B = f"{PPD_DIR}/ppd_fig8b_theoretical_speedup.csv"
PPD_FIG8C = f"{PPD_DIR}/ppd_fig8c_measured_speedup.csv"
PPD_FIG8_THEORY = "theory_ppd/ppd_fig8a_accept_length_vs_tree_size.csv"
PPD_FIG8_BEST = "theory_ppd/ppd_fig8b_best_tree_size.csv"


@claim(DOCUMENT, "Fig. 8 dynamic vs static vs random tree, theoretical and real speedup vs tree size",
       (Artifact(PPD_FIG8A, FIG8A_TAU),
        Artifact(PPD_FIG8B, MachineSpecific("speed", largest("speedup_theory_tau", "tree_size"))),
        Artifact(PPD_FIG8C, MachineSpecific("speed", largest("measured_speedup", "tree_size"))),
        Artifact(PPD_FIG8_THEORY, Exact()), Artifact(PPD_FIG8_BEST, Exact())),
       "no values (charts); dynamic trees lead, the theory's best size is the fastest",
       Quote(SEED, "indeed results in the greatest actual speedup observed"),
       "dynamic τ above static and random at every size, and, of at least 3 measured sizes on the theory's grid, the "
       "theory's best the fastest: not reproduced when another size's tokens/s over the theory's best has its 95% "
       f"paired bootstrap interval above 1 on at least {MIN_PROMPTS} prompts; the τ part, without an interval, "
       "cannot make it reproduced",
       pictures=(f"{PPD_DIR}/ppd_fig8bc_speedup_vs_tree_size.png",), measured=True)
def ppd_fig8(t: Tables) -> Outcome:
    trees = t.rows(PPD_FIG8A)
    dynamic_best = all(num(r, "tau_dynamic") > max(num(r, "tau_static"), num(r, "tau_random")) for r in trees)
    every = t.rows(PPD_FIG8C)
    sizes = {r["tree_size"] for r in every}
    overall = max(every, key=lambda r: num(r, "measured_speedup"))  # of every measured size, the grid's or not
    theory = [r for r in t.rows(PPD_FIG8B) if r["tree_size"] in sizes]
    # the contest is among the sizes the theory also has (the hardware-aware size may be off its grid)
    measured = [r for r in every if r["tree_size"] in {x["tree_size"] for x in theory}] if theory else every
    fastest = max(measured, key=lambda r: num(r, "measured_speedup"))
    everywhere = (f"fastest of every measured size {overall['tree_size']} ({num(overall, 'measured_speedup'):.2f}x)"
                  f" of sizes {', '.join(sorted(sizes, key=int))}")
    if not theory:  # the measured sizes (the device's hardware-aware size and the fixed ones) are off the theory grid
        lead = "leads" if dynamic_best else "does not lead"
        return Outcome(f"the dynamic tree's τ {lead} at every size; measured at tree sizes "
                       f"{', '.join(sorted(sizes, key=int))}, fastest {fastest['tree_size']} "
                       f"({num(fastest, 'measured_speedup'):.2f}x); the theory grid holds none of these sizes",
                       UNDECIDED, "no measured size is on the theory's size grid, so the theory's best size cannot "
                       "be checked against a measured one")
    theory_best = max(theory, key=lambda r: num(r, "speedup_theory_tau"))["tree_size"]
    said = (f"dynamic τ above static and random at {sum(num(r, 'tau_dynamic') > num(r, 'tau_static') for r in trees)}"
            f" of {len(trees)} sizes; on the theory's grid ({', '.join(r['tree_size'] for r in measured)}): the "
            f"theory's best {theory_best}, the fastest measured {fastest['tree_size']} "
            f"({num(fastest, 'measured_speedup'):.2f}x); {everywhere}")
    holds = "the dynamic tree's lead holds" if dynamic_best else "the dynamic tree does not lead everywhere"
    if not dynamic_best:
        return Outcome(said, NOT_REPRODUCED, holds)
    if len(theory) < 3:
        return Outcome(said, UNDECIDED, f"{holds}; {len(theory)} measured sizes on the theory's grid, fewer than 3: "
                       "whether the theory's best is the fastest is not tested")
    picked = num(pick(measured, tree_size=theory_best), "measured_speedup")
    if "over_theory_best_low95" not in measured[0]:  # (a run written before the intervals: its point estimates)
        return judged(theory_best == fastest["tree_size"], said, "dynamic trees lead and the theory's tree size is "
                      "the fastest", f"{holds}; the theory picks size {theory_best} ({picked:.2f}x measured) but size "
                      f"{fastest['tree_size']} runs {num(fastest, 'measured_speedup'):.2f}x on this CPU")
    others = [r for r in measured if r["tree_size"] != theory_best]
    said += "; over the theory's best: " + ", ".join(
        f"size {r['tree_size']} {num(r, 'over_theory_best'):.2f}x [{num(r, 'over_theory_best_low95'):.2f}, "
        f"{num(r, 'over_theory_best_high95'):.2f}]" for r in others) + f" ({num(others[0], 'prompts'):.0f} prompts)"
    beaten = [r["tree_size"] for r in others if num(r, "over_theory_best_low95") > 1]
    if num(others[0], "prompts") < MIN_PROMPTS:
        return Outcome(said, UNDECIDED, f"{holds}; fewer than {MIN_PROMPTS} prompts: undecided whatever the interval")
    if beaten:
        return judged_by_interval(False, True, said, "", f"{holds}; the theory picks size {theory_best} but size(s) "
                                  f"{', '.join(beaten)} run faster, the whole interval above 1", "")
    wins = all(num(r, "over_theory_best_high95") < 1 for r in others)
    return Outcome(said, UNDECIDED, f"{holds} (τ on the grid's few prompts, without an interval); the theory's size "
                   f"{theory_best} is " + ("faster than every other measured size, each interval below 1, but the "
                                           "τ part decides nothing" if wins else
                                           "not told apart from every other size: an interval straddles 1"))


@dataclass(frozen=True)
class Ablation:
    """One PPD ablation table: ours and the paper's baseline and variant rows (column 'row')."""
    table: str
    csv: str
    change: str
    ours: tuple[str, str]  # (baseline, variant)
    paper: tuple[str, str]


ABLATIONS = (
    Ablation("Table 2", f"{PPD_DIR}/ppd_table2_ablation.csv", "more EPTs", ("ept1", "ept3"),
             ("paper: 1 EPT", "paper: 100 EPT")),
    Ablation("Table 3", f"{PPD_DIR}/ppd_table3_ablation.csv", "knowledge distillation", ("ept1-no-kd", "ept1"),
             ("paper: 1 EPT, no KD", "paper: 1 EPT, KD, 12 epochs")),
    Ablation("Table 4", f"{PPD_DIR}/ppd_table4_ablation.csv", "prefix tuning", ("ept1", "ept1-prefix-tuning"),
             ("paper: no prefix tuning", "paper: prefix tuning")),
    Ablation("Table 5", f"{PPD_DIR}/ppd_table5_ablation.csv", "custom head (2-stage)", ("ept1", "ept1-head-2-stage"),
             ("paper: no custom head", "paper: custom head, 2-stage")),
    Ablation("Table 6", f"{PPD_DIR}/ppd_table6_ablation.csv", "decoder mask", ("ept2", "ept2-decoder-mask"),
             ("paper: ensemble mask", "paper: decoder mask")),
    Ablation("Table 7", f"{PPD_DIR}/ppd_table7_ablation.csv", "learned weights", ("ept2", "ept2-learned-weights"),
             ("paper: average", "paper: learned weight")),
    Ablation("Table 8", f"{PPD_DIR}/ppd_table8_ablation.csv", "2 exits", ("ept1", "ept1-2-exits"),
             ("paper: no multi-exit", "paper: 2 exits")),
)
ACCURACY = "@1 top-1"  # the column every ablation table compares


@claim(DOCUMENT, "Tables 2–8 ablations (EPT count, KD/epochs/batch, prefix tuning, custom head, attention masks, "
                 "aggregation, multi-exit)",
       tuple(Artifact(a.csv, Exact(FP32_NO_INTERVAL)) for a in ABLATIONS),
       "", Quote(SEED, "Table 2: Prediction Accuracy of PPD with different EPTs"),
       "each ablation changes top-1 @1 in the paper's direction", measured=True)
def ppd_ablations(t: Tables) -> Outcome:
    agree, disagree, paper, sizes = [], [], [], []
    for a in ABLATIONS:
        rows = t.rows(a.csv)
        ours = [num(pick(rows, row=label), ACCURACY) for label in a.ours]
        theirs = [num(pick(rows, row=label), ACCURACY) for label in a.paper]
        mine, printed = ours[1] - ours[0], theirs[1] - theirs[0]
        if (mine > 0) == (printed > 0):
            agree.append(f"{a.table} {a.change} {mine:+.3f}")
        else:
            disagree.append(f"{a.table} {a.change} {mine:+.3f}")
            sizes.append(abs(mine))
        paper.append(f"{a.table} {printed:+.3f}")
    steps = pick(t.rows(ABLATIONS[0].csv), row=ABLATIONS[0].ours[0])["steps"]
    said = (f"{len(agree)} of {len(ABLATIONS)} directions agree ({'; '.join(agree)}); disagree: "
            f"{'; '.join(disagree) or 'none'}")
    return judged(not disagree, said, "every ablation moves top-1 @1 the paper's way",
                  f"{len(disagree)} ablations go the other way, by {min(sizes, default=0):.3f} to "
                  f"{max(sizes, default=0):.3f} in top-1 @1, with prompt tokens trained {steps} steps on a 135M model",
                  paper="change in top-1 @1: " + ", ".join(paper) + " (paper rows of each CSV)")


PPD_FIG9 = f"{PPD_DIR}/ppd_fig9_training_loss.csv"
FIG9_START, FIG9_END = 5, 2  # "starting above 5" and falling "below 2" (the document's Fig. 9 text)


@claim(DOCUMENT, "Fig. 9 training loss", (Artifact(PPD_FIG9, Exact(FP32_NO_INTERVAL)),),
       "loss starts above 5, falls below 2 within the first epoch", Quote(SEED, "starting above 5"),
       f"the zoo run's loss starts above {FIG9_START} and its last 50 steps average below {FIG9_END}, as the "
       f"document's curve does", measured=True)
def ppd_fig9(t: Tables) -> Outcome:
    r = t.rows(PPD_FIG9)[0]
    first, last = num(r, "first_loss"), num(r, "last_50_mean")
    said = (f"{r['run']}: {first:.2f} → {last:.2f} (mean of the last 50 of {r['steps']} steps), validation "
            f"{num(r, 'final_val_loss'):.2f}")
    misses = ([f"starts at {first:.2f}, not above {FIG9_START}"] if first <= FIG9_START else []) + (
        [f"ends at {last:.2f}, not below {FIG9_END}"] if last >= FIG9_END else [])
    return judged(not misses, said, f"starts above {FIG9_START} and falls below {FIG9_END}",
                  "; ".join(misses) + f" (the loss falls by {first - last:.2f}; a 135M target's prompt tokens, "
                  f"{r['steps']} steps, not Vicuna's)")


CLAIMS = (ppd_fig1, ppd_table1, ppd_fig4, ppd_fig5, ppd_fig6, ppd_fig7, ppd_fig8, ppd_ablations, ppd_fig9)
