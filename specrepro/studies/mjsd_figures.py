"""The figures and the claims summary of ``notebooks/mjsd_joint_decoding.ipynb``, drawn from the tables of
:mod:`.mjsd` beside the MJSD paper's printed numbers: each function returns a titled matplotlib Figure that the
notebook saves with its footer (``Artifacts.figure``), so the notebook only orchestrates and the drawing is tested
here.

Notation: γ = draft length, τ = MJSD's acceptance threshold, K = tokens per MJGD step, b = batch size. ``kinds`` is
the notebook's {suite: (abbreviation, paper data set, kind of text)}.
"""
from __future__ import annotations

from collections.abc import Sequence

import matplotlib.ticker
import numpy as np

from ..run import plots
from .mjsd import BEAMS, GAMMA, METHODS5, NAMES, PAPER_CLAIMS, PAPER_MODELS, PAPER_T2, plain

# the paper's Table 2 settings, as the Table 2 chart's legend names them
PAPER_L40 = {m: f"MJSD paper Table 2: {PAPER_MODELS[m].replace(', L40', '')}, L40, batch 1" for m in PAPER_MODELS}


def fig1_figure(fig1: Sequence[dict]):
    """Fig. 1: MJGD's perplexity and ROUGE-L against K (:func:`.mjsd.fig1_rows`)."""
    fig, axes = plots.figure(1, 2)
    ks = [r["K"] for r in fig1]
    ppl = np.array([r["perplexity"] for r in fig1])
    low, high = (np.array([r[c] for r in fig1], dtype=float) for c in ("perplexity_low95", "perplexity_high95"))
    bars = np.nan_to_num(np.vstack([ppl - low, high - ppl]))  # none with one prompt (smoke)
    axes[0].errorbar(ks, ppl, yerr=bars, fmt="o-", capsize=3)
    axes[0].set(xlabel="$K$ (tokens per MJGD step)", ylabel="perplexity (Eq. 1) $\\downarrow$",
                title=f"(a) perplexity, 95% bootstrap over {fig1[0]['prompts']} prompts")
    axes[1].plot(ks, [r["rouge_l"] for r in fig1], "o-", color="C1")
    axes[1].set(xlabel="$K$ (tokens per MJGD step)", ylabel="ROUGE-L $\\uparrow$", title="(b) ROUGE-L")
    for ax in axes:
        ax.set_xticks(ks)
    plots.title(fig, plots.MEASURED, f"MJSD Fig. 1, MJGD ({BEAMS} beams, $T$ = 0), instruct suite")
    return fig


def table2_figure(table2: Sequence[dict], kinds: dict[str, tuple]):
    """Table 2 as a chart, per kind and method: (a) speedup over AR sampling, (b) perplexity relative to AR
    sampling's, (c) tokens per target call; ours as bars (:func:`.mjsd.table2_rows`' "ours" rows), the paper's
    speedup and relative perplexity as open markers."""
    fig, axes = plots.figure(1, 3, width=14, height=3.4)
    x = np.arange(len(kinds))
    width = 0.16
    for i, name in enumerate(METHODS5):
        ours_rows = [next(r for r in table2 if r["kind"] == k and r["source"].startswith("ours")
                          and r["method"] == plain(name)) for k in kinds]
        base_ppl = [next(r for r in table2 if r["kind"] == k and r["variant"] == "ar")["perplexity"] for k in kinds]
        offset = (i - 2) * width
        axes[0].bar(x + offset, [r["speedup"] for r in ours_rows], width, color=f"C{i}", label=NAMES[name])
        axes[1].bar(x + offset, [r["perplexity"] / b for r, b in zip(ours_rows, base_ppl)], width, color=f"C{i}")
        axes[2].bar(x + offset, [r["tokens_per_call"] for r in ours_rows], width, color=f"C{i}")
        for model, marker in (("Llama-2", "^"), ("OPT", "v")):  # the paper's Table 2, same method and kind
            v = [PAPER_T2[k, model] for k in kinds]
            label = PAPER_L40[model] if i == 0 else None
            plots.document_marker(axes[0], x + offset, [p["speedup"][i] for p in v], label, marker=marker, s=22)
            plots.document_marker(axes[1], x + offset, [p["perplexity"][i] / p["perplexity"][0] for p in v], None,
                                  marker=marker, s=22)
    axes[0].set(ylabel="speedup over AR sampling", title="(a) speedup")
    axes[1].set(ylabel="perplexity / AR sampling's", title="(b) perplexity relative to AR sampling")
    axes[2].set(ylabel="tokens per target call", title="(c) tokens per target call (ours only)")
    for ax in axes:
        ax.set_xticks(x, [f"{k} ({kinds[k][0]})" for k in kinds], fontsize=7)
        ax.axhline(1, color="0.5", lw=0.8)
    plots.legend(axes[2], "right", handles=axes[0].get_legend_handles_labels()[0],
                 labels=axes[0].get_legend_handles_labels()[1])
    plots.title(fig, plots.MEASURED, "MJSD Table 2 as a chart: bars ours, open black markers the paper's "
                                     "(it prints no tokens per call)")
    return fig


def fig3_figure(fig3: Sequence[dict], accepted: dict[tuple[str, str], list[int]], kinds: dict[str, tuple],
                overall: dict):
    """Fig. 3: accepted draft tokens per iteration of speculative decoding and MJSD, (a) their means per kind
    (:func:`.mjsd.fig3_row`), (b) their distribution over all kinds (``accepted``: (kind, method) -> per
    iteration), (c) the ratio of the means per kind, and over every kind with the interval that decides the claim
    (``overall``: :func:`.mjsd.fig3_overall`), beside the paper's."""
    fig, axes = plots.figure(1, 3, width=14, height=3.2)
    for i, (name, key) in enumerate((("speculative", "speculative_mean_accepted"), ("MJSD", "mjsd_mean_accepted"))):
        axes[0].bar(np.arange(len(kinds)) + (i - 0.5) * 0.35, [r[key] or 0 for r in fig3], 0.35,
                    color=f"C{[1, 4][i]}", label=NAMES[name])
    axes[0].set_xticks(np.arange(len(kinds)), [f"{k} ({kinds[k][0]})" for k in kinds], fontsize=7)
    axes[0].set(ylabel="accepted draft tokens / iteration", title="(a) mean per iteration (ours; colours as in (b))")
    bins = np.arange(GAMMA + 2) - 0.5
    for i, name in enumerate(("speculative", "MJSD")):
        pooled = [a for kind in kinds for a in accepted[kind, name]]
        axes[1].hist(pooled, bins=bins, density=True, alpha=0.55, color=f"C{[1, 4][i]}", label=NAMES[name])
    axes[1].set(xlabel="accepted draft tokens in one iteration", ylabel="share of iterations",
                title="(b) distribution, all kinds pooled")
    plots.legend(axes[1], "right")  # the same two methods as in (a)
    ratios = [r["ratio_mjsd_over_speculative"] or np.nan for r in fig3]
    axes[2].bar(np.arange(len(kinds)), ratios, 0.5, color="C4", alpha=0.6, label="ours, per kind")
    est, low, high = (overall[k] for k in ("estimate", "low", "high"))
    axes[2].bar([len(kinds)], [est], 0.5, color="C4", yerr=np.nan_to_num([[est - low], [high - est]]), capsize=4,
                label=f"ours, every kind: 95% paired bootstrap\nover {overall['prompts']} prompts (the verdict's)")
    axes[2].axhline(1, color="0.5", lw=0.8)
    plots.document_marker(axes[2], [len(kinds) + 1], [PAPER_CLAIMS["accept_ratio"]],
                          f"MJSD paper: {PAPER_CLAIMS['accept_ratio']}x, mean over its 6 Table 2 settings\n"
                          "(Llama-2 and OPT pairs, L40, batch 1; the text on Fig. 3)")
    axes[2].set_xticks(np.arange(len(kinds) + 2), [*kinds, "all", "paper"], fontsize=7)
    axes[2].set(ylabel="MJSD / speculative", title="(c) ratio of the means")
    plots.legend(axes[2], "right")
    plots.title(fig, plots.MEASURED, f"MJSD Fig. 3, accepted draft tokens per iteration, $\\gamma$ = {GAMMA}")
    return fig


def fig4_figure(fig4: Sequence[dict], ar: dict):
    """Fig. 4: MJSD's perplexity and speed against τ (:func:`.mjsd.fig4_rows`) beside AR sampling's (``ar``: its
    summary row in the same bench)."""
    fig, axes = plots.figure(1, 2, width=10, height=3.2)
    taus = [r["tau"] for r in fig4]
    axes[0].plot(taus, [r["perplexity"] for r in fig4], "o-", color="C4", label="MJSD (ours)")
    axes[0].axhline(ar["perplexity"], ls="--", color="0.4", label=NAMES["greedy"])
    axes[0].set(xlabel="acceptance threshold $\\tau$", ylabel="perplexity $\\downarrow$", title="(a) perplexity")
    axes[1].plot(taus, [r["tokens_per_s"] for r in fig4], "o-", color="C4", label="MJSD (ours)")
    axes[1].axhline(ar["tokens_per_s"], ls="--", color="0.4", label=NAMES["greedy"])
    axes[1].set(xlabel="acceptance threshold $\\tau$", ylabel="tokens / s $\\uparrow$", title="(b) speed")
    plots.legend(axes[1], "right")  # the same two lines in both panels
    plots.title(fig, plots.MEASURED, f"MJSD Fig. 4, MJSD $\\gamma$ = {GAMMA}, {BEAMS} beams, instruct suite")
    return fig


def table1_figure(table1: Sequence[dict], runs: int):
    """Table 1 as a chart: (a) time (and energy where counted) per run of b inputs relative to b = 1, ours beside
    the paper's (:func:`.mjsd.table1_rows`); (b) our β(b, γ+1). ``runs``: timed runs per b."""
    fig, axes = plots.figure(1, 2, width=11, height=3.2)
    ours_rows = [r for r in table1 if r["source"].startswith("ours")]
    paper_rows = [r for r in table1 if r["source"].startswith("paper")]
    bs = [r["batch_size"] for r in ours_rows]
    axes[0].plot(bs, [r["time_per_run_vs_b1"] for r in ours_rows], "o-", label="time per run, ours")
    paper_b = [r["batch_size"] for r in paper_rows]
    axes[0].plot(paper_b, [r["time_per_run_vs_b1"] for r in paper_rows], "k--", lw=0.6)
    plots.document_marker(axes[0], paper_b, [r["time_per_run_vs_b1"] for r in paper_rows],
                          "time per run, MJSD paper Table 1: OPT-13B, 2x A10", marker="^", s=30)
    if all(r["energy_per_run_vs_b1"] is not None for r in ours_rows):
        axes[0].plot(bs, [r["energy_per_run_vs_b1"] for r in ours_rows], "s-", color="C2", label="energy per run, ours")
    axes[0].plot(paper_b, [r["energy_per_run_vs_b1"] for r in paper_rows], "k:", lw=0.6)
    plots.document_marker(axes[0], paper_b, [r["energy_per_run_vs_b1"] for r in paper_rows],
                          "energy per run, MJSD paper Table 1: OPT-13B, 2x A10", marker="v", s=30)
    axes[0].plot(bs, bs, color="0.7", lw=0.8, label="$\\propto b$ (no batching gain)")
    axes[0].set(xscale="log", yscale="log", xlabel="batch size $b$", ylabel="per run, relative to $b$ = 1",
                title="(a) one run of $b$ inputs")
    axes[1].plot(bs, [r[f"beta_b_{GAMMA + 1}"] for r in ours_rows], "o-", color="C3")
    axes[1].set(xscale="log", xlabel="batch size $b$",
                ylabel=f"$\\beta(b, {GAMMA + 1}) = L(b, {GAMMA + 1}) / L(b, 1)$",
                title=f"(b) {GAMMA + 1} tokens per sequence vs 1 (ours)")
    for ax, ticks in zip(axes, (sorted(set(bs) | set(paper_b)), bs)):
        ax.set_xticks(ticks, [str(b) for b in ticks])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    plots.legend(axes[0], "right")
    top = max(max(bs), max(r["energy_per_run_vs_b1"] or 0 for r in table1))  # the highest point drawn
    axes[0].set_yticks([t for t in (1, 1.25, 1.5, 2, 4, 8, 16) if t <= top], minor=False)
    axes[0].yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    axes[0].yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    plots.title(fig, plots.MEASURED, f"MJSD Table 1, {runs} runs per $b$")
    return fig


def claims_markdown(header: str, claims: Sequence[dict], chosen: dict[str, dict], energy: str) -> str:
    """The notebook's closing table: each claim of :func:`.mjsd.claims` (the paper's number, ours with its interval,
    the threshold, the verdict), then the validation choices per kind and where the energy was read."""
    lines = [header, "", "| claim | paper | ours (95% interval) | threshold | verdict |", "|---|---|---|---|---|"]
    lines += [f"| {c['claim']} | {c['paper']} | {c['ours']} | {c['threshold']} | {c['verdict']} |" for c in claims]
    lines += ["", "Validation choices: " + "; ".join(f"{k}: τ1 = {c['tau1']:g}, τ2 = {c['tau2']:g}, m = {c['m']}"
                                                    for k, c in chosen.items()) + ".",
              f"Energy: {energy}."]
    return "\n".join(lines)
