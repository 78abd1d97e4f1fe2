"""The figures and the summary of ``notebooks/survey_mentored_staged_batch.ipynb``, drawn from the tables of
:mod:`.survey`: each function returns a titled matplotlib Figure that the notebook saves with its footer
(``Artifacts.figure``), so the notebook only orchestrates and the drawing is tested here.

Notation (docs/notation.md): p = target row, q = draft row, D = the KL bound of mentored decoding, γ = draft length,
B = batch size, R = rows.
"""
from __future__ import annotations

import textwrap

from collections.abc import Callable, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.transforms import offset_copy

from ..drafters.staged import FROM_DRAFT, FROM_INNER, FROM_LOOKUP, FROM_TARGET
from ..run import plots
from .survey import layout_sources, mentored_label, speculative_label

# where a committed token came from -> (colour, legend text) in the token-source picture
SOURCE_COLOURS = {FROM_INNER: ("C2", "prompt lookup (n-gram), kept by the draft's inner level"),
                  FROM_LOOKUP: ("C2", "prompt lookup (n-gram copy)"),
                  FROM_DRAFT: ("C0", "draft model"), FROM_TARGET: ("C3", "target (recovered or bonus token)")}
FONT_PT = 7  # monospace font size of the picture; DejaVu Sans Mono advances 0.602 em per character
CHAR_PT = 0.602 * FONT_PT


def acceptance_figure(bounds: np.ndarray, curve: np.ndarray, speculative_rate: torch.Tensor, synthetic: np.ndarray,
                      suite: str):
    """Mentored blog, one-token chart: (a) acceptance against the bound D (mean and 10-90% band of the real rows,
    speculative sampling's mean, the synthetic chart's shape); (b) per row, mentored against speculative at the
    bounds nearest 0.2 and 1.0. ``curve`` [nD, R], ``speculative_rate`` [R], ``synthetic`` [nD]."""
    R = curve.shape[1]
    fig, axes = plots.figure(1, 2, width=9.5, height=4.2)
    ax = axes[0]
    ax.fill_between(bounds, np.quantile(curve, 0.1, axis=1), np.quantile(curve, 0.9, axis=1), color="C0", alpha=0.2,
                    label="10–90% of rows (measured)")
    ax.plot(bounds, curve.mean(1), "o-", color="C0", ms=3, label=f"mentored, mean over {R} rows (measured)")
    ax.axhline(float(speculative_rate.mean()), color="C1", ls=":", label="speculative sampling (D = 0), mean")
    ax.plot(bounds, synthetic, "--", color="0.4", label="synthetic pairs, V = 2000 (theory notebook, shape only)")
    ax.set(xlabel="KL bound $D$ on KL$(p\\,\\|\\,\\pi)$ (nats)", ylabel="probability of keeping the draft token",
           ylim=(0, 1.02), title="(a) acceptance against the bound")
    plots.legend(ax, "below", ncol=1)
    ax = axes[1]
    for i, d in enumerate(sorted({min(bounds[1:], key=lambda b: abs(b - want)) for want in (0.2, 1.0)})):
        ax.plot(speculative_rate.numpy(), curve[list(bounds).index(d)], "o", ms=2.5, color=f"C{i + 2}",
                label=f"$D$ = {d:g}")
    ax.plot([0, 1], [0, 1], color="0.5", lw=0.8, label="no gain")
    ax.set(xlabel="speculative sampling's acceptance $\\sum \\min(p, q)$ ($D$ = 0)", xlim=(0, 1.02), ylim=(0, 1.02),
           ylabel="mentored acceptance", title="(b) per row: mentored against speculative")
    plots.legend(ax, "below", ncol=3)
    plots.title(fig, plots.BOTH, f"mentored decoding, one token, on the real models' rows (T = 1, held-out {suite} "
                                 "prompts) beside the synthetic chart's shape")
    return fig


def speed_quality_figure(rows: dict[str, dict], gammas: Sequence[int], bounds: Sequence[float], reference: float,
                         run_range: float, suite: str, prompts: int, repeats: int):
    """Mentored blog, speed against quality: (a) tokens/s against ROUGE-L of AR, speculative and mentored sampling
    with the lossless runs' range shaded; (b) mentored's speedup against D beside speculative's. ``rows``: the
    speed-quality bench's summary rows by variant label."""
    spec = {g: speculative_label(g) for g in gammas}
    ment = {(g, d): mentored_label(g, d) for g in gammas for d in bounds}
    fig, axes = plots.figure(1, 2, width=10, height=4.4)
    ax = axes[0]
    ax.axvspan(reference - run_range, reference + run_range, color="0.85", label="lossless runs' ROUGE-L range",
               zorder=0)
    ax.plot(rows["ar"]["rouge_l"], rows["ar"]["tokens_per_s"], "ks", label="multinomial (AR) sampling")
    for i, g in enumerate(gammas):
        ax.plot(rows[spec[g]]["rouge_l"], rows[spec[g]]["tokens_per_s"], "o", color=f"C{i}", mfc="none", ms=7,
                label=f"speculative, $\\gamma$ = {g}")
        points = [(rows[ment[g, d]]["rouge_l"], rows[ment[g, d]]["tokens_per_s"]) for d in bounds]
        ax.plot(*zip(*points), "o-", color=f"C{i}", ms=4, label=f"mentored, $\\gamma$ = {g}")
        for d, (x, y) in zip(bounds, points):
            ax.annotate(f"$D$ = {d:g}", (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set(xlabel=f"ROUGE-L on {suite} $\\uparrow$", ylabel="tokens / s $\\uparrow$", title="(a) speed against quality")
    plots.legend(ax, "below", ncol=2)
    ax = axes[1]
    for i, g in enumerate(gammas):
        ax.plot(bounds, [rows[ment[g, d]]["speedup"] for d in bounds], "o-", color=f"C{i}",
                label=f"mentored, $\\gamma$ = {g}")
        ax.axhline(rows[spec[g]]["speedup"], color=f"C{i}", ls="--", lw=1,
                   label=f"speculative ($D$ = 0), $\\gamma$ = {g}")
    ax.axhline(1.0, color="k", lw=0.8, label="AR sampling")
    ax.set(xscale="log", xlabel="KL bound $D$ per token (nats)", ylabel="speedup over AR sampling",
           title="(b) speedup against the bound")
    plots.legend(ax, "below", ncol=2)
    plots.title(fig, plots.MEASURED, f"mentored blog's speed against quality: one interleaved bench, T = 1, "
                                     f"{prompts} {suite} prompts × {repeats} repeats (the blog: BLEU on WMT15 En→Fr)")
    return fig


def staged_figure(table: Sequence[dict], names: Sequence[str], gamma: int, prompts: int, suite: str):
    """Survey blog, staged and fused decoding: (a) tokens/s of each variant of :func:`.survey.staged_table`'s
    ``table``; (b) draft-model and target forwards per generated token. ``names``: the bar labels, in table order."""
    fig, axes = plots.figure(1, 2, width=9, height=3.6)
    x = np.arange(len(names))
    axes[0].bar(x, [r["tokens_per_s"] for r in table], color=[f"C{i}" for i in range(len(names))])
    axes[0].set(ylabel="tokens / s $\\uparrow$", title="(a) speed")
    axes[1].bar(x - 0.2, [r["draft_calls_per_token"] for r in table], 0.4, color="C0", label="draft-model calls")
    axes[1].bar(x + 0.2, [r["target_calls_per_token"] for r in table], 0.4, color="C3", label="target calls")
    axes[1].set(ylabel="forwards per generated token $\\downarrow$", title="(b) model calls per token")
    plots.legend(axes[1], "right")
    for ax in axes:  # two-line labels, upright: long names side by side no longer run together
        ax.set_xticks(x, [textwrap.fill(name, 12) for name in names], fontsize=7)
    plots.title(fig, plots.MEASURED, f"staged and fused speculative decoding, T = 0, $\\gamma$ = {gamma}, "
                                     f"{prompts} {suite} prompts")
    return fig


def token_source_figure(pictures: dict[str, tuple[list[int], list[str]]], decode: Callable[[list[int]], str],
                        prompt_id: str, gamma: int):
    """The survey blog's token-source picture: each generation of ``pictures`` (name -> (token ids, sources)) as
    monospace text, each token coloured by where it came from (:data:`SOURCE_COLOURS`), one panel a drafter."""
    source_colour = {source: c for source, (c, _) in SOURCE_COLOURS.items()}
    layouts = {name: layout_sources(decode, ids, src, source_colour) for name, (ids, src) in pictures.items()}
    n_lines = {name: max(line for _, line, _, _ in pieces) + 1 for name, pieces in layouts.items()}
    fig, axes = plt.subplots(len(layouts), 1, figsize=(9, 0.17 * sum(n_lines.values()) + 1.6), layout="constrained",
                             height_ratios=[n + 1 for n in n_lines.values()])
    for ax, (name, pieces) in zip(axes, layouts.items()):
        for x, line, text, colour in pieces:  # x in characters from the left edge, y in lines
            ax.text(0, -line, text, color=colour, family="monospace", fontsize=FONT_PT, va="top",
                    transform=offset_copy(ax.get_yaxis_transform(), fig=fig, x=x * CHAR_PT, units="points"))
        ax.set(ylim=(-n_lines[name], 0.5))
        ax.axis("off")
        src = pictures[name][1]
        ax.set_title(f"{name}: " + ", ".join(f"{SOURCE_COLOURS[s][1]} {src.count(s)}" for s in SOURCE_COLOURS
                                             if s in src), fontsize=7, loc="left")
    swatches = {"C2": "prompt lookup (n-gram: staged's inner level, fused's copies)",
                "C0": SOURCE_COLOURS[FROM_DRAFT][1], "C3": SOURCE_COLOURS[FROM_TARGET][1]}
    plots.legend(axes[-1], "below", handles=[plt.Line2D([], [], color=c, lw=4, label=label)
                                             for c, label in swatches.items()], ncol=3, fontsize=7)
    plots.title(fig, plots.MEASURED, f"token sources (the survey blog's staged-decoding picture): prompt "
                                     f"{prompt_id}, T = 0, $\\gamma$ = {gamma}")
    return fig


def beta_figure(table: Sequence[dict], batches: Sequence[int], gammas: Sequence[int], alpha: float, c: float,
                context_tokens: int):
    """Survey blog, Batch Size: (a) measured β(B, γ+1) against B per γ with the compute-bound limit γ+1 and the
    blog's break-even β; (b) the blog's E[speedup] with that β. ``table``: :func:`.survey.beta_table`'s rows."""
    fig, axes = plots.figure(1, 2, width=10, height=4.6)
    bs = list(batches)
    for i, g in enumerate(gammas):
        cells = [r for r in table if r["gamma"] == g]
        axes[0].plot(bs, [r["beta"] for r in cells], "o-", color=f"C{i}", ms=3,
                     label=f"$\\gamma$ = {g}: measured $\\beta(B, {g + 1})$")
        axes[0].axhline(g + 1, color=f"C{i}", ls="--", lw=0.8)
        axes[0].axhline(cells[0]["blog_break_even_beta"], color=f"C{i}", ls=":", lw=0.8)
        axes[1].plot(bs, [r["expected_speedup"] for r in cells], "o-", color=f"C{i}", ms=3, label=f"$\\gamma$ = {g}")
    axes[0].plot([], [], "k--", lw=0.8, label="compute-bound limit $\\gamma + 1$ (blog: 'toward k')")
    axes[0].plot([], [], "k:", lw=0.8, label="blog's break-even $\\beta$ (theory)")
    axes[0].set(xscale="log", yscale="log", xlabel="batch size $B$",
                ylabel="$\\beta(B, \\gamma+1) = L(B, \\gamma+1) / L(B, 1)$",
                title="(a) verification cost factor (measured)")
    axes[1].axhline(1.0, color="k", lw=0.8)
    axes[1].set(xscale="log", xlabel="batch size $B$", ylabel="E[speedup]",
                title=f"(b) blog's E[speedup] with measured $\\beta$ ($\\alpha$ = {alpha:.2f}, c = {c:.2f})")
    for ax in axes:
        ax.set_xticks(bs, [str(b) for b in bs])
        plots.legend(ax, "below", ncol=2)
    plots.title(fig, plots.BOTH, f"survey blog, Batch Size: measured $\\beta$ of the target and the blog's E[speedup] "
                                 f"formula with it ({context_tokens}-token prefixes)")
    return fig


def task_speedup_figure(table: Sequence[dict], gamma: int):
    """Survey blog, Results: speculative sampling over AR per suite and decoding with its paired-bootstrap interval,
    the blog's E[speedup] from the measured α, c and β, and Chen et al.'s Table 1 beside them. ``table``:
    :func:`.survey.task_speedup_table`'s rows."""
    fig, ax = plots.figure(width=6.4, height=4.0)
    x = np.arange(len(table))
    speedups = np.array([r["speedup"] for r in table])
    errors = np.array([[r["speedup"] - r["speedup_low"], r["speedup_high"] - r["speedup"]] for r in table]).T  # [2, n]
    ax.bar(x, speedups, 0.6, color=["C0" if r["decoding"] == "greedy" else "C1" for r in table], alpha=0.8)
    ax.errorbar(x, speedups, yerr=errors, fmt="none", ecolor="k", capsize=3, lw=0.8,
                label="ours (measured), 95% paired bootstrap interval")
    ax.plot(x, [r["predicted_speedup"] for r in table], "_", color="C3", ms=14, mew=2,
            label="blog's E[speedup] from our $\\alpha$, $c$, $\\beta$ (theory)")
    paper = [(i, r["paper_speedup"]) for i, r in enumerate(table) if r["paper_speedup"] is not None]
    plots.document_marker(ax, *zip(*paper),
                          label="Chen et al. 2023, Table 1: Chinchilla 70B, 4B draft, TPU v4, batch 1")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(x, [f"{r['suite']}\n{r['decoding']} (T = {r['temperature']:g})" for r in table], fontsize=7)
    ax.set(ylabel="speculative sampling over AR (tokens/s)", ylim=(0, max(2.7, float(speedups.max()) * 1.15)))
    plots.legend(ax, "below", ncol=1)
    plots.title(fig, plots.BOTH, f"speedup by task: speculative sampling, $\\gamma$ = {gamma}, beside Chen et al.")
    return fig


# ------------------------------------------------------------------ the summary: our numbers beside the documents'

VERDICT_AT = "decided in mentored_speed_quality/verdicts.md (mentored.speedup_within_quality_noise), not here"
BLOG_SAYS = {"staged": "the draft 'suffers from sequential decoding problems': staging should cut its calls",
             "fused": "'an interesting avenue to investigate' (measured, no claim)",
             "prompt lookup alone": "the zero-cost draft by itself (reference)"}


def summary_markdown(header: str, at_bound: Sequence[dict], run_range: float, chart_rows: Sequence[dict],
                     speculative_mean: float, n_rows: int, cost_rows: Sequence[dict], table_staged: Sequence[dict],
                     beta: Callable[[int, int], float], batches: Sequence[int], batch_gammas: Sequence[int],
                     table_task: Sequence[dict]) -> str:
    """The notebook's closing table, ours beside the documents', computed from the tables above (nothing typed
    in): mentored over speculative at the largest D within the lossless range, one-token acceptance at a few D,
    the solver's cost, staged and fused against the draft alone, β(B, γ+1) at B = 1, 8, 64 (``beta(B, n)``) and
    the speedups by task beside Chen et al. Decides nothing."""
    best = max((g for g in at_bound if g["mentored_over_speculative"] is not None), default=None,
               key=lambda g: g["mentored_over_speculative"])
    staged_rows = {r["method"]: r for r in table_staged}
    lines = [header, "", "| quantity | ours | document |", "|---|---|---|"]
    if best is None:
        lines.append(f"| mentored over speculative at the largest D whose ROUGE-L drop ≤ the lossless runs' range | no "
                     f"such D (range {run_range:.4f}) | {VERDICT_AT} |")
    else:
        lines.append(f"| mentored over speculative at the largest D whose ROUGE-L drop ≤ the lossless runs' range | "
                     f"{best['mentored_over_speculative']:.2f}× (γ = {best['gamma']}, D = "
                     f"{best['largest_D_drop_within_run_range']:g}; range {run_range:.4f}) | {VERDICT_AT} |")
    shown = sorted({min(chart_rows[1:], key=lambda r: abs(r["D"] - want))["D"] for want in (0.1, 0.5, 1.0)})
    lines.append(f"| one-token acceptance, mean over {n_rows} real rows | D = 0 (speculative): {speculative_mean:.3f}; "
                 + "; ".join(f"D = {r['D']:g}: {r['mean_accept']:.3f}" for r in chart_rows if r["D"] in shown)
                 + " | chart only, no numbers |")
    lines.append(f"| solver cost per row / one target forward | {cost_rows[0]['vs_target_forward_1_token']:.2f} "
                 f"({cost_rows[0]['ms']:.1f} ms vs {cost_rows[2]['ms']:.1f} ms) | 'a small fraction' |")
    for name, says in BLOG_SAYS.items():
        r = staged_rows[name]
        same = "n/a" if r["identical_to_ar"] is None else f"{r['identical_to_ar']:.0%}"
        lines.append(f"| {name} vs the draft model alone (T = 0) | {r['speed_over_draft_alone']:.2f}× tokens/s; draft "
                     f"calls per token {r['draft_calls_per_token']:.2f} vs "
                     f"{staged_rows['draft model alone']['draft_calls_per_token']:.2f}; records identical to AR: "
                     f"{same} | {says} |")
    for b in (1, 8, 64):
        if b in batches:
            lines.append(f"| β(B = {b}, γ+1) | " + ", ".join(f"γ = {g}: {beta(b, g + 1):.2f}" for g in batch_gammas)
                         + " | → γ+1 when compute bound |")
    for r in table_task:
        paper = (f"{r['paper_speedup']:.2f}× ({r['paper_task']}, {r['paper_decoding']}; Chen et al. 2023, Table 1)"
                 if r["paper_speedup"] is not None else "Table 1 has no such row")
        lines.append(f"| speculative over AR, {r['suite']}, {r['decoding']} | {r['speedup']:.2f}× "
                     f"[{r['speedup_low']:.2f}, {r['speedup_high']:.2f}], α = {r['alpha']:.2f} | {paper} |")
    return "\n".join(lines)
