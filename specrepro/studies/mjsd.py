"""The measuring code of ``notebooks/mjsd_joint_decoding.ipynb``: the MJSD paper's (seed 000) Tables 1–5 and
Figs. 1, 3, 4 on our pair, its printed numbers, and its claims decided on ours (a paired bootstrap over prompts,
``specrepro.metrics.verdict``).

Method parameters travel in bench variant labels (``mjsd:g4:b8:tau0.1``, ``bild:g10:f0.9:r2``, ``spectr:g4:m4``,
``mjgd:g2:b8``), never as ``BenchConfig`` fields.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

import numpy as np

from ..run.bench_types import BenchPrompt, BenchResult
from ..run.variants import BenchConfig
from ..core.executor import ExecutorConfig
from ..core import stats
from ..metrics.verdict import Verdict, all_of, decide
from ..engine.models import LoadedModel
from .common import StudyCache, records_of, rows_of

# The paper's Table 5 (Llama-2, ChatGPT-Prompts column): γ, MJSD's beams and threshold τ, BiLD's fallback τ1 and
# rollback τ2 (γ = 10), SpecTr's number of drafts m.
GAMMA, BILD_GAMMA = 4, 10
BEAMS, TAU = 8, 0.1
TAU1, TAU2 = 0.9, 2.0
SPECTR_M = 4

METHODS5 = ("greedy", "speculative", "BiLD", "SpecTr", "MJSD")  # the paper's Table 2 columns
PAPER_T2 = {  # Table 2, means of four repeats: (kind, model) -> metric -> values in METHODS5 order
    ("instruct", "Llama-2"): {"speed": (22.6, 36.8, 34.4, 45.1, 63.0), "speedup": (1.00, 1.63, 1.52, 1.99, 2.78),
                              "energy": (11.7, 6.62, 7.45, 5.17, 3.38), "perplexity": (3.74, 3.64, 3.15, 3.64, 2.06)},
    ("instruct", "OPT"): {"speed": (22.4, 33.8, 31.5, 38.0, 55.8), "speedup": (1.00, 1.51, 1.41, 1.70, 2.50),
                          "energy": (13.2, 7.48, 8.75, 6.08, 3.61), "perplexity": (5.49, 5.47, 4.51, 5.27, 3.00)},
    ("chat", "Llama-2"): {"speed": (22.0, 31.6, 28.8, 27.7, 44.1), "speedup": (1.00, 1.43, 1.31, 1.26, 2.00),
                          "energy": (11.2, 6.98, 7.99, 7.20, 4.72), "perplexity": (2.11, 2.13, 1.95, 2.15, 1.88)},
    ("chat", "OPT"): {"speed": (23.8, 35.6, 38.5, 28.4, 49.6), "speedup": (1.00, 1.49, 1.62, 1.19, 2.08),
                      "energy": (11.3, 5.74, 5.12, 6.24, 4.03), "perplexity": (3.28, 3.32, 2.60, 3.16, 2.07)},
    ("summarize", "Llama-2"): {"speed": (21.7, 30.7, 30.5, 25.0, 44.2), "speedup": (1.00, 1.41, 1.41, 1.15, 2.04),
                               "energy": (11.3, 7.07, 7.41, 8.22, 4.80), "perplexity": (2.88, 2.87, 2.93, 3.06, 2.63)},
    ("summarize", "OPT"): {"speed": (23.3, 31.7, 30.9, 23.7, 43.6), "speedup": (1.00, 1.36, 1.32, 1.01, 1.87),
                           "energy": (11.5, 6.37, 6.71, 7.31, 4.86), "perplexity": (3.93, 3.97, 3.74, 4.04, 3.17)},
}
PAPER_MODELS = {"Llama-2": "Llama-2-13B / Llama-68M, L40", "OPT": "OPT-13B / OPT-125M, L40"}
PAPER_T1 = [  # OPT-13B on two A10s: batch size, energy (J), energy/run, energy/input, time (s), time/run, time/input
    (1, 42450, 14.1, 14.1, 1129, 0.376, 0.376), (2, 49621, 16.5, 8.26, 1191, 0.397, 0.198),
    (4, 53325, 17.7, 4.43, 1178, 0.392, 0.098), (8, 59210, 19.7, 2.46, 1211, 0.403, 0.050),
    (16, 74058, 24.7, 1.54, 1255, 0.418, 0.026)]
PAPER_T3 = {  # ChatGPT-Prompts, MJSD with 2/4/6/8 beams: speed (token/s), energy (J/token), perplexity
    "Llama-2": {2: (55.9, 2.43, 2.44), 4: (59.9, 2.25, 2.12), 6: (60.2, 2.22, 2.14), 8: (61.3, 2.20, 2.10)},
    "OPT": {2: (51.0, 2.50, 3.63), 4: (54.1, 2.32, 3.16), 6: (54.3, 2.36, 3.42), 8: (55.9, 2.30, 3.19)}}
PAPER_T4 = {"instruct": (360, 25.2), "chat": (43081, 277.7), "summarize": (11490, 3967.1)}  # test inputs, input len
PAPER_T5 = {  # columns Llama CP, OPT CP, Llama CA, OPT CA, Llama CD, OPT CD
    "speculative γ": (4,) * 6, "SpecTr γ": (4,) * 6, "SpecTr m": (4, 4, 2, 2, 4, 2), "BiLD γ": (10,) * 6,
    "BiLD fallback τ1": (0.9, 0.9, 0.9, 0.3, 0.9, 0.3), "BiLD rollback τ2": (2, 2, 1, 2, 3, 2), "MJSD γ": (4,) * 6,
    "MJSD beams": (8,) * 6, "MJSD τ": (0.1,) * 6}
PAPER_CLAIMS = {"mjsd_speedup": 2.21, "mjsd_ppl_change": -0.212, "mjsd_over_speculative": 1.49,
                "energy_vs_greedy": 2.84, "energy_vs_speculative": 1.62, "accept_ratio": 2.15}
NAMES = {"greedy": "AR sampling (the paper's 'greedy')", "speculative": f"speculative ($\\gamma$={GAMMA})",
         "BiLD": f"BiLD ($\\gamma$={BILD_GAMMA})", "SpecTr": f"SpecTr ($\\gamma$={GAMMA})",
         "MJSD": f"MJSD ($\\gamma$={GAMMA}, {BEAMS} beams, $\\tau$={TAU:g})"}  # the methods' names on the charts


def plain(name: str) -> str:
    """A chart name without its TeX: the tables' method column."""
    return NAMES[name].replace("$", "").replace("\\", "")


def paper_mean(metric: str, num: str, den: str) -> float:
    """Mean over the paper's six Table 2 columns of metric[num] / metric[den]."""
    i, j = METHODS5.index(num), METHODS5.index(den)
    return statistics.mean(v[metric][i] / v[metric][j] for v in PAPER_T2.values())


# ------------------------------------------------------------------ variant labels


def bild_label(tau1: float, tau2: float, gamma: int = BILD_GAMMA) -> str:
    return f"bild:g{gamma}:f{tau1:g}:r{tau2:g}"


def spectr_label(m: int, gamma: int = GAMMA) -> str:
    return f"spectr:g{gamma}:m{m}"


def mjsd_label(beams: int = BEAMS, tau: float = TAU, gamma: int = GAMMA) -> str:
    return f"mjsd:g{gamma}:b{beams}:tau{tau:g}"


def mjgd_label(k: int, beams: int = BEAMS) -> str:
    return f"mjgd:g{k}:b{beams}"


def table2_variants(chosen: dict) -> dict[str, str]:
    """label -> the method's name in the paper's Table 2 columns, BiLD and SpecTr at the validation choice."""
    return {"ar": "greedy", f"speculative:g{GAMMA}": "speculative", bild_label(chosen["tau1"], chosen["tau2"]): "BiLD",
            spectr_label(chosen["m"]): "SpecTr", mjsd_label(): "MJSD"}


# ------------------------------------------------------------------ Tables 4 and 5


def table4_rows(kinds: dict[str, tuple], split: dict[str, dict], n_tokens: Callable[[str], int]) -> list[dict]:
    """Ours (test and validation prompts, mean prompt and reference tokens) beside the paper's data sets."""
    rows = []
    for kind, (_, dataset, task) in kinds.items():
        test = split[kind]["test"]
        rows.append({"source": f"ours: suite '{kind}' (stands in for {dataset})", "task": task,
                     "test_prompts": len(test), "validation_prompts": len(split[kind]["validation"]),
                     "mean_prompt_tokens": statistics.mean(len(p.ids) for p in test),
                     "mean_reference_tokens": statistics.mean(n_tokens(p.reference) for p in test)})
    for kind, (_, dataset, task) in kinds.items():
        n, length = PAPER_T4[kind]
        rows.append({"source": f"paper: {dataset}", "task": task, "test_prompts": n, "validation_prompts": None,
                     "mean_prompt_tokens": length, "mean_reference_tokens": None})
    return rows


def validation_rows(result: BenchResult, kind: str, bild_grid: Sequence[tuple[float, float]],
                    spectr_grid: Sequence[int]) -> tuple[list[dict], dict]:
    """(grid rows, choice) on one kind's validation split: every BiLD (τ1, τ2) and SpecTr m point, and the one
    with the lowest perplexity of each, as the paper chose them (Appendix D)."""
    grid = rows_of(result)
    keep = ("perplexity", "rouge_l", "tokens_per_call", "new_tokens")
    rows = [{"kind": kind, "method": "BiLD", "tau1": f, "tau2": r, "m": None,
             **{k: grid[bild_label(f, r)][k] for k in keep}} for f, r in bild_grid]
    rows += [{"kind": kind, "method": "SpecTr", "tau1": None, "tau2": None, "m": m,
              **{k: grid[spectr_label(m)][k] for k in keep}} for m in spectr_grid]
    best_bild = min((v for v in rows if v["method"] == "BiLD"), key=lambda v: v["perplexity"])
    best_spectr = min((v for v in rows if v["method"] == "SpecTr"), key=lambda v: v["perplexity"])
    return rows, {"tau1": best_bild["tau1"], "tau2": best_bild["tau2"], "m": best_spectr["m"]}


def validation_grid(cache: StudyCache, configs: dict[str, BenchConfig], prompts: dict[str, Sequence[BenchPrompt]],
                    *key, target: LoadedModel | None = None, draft: LoadedModel | None = None,
                    executor: ExecutorConfig | str | None = None) -> dict[str, BenchResult]:
    """The validation grid (every BiLD and SpecTr point of ``configs[kind]``) on each kind's validation prompts:
    one bench per kind in ``cache``'s folder ``validation/<kind>`` (keyed by its config, ``key`` and the prompt
    ids), the kinds run one after the other here or as Ray tasks (``executor``); {kind: its bench}, for
    ``validation_rows``."""
    kinds = list(configs)
    jobs = [(f"validation/{kind}", configs[kind], prompts[kind], key) for kind in kinds]
    return dict(zip(kinds, cache.benches(jobs, target=target, draft=draft, executor=executor)))


def table5_rows(kinds: dict[str, tuple], chosen: dict[str, dict]) -> list[dict]:
    """Each hyper-parameter per kind (chosen on the validation split or the paper's Table 5) beside the paper's."""
    each = len(kinds)
    ours = {"speculative γ": [GAMMA] * each, "SpecTr γ": [GAMMA] * each, "SpecTr m": [chosen[k]["m"] for k in kinds],
            "BiLD γ": [BILD_GAMMA] * each, "BiLD fallback τ1": [chosen[k]["tau1"] for k in kinds],
            "BiLD rollback τ2": [chosen[k]["tau2"] for k in kinds], "MJSD γ": [GAMMA] * each,
            "MJSD beams": [BEAMS] * each, "MJSD τ": [TAU] * each}
    how = {"SpecTr m": "best validation perplexity", "BiLD fallback τ1": "best validation perplexity",
           "BiLD rollback τ2": "best validation perplexity"}
    columns = [(c, m) for c in ("CP", "CA", "CD") for m in ("Llama", "OPT")]
    rows = []
    for name, values in ours.items():
        row = {"hyper-parameter": name, "how_chosen": how.get(name, "the paper's Table 5")}
        row.update({f"ours {kinds[k][0]} ({k})": v for k, v in zip(kinds, values)})
        row.update({f"paper {m} {c}": v for (c, m), v in zip(columns, PAPER_T5[name])})
        rows.append(row)
    return rows


# ------------------------------------------------------------------ Fig. 1, Table 2, Fig. 3, Table 3, Fig. 4


def fig1_rows(result: BenchResult, ks: Sequence[int], seed: int = 0) -> list[dict]:
    """MJGD perplexity (with the 95% bootstrap interval over prompts of the pooled perplexity, the resampling the
    Fig. 1 verdict uses), ROUGE-L, speed and target calls per token against K (K = 1: argmax decoding)."""
    rows = rows_of(result)

    def perplexity(x: np.ndarray) -> float:  # x [P, R, 1, (nll_sum, nll_tokens)]: Eq. 1 pooled over tokens
        sums = x.sum(axis=(0, 1))[0]
        return float(np.exp(sums[0] / sums[1]))

    table = []
    for k in ks:
        x, _ = prompt_array({"fig1": result}, lambda _kind, k=k: (mjgd_label(k),), ("nll_sum", "nll_tokens"))
        low, high = stats.paired_bootstrap(x, perplexity, seed=seed) if len(x) > 1 else (np.nan, np.nan)
        r = rows[mjgd_label(k)]
        table.append({"K": k, "perplexity": r["perplexity"], "perplexity_low95": low, "perplexity_high95": high,
                      "prompts": len(x), "rouge_l": r["rouge_l"], "tokens_per_s": r["tokens_per_s"],
                      "target_calls_per_token": 1 / r["tokens_per_call"], "identical_to_argmax": r["identical_to_ar"]})
    return table


def table2_rows(kind: str, result: BenchResult, chosen: dict, source: str) -> list[dict]:
    """Ours on one kind (every Table 2 method of the run), then the paper's rows for that kind."""
    rows = rows_of(result)
    spec_tps = rows[f"speculative:g{GAMMA}"]["tokens_per_s"]
    table = []
    for label, name in table2_variants(chosen).items():
        r = rows[label]
        table.append({"kind": kind, "source": source, "method": plain(name), "variant": label,
                      "tokens_per_s": r["tokens_per_s"], "speedup": r["speedup"],
                      "speed_over_speculative": r["tokens_per_s"] / spec_tps, "joules_per_token": r["joules_per_token"],
                      "perplexity": r["perplexity"], "rouge_l": r["rouge_l"], "tokens_per_call": r["tokens_per_call"],
                      "lossless": r["lossless"], "prompts": r["n"], "new_tokens": r["new_tokens"]})
    for model, full in PAPER_MODELS.items():
        v = PAPER_T2[kind, model]
        for i, name in enumerate(METHODS5):
            table.append({"kind": kind, "source": f"paper: {full}", "method": plain(name), "variant": None,
                          "tokens_per_s": v["speed"][i], "speedup": v["speedup"][i],
                          "speed_over_speculative": v["speed"][i] / v["speed"][1], "joules_per_token": v["energy"][i],
                          "perplexity": v["perplexity"][i], "rouge_l": None, "tokens_per_call": None,
                          "lossless": name in ("greedy", "speculative", "SpecTr"), "prompts": None,
                          "new_tokens": None})
    return table


def accepted_per_iteration(result: BenchResult, label: str) -> list[int]:
    """Draft tokens accepted per verifying target call (the token the target adds is not counted)."""
    return [a for rec in records_of(result, label) for a in rec["accept_lengths"]]


def fig3_row(kind: str, spec: list[int], mjsd: list[int]) -> dict:
    """Mean accepted draft tokens per iteration of speculative decoding and MJSD on one kind, and their ratio."""
    ratio = (statistics.mean(mjsd) / statistics.mean(spec) if spec and mjsd and statistics.mean(spec) > 0 else None)
    return {"kind": kind, "speculative_mean_accepted": statistics.mean(spec) if spec else None,
            "mjsd_mean_accepted": statistics.mean(mjsd) if mjsd else None, "ratio_mjsd_over_speculative": ratio,
            "speculative_iterations": len(spec), "mjsd_iterations": len(mjsd),
            "paper_ratio_mean_over_its_columns": PAPER_CLAIMS["accept_ratio"]}


def fig3_overall(results: dict[str, BenchResult], seed: int = 0) -> dict:
    """MJSD's accepted draft tokens per iteration over speculative's, pooled over every kind's test prompts, with the
    95% paired bootstrap interval that decides the Fig. 3 claim (``claims``: the same array, statistic and seed)."""
    x, _ = prompt_array(results, lambda _kind: (mjsd_label(), f"speculative:g{GAMMA}"), ("accepted", "iterations"))
    low, high = stats.paired_bootstrap(x, stats.pooled_ratio, seed=seed) if len(x) > 1 else (np.nan, np.nan)
    return {"estimate": stats.pooled_ratio(x), "low": low, "high": high, "prompts": len(x)}


def table3_rows(result: BenchResult, beams: Sequence[int], source: str) -> list[dict]:
    """MJSD (γ, τ of Table 5) at each beam count, then the paper's Table 3 rows."""
    rows = rows_of(result)
    table = [{"source": source, "beams": b, "tokens_per_s": rows[mjsd_label(b)]["tokens_per_s"],
              "speedup": rows[mjsd_label(b)]["speedup"], "joules_per_token": rows[mjsd_label(b)]["joules_per_token"],
              "perplexity": rows[mjsd_label(b)]["perplexity"], "rouge_l": rows[mjsd_label(b)]["rouge_l"],
              "tokens_per_call": rows[mjsd_label(b)]["tokens_per_call"]} for b in beams]
    for model, by_beams in PAPER_T3.items():
        table += [{"source": f"paper: {PAPER_MODELS[model]}", "beams": b, "tokens_per_s": s, "speedup": None,
                   "joules_per_token": e, "perplexity": p, "rouge_l": None, "tokens_per_call": None}
                  for b, (s, e, p) in by_beams.items()]
    return table


def fig4_rows(result: BenchResult, taus: Sequence[float]) -> list[dict]:
    """MJSD (γ, beams of Table 5) perplexity and speed at each threshold τ."""
    rows = rows_of(result)
    return [{"tau": t, "perplexity": rows[mjsd_label(tau=t)]["perplexity"],
             "tokens_per_s": rows[mjsd_label(tau=t)]["tokens_per_s"], "speedup": rows[mjsd_label(tau=t)]["speedup"],
             "tokens_per_call": rows[mjsd_label(tau=t)]["tokens_per_call"],
             "rouge_l": rows[mjsd_label(tau=t)]["rouge_l"]} for t in taus]


# ------------------------------------------------------------------ Table 1


def table1_rows(batching, source: str) -> list[dict]:
    """Ours (time and energy per run of b inputs, relative to b = 1, and β(b, γ+1)), then the paper's Table 1."""
    base = batching.cell(1, 1)
    n = GAMMA + 1
    rows = [{"source": source, **row, "time_per_run_vs_b1": row["time_per_run_s"] / base.latency.median_s,
             "energy_per_run_vs_b1": None if base.energy_j is None or row["energy_per_run_j"] is None
             else row["energy_per_run_j"] / base.energy_j,
             f"beta_b_{n}": batching.beta(row["batch_size"], n)} for row in batching.table1()]
    rows += [{"source": "paper: OPT-13B, 2x A10", "batch_size": b, "runs": int(round(t / tpr, -2)), "energy_j": e,
              "energy_per_run_j": epr, "energy_per_input_j": epi, "time_s": t, "time_per_run_s": tpr,
              "time_per_input_s": tpi, "time_per_run_vs_b1": tpr / PAPER_T1[0][5],
              "energy_per_run_vs_b1": epr / PAPER_T1[0][2], f"beta_b_{n}": None}
             for b, e, epr, epi, t, tpr, tpi in PAPER_T1]
    return rows


# ------------------------------------------------------------------ per-prompt arrays and statistics
#
# Each claim is decided on a paired bootstrap over the test prompts and the bench's repeats (seed + repeat)
# (specrepro.metrics.verdict): every method of a bench ran on the same prompts with the same seeds, so a resample keeps
# a prompt's runs of every method together. The array of a claim is [P, R, M, F]: P prompts (every kind's test
# prompts together), R repeats, M methods (the claim's method, then what it is compared with), F record fields.
# With M = F = 2 that is the layout of specrepro.core.stats. A speed claim is decided on the mean over runs of the
# paired ratios (stats.mean_of_ratios, MEAN_OF_RATIOS), as the paper's Table 2 averages its speedups, not on the
# bench's pooled tokens/s ratio; accepted drafts per iteration and energy per token are pooled ratios
# (stats.pooled_ratio: each run weighs by its iterations or its tokens).


def _field(rec: dict, field: str) -> float:
    if field == "accepted":
        return float(sum(rec["accept_lengths"]))
    if field == "iterations":
        return float(len(rec["accept_lengths"]))
    value = rec.get(field)
    return float("nan") if value is None else float(value)


def prompt_array(results: dict[str, BenchResult], labels: Callable[[str], Sequence[str]],
                 fields: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """([P, R, M, F] array, the kind of each prompt): ``fields`` of the record of each prompt, repeat and label of
    ``labels(kind)``, for every prompt of every kind that has all of them. A field is a record key, or "accepted" /
    "iterations" (the sum and the count of the record's accept lengths)."""
    rows, kinds = [], []
    for kind, result in results.items():
        wanted = list(labels(kind))
        by = {(rec["method"], rec["prompt_id"], rec.get("repeat", 0)): rec for rec in result.records}
        repeats = sorted({rec.get("repeat", 0) for rec in result.records})
        for pid in dict.fromkeys(rec["prompt_id"] for rec in result.records):
            if all((label, pid, r) in by for label in wanted for r in repeats):
                rows.append([[[_field(by[label, pid, r], f) for f in fields] for label in wanted] for r in repeats])
                kinds.append(kind)
    x = np.array(rows, dtype=float)
    return (x if rows else x.reshape(0, 1, 1, len(fields))), kinds


def perplexity_change(x: np.ndarray) -> float:
    """exp(Σ NLL_0 / Σ n_0 − Σ NLL_1 / Σ n_1) − 1: the first method's perplexity (Eq. 1, pooled over every
    generated token) relative to the second's. x [P, R, 2, 2] with fields (nll_sum, nll_tokens)."""
    sums = x.sum(axis=(0, 1))  # [2, 2]
    return float(np.exp(sums[0, 0] / sums[0, 1] - sums[1, 0] / sums[1, 1]) - 1)


# ------------------------------------------------------------------ deciding (specrepro.metrics.verdict.decide)


def by_kind(x: np.ndarray, kinds: Sequence[str], statistic, form: str) -> str:
    """The statistic on each kind's prompts alone: "kind value, ..." (x [P, R, ...], ``kinds`` the kind of each
    prompt)."""
    kind_of = np.array(kinds)
    return ", ".join(f"{kind} {form.format(statistic(x[kind_of == kind]))}" for kind in dict.fromkeys(kinds))


def _ours(v: Verdict, form: str, x: np.ndarray, kinds: Sequence[str], statistic) -> str:
    return (f"{form.format(v.estimate)} (95% {form.format(v.low)} to {form.format(v.high)}, {v.n}; by kind: "
            f"{by_kind(x, kinds, statistic, form)})")


# ------------------------------------------------------------------ the claims


def claims(results: dict[str, BenchResult], chosen: dict[str, dict], fig1_result: BenchResult, ks: Sequence[int],
           table1: list[dict], energy_source: str, seed: int = 0) -> tuple[list[dict], list[Verdict]]:
    """The paper's headline claims (the claims table: claim, paper, ours, threshold, verdict, claim_id) and the
    verdicts that decide them, each on a 95% paired bootstrap over the test prompts of every kind together
    (``decide``). Table 1's claim is a device timing with no prompts to resample: shown, not decided."""
    mjsd, spec = mjsd_label(), f"speculative:g{GAMMA}"
    bild = {k: bild_label(c["tau1"], c["tau2"]) for k, c in chosen.items()}
    spectr = {k: spectr_label(c["m"]) for k, c in chosen.items()}
    speed, ppl, calls = ("new_tokens", "wall_time_s"), ("nll_sum", "nll_tokens"), ("new_tokens", "target_calls")
    tests = [  # (id, claim, paper, labels, fields, statistic, threshold, side, form)
        ("mjsd.speedup_over_ar_sampling", "MJSD speedup over AR sampling ('greedy')",
         f"{PAPER_CLAIMS['mjsd_speedup']}x (mean of Table 2's six columns)", lambda k: (mjsd, "ar"), speed,
         stats.mean_of_ratios, 1.5, "at_least", "{:.2f}x"),
        ("mjsd.perplexity_vs_ar_sampling", "MJSD perplexity change vs AR sampling",
         f"{PAPER_CLAIMS['mjsd_ppl_change']:+.1%} (abstract)", lambda k: (mjsd, "ar"), ppl, perplexity_change,
         -0.20, "at_most", "{:+.1%}"),
        ("mjsd.perplexity_vs_bild", "MJSD perplexity change vs BiLD (how §5.1 states the -21.2%)",
         f"{PAPER_CLAIMS['mjsd_ppl_change']:+.1%} (§5.1)", lambda k: (mjsd, bild[k]), ppl, perplexity_change,
         -0.20, "at_most", "{:+.1%}"),
        ("mjsd.speed_over_speculative", "MJSD speed over speculative sampling",
         f"{PAPER_CLAIMS['mjsd_over_speculative']}x (mean of Table 2's six columns)", lambda k: (mjsd, spec), speed,
         stats.mean_of_ratios, 1.3, "at_least", "{:.2f}x"),
        ("mjsd.spectr_tokens_per_call_over_speculative", "SpecTr tokens per target call over speculative's (same γ)",
         f"not printed (its SpecTr/speculative speed: {paper_mean('speed', 'SpecTr', 'speculative'):.2f}x)",
         lambda k: (spectr[k], spec), calls, stats.mean_of_ratios, 1.0, "at_least", "{:.2f}x"),
        ("mjsd.accepted_per_iteration_over_speculative",
         "MJSD accepted tokens per iteration over speculative's (Fig. 3)",
         f"{PAPER_CLAIMS['accept_ratio']}x (the text on Fig. 3)", lambda k: (mjsd, spec), ("accepted", "iterations"),
         stats.pooled_ratio, 1.0, "at_least", "{:.2f}x"),
        ("mjsd.energy_ar_over_mjsd", "AR sampling's energy per token over MJSD's",
         f"{PAPER_CLAIMS['energy_vs_greedy']}x (mean of Table 2's six columns)", lambda k: ("ar", mjsd),
         ("energy_j", "new_tokens"), lambda x: 1 / stats.pooled_ratio(x), 1.0, "at_least", "{:.2f}x"),
    ]
    rows, verdicts = [], []
    for claim_id, claim, paper, labels, fields, statistic, threshold, side, form in tests:
        x, kinds = prompt_array(results, labels, fields)
        sign = "≥" if side == "at_least" else "≤"
        row = {"claim": claim, "paper": paper}
        decided = {"threshold": f"{sign} {form.format(threshold)}"}
        if len(x) == 0 or not np.isfinite(x).all():  # energy without a counter
            rows.append({**row, "ours": energy_source if fields[0] == "energy_j" else "n/a", **decided,
                         "verdict": "not decided: not measured here", "claim_id": ""})
            continue
        timed = fields in (speed, ("energy_j", "new_tokens"))  # tokens/s, or joules of a timed run
        v = decide(claim_id, f"{claim} {sign} {form.format(threshold)} (the paper: {paper})", x, statistic,
                   threshold, side, seed=seed, timed=timed)
        verdicts.append(v)
        rows.append({**row, "ours": _ours(v, form, x, kinds, statistic), **decided, "verdict": v.verdict,
                     "claim_id": claim_id})
    # Fig. 1: MJGD at T = 0, perplexity at K = 2 and at the largest K against K = 1, on the same prompts
    parts, compared = [], (ks[1], ks[-1]) if len(ks) > 2 else ks[1:]
    for k in compared:
        x, _ = prompt_array({"fig1": fig1_result}, lambda _k, k=k: (mjgd_label(k), mjgd_label(ks[0])), ppl)
        parts.append(decide(f"mjsd.mjgd_perplexity_k{k}_vs_k{ks[0]}", f"MJGD perplexity at K = {k} relative to "
                            f"K = {ks[0]} ≤ 0", x, perplexity_change, 0.0, "at_most", seed=seed))
    fig1 = all_of("mjsd.mjgd_perplexity_falls_with_k", f"MJGD perplexity falls from K = {ks[0]} to K = "
                  + " and to K = ".join(str(k) for k in compared) + " (Fig. 1)", parts)
    verdicts.append(fig1)
    rows.append({"claim": "MJGD: perplexity falls from K = 1 to K = 2 and beyond (Fig. 1)",
                 "paper": "falls (chart, no values)",
                 "ours": "; ".join(f"K = {k} vs K = {ks[0]}: {p.estimate:+.1%} (95% {p.low:+.1%} to {p.high:+.1%})"
                                   for k, p in zip(compared, parts)) + f", {fig1.n}",
                 "threshold": "≤ +0.0% at each", "verdict": fig1.verdict, "claim_id": fig1.claim})
    t1 = {r["batch_size"]: r for r in table1 if r["source"].startswith("ours")}
    b_max = max(t1)
    rows.append({"claim": f"one run of b = {b_max} inputs takes little more time than a run of 1 (Table 1)",
                 "paper": f"{PAPER_T1[-1][5] / PAPER_T1[0][5]:.2f}x at b = 16 (Table 1, OPT-13B, 2x A10)",
                 "ours": f"{t1[b_max]['time_per_run_vs_b1']:.2f}x at b = {b_max} (median timings)", "threshold": "< 2x",
                 "verdict": "not decided: a device timing, no prompts to resample", "claim_id": ""})
    return rows, verdicts


def sweep_claims(results: dict[str, BenchResult], beams: Sequence[int], taus: Sequence[float],
                 seed: int = 0) -> tuple[list[dict], list[Verdict]]:
    """Table 3's and Fig. 4's sentences decided on the instruct prompts that ran the sweeps, each part on a 95%
    paired bootstrap over those prompts (``decide``), like the headline claims:

    - Table 3, "Increasing the number of beams improves the quality of the draft tokens" (perplexity and speed):
      MJSD's perplexity at the most beams at most the fewest's, and its speed at least the fewest's;
    - Fig. 4, "the efficiency indeed drops when τ increases. However, the perplexity increases when τ is close to
      1": speed at the largest τ at most the smallest's, and perplexity at the largest τ at least the next one's.

    (claims-table rows, verdicts), each compound claim with its parts."""
    speed, ppl = ("new_tokens", "wall_time_s"), ("nll_sum", "nll_tokens")
    few, most = mjsd_label(beams=min(beams)), mjsd_label(beams=max(beams))
    taus = sorted(taus)
    low_tau, near, high_tau = (mjsd_label(tau=t) for t in (taus[0], taus[-2], taus[-1]))
    sweeps = [  # (id, statement, paper, parts: (id, what, labels, fields, statistic, threshold, side, form))
        ("mjsd.more_beams_better", f"more beams ({min(beams)} → {max(beams)}): lower perplexity and more speed "
         "(Table 3)", "Llama-2: perplexity 2.44 → 2.10, 55.9 → 61.3 tok/s (Table 3)", [
             ("mjsd.beams_perplexity_change", f"MJSD perplexity at {max(beams)} beams relative to {min(beams)}",
              (most, few), ppl, perplexity_change, 0.0, "at_most", "{:+.1%}"),
             ("mjsd.beams_speed_ratio", f"MJSD speed at {max(beams)} beams over {min(beams)}", (most, few),
              speed, stats.mean_of_ratios, 1.0, "at_least", "{:.2f}x")]),
        ("mjsd.threshold_effect", f"τ {taus[0]:g} → {taus[-1]:g}: speed drops, and perplexity rises near τ = 1 "
         "(Fig. 4)", "no values (a chart; the text)", [
             ("mjsd.tau_speed_ratio", f"MJSD speed at τ = {taus[-1]:g} over τ = {taus[0]:g}", (high_tau, low_tau),
              speed, stats.mean_of_ratios, 1.0, "at_most", "{:.2f}x"),
             ("mjsd.tau_perplexity_near_one", f"MJSD perplexity at τ = {taus[-1]:g} relative to τ = {taus[-2]:g}",
              (high_tau, near), ppl, perplexity_change, 0.0, "at_least", "{:+.1%}")]),
    ]
    rows, verdicts = [], []
    for claim_id, statement, paper, specs in sweeps:
        parts, said, bounds = [], [], []
        arrays = [prompt_array(results, lambda _kind, labels=spec[2]: labels, spec[3])[0] for spec in specs]
        if any(len(x) == 0 or not np.isfinite(x).all() for x in arrays):
            rows.append({"claim": statement, "paper": paper, "ours": "n/a", "threshold": "",
                         "verdict": "not decided: no prompt has every variant's record", "claim_id": ""})
            continue
        for (part_id, what, labels, fields, statistic, threshold, side, form), x in zip(specs, arrays):
            bound = f"{'≥' if side == 'at_least' else '≤'} {form.format(threshold)}"
            v = decide(part_id, f"{what} {bound}", x, statistic, threshold, side, seed=seed, timed=fields == speed)
            parts.append(v)
            said.append(f"{what}: {form.format(v.estimate)} (95% {form.format(v.low)} to {form.format(v.high)}, "
                        f"{v.n}) {v.verdict}")
            bounds.append(bound)
        whole = all_of(claim_id, statement, parts)
        verdicts.append(whole)
        rows.append({"claim": statement, "paper": paper, "ours": "; ".join(said), "threshold": "; ".join(bounds),
                     "verdict": whole.verdict, "claim_id": claim_id})
    return rows, verdicts
