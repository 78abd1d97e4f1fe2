"""The figures of ``notebooks/eagle_feature_draft.ipynb``, drawn from the tables of :mod:`.eagle` beside the anchors'
and the PPD paper's printed numbers: each function returns a titled matplotlib Figure that the notebook saves with
its footer (``Artifacts.figure``), so the notebook only orchestrates and the drawing is tested here.

Notation: d = draft position (tree depth), a_d = held-out acceptance at d, τ = accept length (tokens per target
call), n = tree size.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.ticker import NullLocator

from ..run import plots
from .common import rows_of
from .eagle import (ANCHORS, LEARNING_ANCHORS, PAPER_TABLE1_SETTING, SGLANG, SPEC_BENCH, describe, paper_memory_points,
                    paper_speedups)


def fig1_accept_figure(ablations: dict, depth: int, target: str):
    """Fig. 1: held-out acceptance by draft position of each trained variant (``ablations``: the zoo's ablation
    record), through the draft's head (solid) and the full LM head (dashed), the shipped variant drawn thicker."""
    fig, ax = plots.figure(width=7.6, height=3.8)
    for i, v in enumerate(ablations["variants"]):
        d = np.arange(1, len(v["accept_by_position"]) + 1)
        shipped = v["name"] == ablations["shipped"]
        ax.plot(d, v["accept_by_position"], "o-", ms=4, lw=2.2 if shipped else 1.2, color=f"C{i}",
                label=f"{v['name']}{' (shipped)' if shipped else ''}: {describe(v)}")
        ax.plot(d, v["accept_by_position_full_head"], "s--", ms=4, mfc="none", lw=1.0, color=f"C{i}")
    ax.plot([], [], "k-", label="solid: through the draft's own head")
    ax.plot([], [], "k--", label="dashed: the same draft, full LM head")
    ax.set(xlabel="draft position $d$ (tree depth)", ylabel=r"acceptance $a_d$ (top-1, given $d-1$ right)",
           ylim=(0, 1.02))
    ax.set_xticks(np.arange(1, depth + 1))
    plots.legend(ax)
    plots.title(fig, plots.MEASURED, f"held-out acceptance by draft position of each EAGLE variant on {target}")
    return fig


def fig2_tau_figure(fig2: Sequence[dict], chain: dict, top_k: int, depth: int, target: str, prompts: int,
                    max_new: int):
    """Fig. 2: measured τ against tree size for the dynamic, static and random trees (:func:`.eagle.tau_row`'s
    rows) with the static tree's theory, and the top-1 chain of ``depth`` (:func:`.eagle.chain_row`) as a line."""
    fig, ax = plots.figure(width=7.4, height=3.8)
    ns = [r["tree_size"] for r in fig2]
    ax.plot(ns, [r["tau_dynamic"] for r in fig2], "o-", label=f"measured, dynamic tree (EAGLE-2, top-{top_k})")
    ax.plot(ns, [r["tau_static"] for r in fig2], "s-", label="measured, static tree (held-out rank probabilities)")
    ax.plot(ns, [r["tau_random"] for r in fig2], "^--", label="measured, random tree")
    ax.plot(ns, [r["tau_theory_static"] for r in fig2], "k:", label=r"theory $1 + f(T)$, static tree")
    ax.axhline(chain["tau_chain"], color="grey", lw=0.8,
               label=f"measured, top-1 chain of {depth}: {chain['tau_chain']:.2f} "
                     f"(theory {chain['tau_theory_chain']:.2f})")
    ax.set(xscale="log", xlabel="tree size $n$ (candidate nodes)",
           ylabel=r"accept length $\tau$ (tokens / target call)")
    ax.set_xticks(ns, [str(n) for n in ns], minor=False)  # the sizes measured, as plain numbers
    ax.tick_params(axis="x", which="minor", labelbottom=False)
    plots.legend(ax)
    plots.title(fig, plots.BOTH, f"accept length against tree size, EAGLE on {target}, T = 0; {prompts} prompts "
                f"x {max_new} tokens")
    return fig


def fig3_speedup_figure(results: Mapping[float, object], shown: Sequence[str], speed_dtype: str, target: str):
    """Fig. 3: one panel per temperature (``results``: temperature -> its interleaved bench), the speedup of each
    ``shown`` variant over the same run's plain decoding with its τ above the bar; beside them at T = 0 the anchors'
    speedups (Spec-Bench, SGLang) and at T = 1 the PPD paper's Table 1, all on another model and hardware."""
    fig, axes = plots.figure(1, 2, width=12.5, height=4.4, sharey=True)
    x = np.arange(len(shown))
    for ax, temperature in zip(axes, results):
        rows = rows_of(results[temperature])
        ups = [rows[v]["speedup"] or 0.0 for v in shown]
        bars = ax.bar(x, ups, color=["C3" if v.startswith("eagle") else "C0" for v in shown],
                      label=f"measured over this run's AR ({speed_dtype})")
        for b, v in zip(bars, shown):
            tpc = rows[v]["tokens_per_call"]
            ax.annotate(r"$\tau$ " + (f"{tpc:.2f}" if tpc else "n/a"), (b.get_x() + b.get_width() / 2, b.get_height()),
                        ha="center", fontsize=7, textcoords="offset points", xytext=(0, 2))
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xticks(x, shown, rotation=30, ha="right")
        ax.set(title=f"T = {temperature:g}", xlabel="method (bench label)")
        if temperature == 0.0:  # the anchors: another model and other hardware
            for marker, setting in (("D", SPEC_BENCH), ("^", SGLANG)):
                pts = [(shown.index(label), value, name) for label, name, value, where, _ in ANCHORS
                       if where == setting and label in shown]
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=marker, s=60, facecolors="none",
                           edgecolors="black", zorder=5,
                           label=(f"{setting}\n(" + ", ".join(f"{n} {v:g}x" for _, v, n in pts)
                                  + "; another model and hardware)"))
        else:  # the PPD paper's own Table 1 speedups, non-greedy
            paper = paper_speedups()  # bench label -> (method, speedup, τ)
            plots.document_marker(ax, [shown.index(label) for label in paper], [up for _, up, _ in paper.values()],
                                  PAPER_TABLE1_SETTING.replace(": ", ":\n", 1) + "\n(Medusa, PPD; another model "
                                  "and hardware)")
    entries = {}  # label -> handle over both panels (the bars' entry once)
    for ax in axes:
        entries.update(zip(*reversed(ax.get_legend_handles_labels())))
    plots.legend(axes[1], handles=list(entries.values()), labels=list(entries))  # one legend beside both panels
    axes[0].set_ylabel("speedup over plain decoding (same run)")
    plots.title(fig, plots.MEASURED, f"speedup of the lossless methods over plain decoding on {target}, one "
                "interleaved bench per temperature, beside the anchors (another model and hardware)")
    return fig


def fig4_memory_figure(memory: Sequence[dict], shares: Sequence[dict], target: str):
    """Fig. 4 (the PPD paper's Fig. 7): (a) the extra weights of each method as a share of the target's
    (:func:`.eagle.memory_rows`), (b) PPD's overhead as a share of Medusa's and EAGLE's
    (:func:`.eagle.ppd_share_rows`), beside the PPD paper's printed numbers."""
    fig, axes = plots.figure(1, 2, width=11.0, height=4.4)
    names = [r["method"] for r in memory]
    axes[0].bar(names, [r["extra_pct_of_target"] for r in memory], color=["C3", "C1", "C2", "C0"],
                label="ours, extra weights (% of the target's parameters)")
    for i, r in enumerate(memory):
        axes[0].annotate(f"{r['extra_MB_at_run_dtype']:.3g} MB ({r['run_dtype']})", (i, r["extra_pct_of_target"]),
                         ha="center", fontsize=7, textcoords="offset points", xytext=(0, 3))
    points = paper_memory_points()
    plots.document_marker(axes[0], [names.index("PPD"), names.index("Medusa")],
                          [points["PPD (Table 1)"], points["Medusa (Table 1)"]],
                          "PPD paper, Table 1 trainable parameters (PPD, Medusa):\nVicuna-7B, another model")
    axes[0].axhline(points["PPD runtime (abstract)"], color="k", ls="--", lw=0.9,
                    label="PPD paper: PPD runtime memory overhead 0.0004 %\n(abstract; model not named)")
    axes[0].set_yscale("log")
    pcts = [r["extra_pct_of_target"] for r in memory] + list(points.values())
    axes[0].set_ylim(min(pcts) / 5, 30 * max(pcts))  # room for the labels above the bars
    axes[0].set(ylabel="extra weights (% of the target's parameters)", title="(a) memory overhead by method")
    axes[0].tick_params(axis="x", labelsize=7)
    xs = np.arange(len(shares))
    axes[1].bar(xs, [s["ours_pct"] for s in shares], color="C2", label=f"ours ({target}), extra parameters")
    plots.document_marker(axes[1], xs, [s["paper_pct"] for s in shares],
                          "PPD paper §5.3 (Fig. 7): 0.004 % of Medusa's,\n0.007 % of Eagle's "
                          "(Vicuna-7B, another model)")
    axes[1].set_xticks(xs, [s["ratio"].replace(" as % of", "\nas % of") for s in shares], fontsize=7)
    axes[1].set_yscale("log")
    shares_pct = [s["ours_pct"] for s in shares] + [s["paper_pct"] for s in shares]
    axes[1].set_ylim(min(shares_pct) / 3, 3 * max(shares_pct))
    axes[1].set(ylabel="PPD's overhead as % of the other's", title="(b) PPD's overhead relative to Medusa and EAGLE")
    plots.legend(axes[0], "below", ncol=1)
    plots.legend(axes[1], "below", ncol=1)
    plots.title(fig, plots.MEASURED, f"memory overhead of EAGLE, Medusa, PPD and a draft model on {target} (PPD "
                "paper Fig. 7), beside the paper's printed numbers")
    return fig


def learning_curve_figure(rows: Sequence[dict], target: str):
    """Left: held-out top-1 acceptance at depth 1 (solid) and 2 (dashed) of EAGLE, Medusa and PPD against the
    conversations their data held (the final weights of each run; EAGLE's shorter run on the larger data hollow),
    with the other-model anchors at depth 1 (dotted). Right: the shipped PPD prompt tokens during training, against
    the conversations seen, by token distance."""
    fig, (ax, bx) = plots.figure(ncols=2, width=11.0, height=5.2)
    final = [r for r in rows if r["conversations_seen"] is None]
    for i, method in enumerate(("EAGLE", "Medusa", "PPD")):
        mine = [r for r in final if r["method"] == method]
        best = {}  # the most-trained run on each data size
        for r in mine:
            key = (r["conversations_written"], r["depth"])
            best[key] = max(best.get(key, r), r, key=lambda x: x["steps"])
        for depth, style in ((1, "o-"), (2, "s--")):
            pts = sorted((w, r) for (w, d), r in best.items() if d == depth)
            ax.plot([w for w, _ in pts], [r["top1"] for _, r in pts], style, color=f"C{i}", ms=5,
                    label=f"{method}, depth {depth}" + (f" ({', '.join(str(r['steps']) for _, r in pts)} steps)"
                                                       if depth == 1 else ""))
            for r in (r for r in mine if r["depth"] == depth and r is not best[(r["conversations_written"], depth)]):
                ax.plot(r["conversations_written"], r["top1"], style[0], mfc="none", color=f"C{i}", ms=6)
                ax.annotate(f"{r['steps']} steps", (r["conversations_written"], r["top1"]), fontsize=7,
                            xytext=(4, -9), textcoords="offset points", color=f"C{i}")
    for method, value, source in LEARNING_ANCHORS:
        color = f"C{('EAGLE', 'Medusa', 'PPD').index(method)}"
        ax.axhline(value, ls=":", lw=1.2, color=color)
        ax.annotate(f"{method} anchor {value:g} ({source})", (0.01, value), xycoords=("axes fraction", "data"),
                    fontsize=7, xytext=(0, 3), textcoords="offset points", color=color)
    ax.set_xscale("log")
    ticks = sorted({r["conversations_written"] for r in final})
    ax.set_xticks(ticks, [f"{t:,}" for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlim(ticks[0] / 1.4, ticks[-1] * 1.4)
    ax.set(xlabel="target-written conversations in the training data (every 20th held out)",
           ylabel="held-out top-1 acceptance", ylim=(0, 1.0))
    plots.legend(ax, where="below")
    during = [r for r in rows if r["conversations_seen"] is not None]
    for d in sorted({r["depth"] for r in during}):
        pts = sorted((r["conversations_seen"], r["top1"]) for r in during if r["depth"] == d)
        bx.plot(*zip(*pts), "o-", ms=4, color=f"C{d + 2}", label=f"prompt token {d} (token distance {d})")
    bx.set(xlabel="conversations seen in training (steps × 1)", ylabel="held-out top-1 accuracy", ylim=(0, 0.6))
    bx.set_title("PPD prompt tokens during training (shipped run)", fontsize=9)
    plots.legend(bx, where="below", ncol=1)
    plots.title(fig, plots.MEASURED, f"learning curve of the trained proposers on {target}: held-out acceptance "
                                     f"against data ({rows[0]['held_out_conversations']} held-out conversations)")
    return fig
