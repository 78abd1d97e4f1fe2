"""The figures of ``notebooks/ppd_parallel_prompt_decoding.ipynb``, drawn from the tables of :mod:`.ppd` beside the
PPD paper's printed numbers: each function returns a titled matplotlib Figure that the notebook saves with its
footer (``Artifacts.figure``), so the notebook only orchestrates and the drawing is tested here.

Notation: τ = accept length (tokens per target call), n = tree size, m = prompt tokens, L_fp = the latency of one
target forward, EPT = ensemble prompt tokens per prompt token.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from simulations import ppd as sim_ppd

from ..run import plots
from .ppd import (PAPER_FIG5_CODE_MATH, PAPER_FIG5_RANGE, PAPER_FIG9, PAPER_GPU, PAPER_RUNTIME_MEMORY_PCT,
                  PAPER_TRAIN_HOURS, paper_speedup, paper_table1, smooth)


def fig6_topk_figure(acc_ppd: np.ndarray, acc_medusa: np.ndarray, acc_ept: dict[int, np.ndarray], target: str):
    """Fig. 6: accumulative top-k accuracy by token distance, (a) PPD against Medusa with the paper's printed PPD
    anchors, (b) 1, 2 and 3 EPTs. ``acc_ppd`` [m, k], ``acc_medusa`` [heads, k], ``acc_ept`` {EPTs: [d, k]}."""
    fig, axes = plots.figure(1, 2, width=10, height=4.2)
    ks = np.arange(1, acc_ppd.shape[1] + 1)
    for d in range(3):
        axes[0].plot(ks, acc_ppd[d], "o-", ms=3, color=f"C{d}", label=f"PPD @{d + 1}")
        axes[0].plot(ks, acc_medusa[d], "s--", ms=3, color=f"C{d}", alpha=0.6, label=f"Medusa @{d + 1}")
    for d, anchor in sim_ppd.PAPER_TOPK_ANCHORS.items():  # top-1 and top-5 at distances 1 and 2
        plots.document_marker(axes[0], list(anchor), list(anchor.values()),
                              "PPD paper, Table 3: 1 EPT, KD, 12 epochs, batch 4\n(Alpaca, 20 steps), @1 and @2"
                              if d == 1 else None)
        axes[0].annotate(f"@{d}", (5, anchor[5]), textcoords="offset points", xytext=(6, -3), fontsize=7)
    axes[0].set(xlabel="k (top-k)", ylabel="accumulative accuracy", ylim=(0, 1.02), title="(a) PPD vs Medusa (zoo)")
    for i, (e, a) in enumerate(sorted(acc_ept.items())):
        for d in range(2):
            axes[1].plot(ks, a[d], ["o-", "s--"][d], ms=3, color=f"C{i}", label=f"{e} EPT @{d + 1}")
    axes[1].set(xlabel="k (top-k)", ylim=(0, 1.02), title="(b) EPTs per prompt token (ablation budget)")
    for ax in axes:
        plots.legend(ax, "below", ncol=3)
    plots.title(fig, plots.MEASURED, f"accumulative top-k accuracy by token distance, {target} (held-out "
                "target-written data), beside the PPD paper's printed values")
    return fig


def fig9_loss_figure(runs: Sequence[tuple[str, dict, int]], target: str):
    """Fig. 9: per run (label, training record, the paper's EPTs beside it) one panel of the loss per step, its
    moving average over 25 steps, the held-out loss and the levels the paper's Appendix A text gives."""
    fig, axes = plots.figure(1, len(runs), width=5.2 * len(runs), height=5.0, squeeze=False)
    for ax, panel, (label, rec, paper_epts) in zip(axes[0], "ab", runs):
        losses = rec["train"]["losses"]
        ax.plot(np.arange(len(losses)), losses, color="0.8", lw=0.5, label="per step")
        smoothed = smooth(losses)
        ax.plot(np.arange(len(smoothed)) + 12, smoothed, color="C0", label="moving average (25)")
        if rec["train"]["val_losses"]:
            v = np.array(rec["train"]["val_losses"])  # [checks, 2]: step, loss
            ax.plot(v[:, 0], v[:, 1], "o", color="C3", ms=3, label="held-out")
        for (level, said), style in zip(PAPER_FIG9[paper_epts].values(), ("--", ":")):
            ax.axhline(level, color="k", ls=style, lw=0.9, label=f"PPD paper, {paper_epts} EPT: {said} (App. A text)")
        ax.set(xlabel="step (one conversation, random anchors)", ylabel="loss (Eq. 1)", title=f"({panel}) {label}")
        plots.legend(ax, "below", ncol=1)
    plots.title(fig, plots.MEASURED, f"training loss of PPD prompt tokens on {target} (backbone frozen), beside the "
                "PPD paper's Fig. 9 levels")
    return fig


def fig8a_figure(fig8a: Sequence[dict], target: str, prompts: int, max_new: int):
    """Fig. 8(a): measured and theoretical τ against tree size for dynamic, static and random trees
    (:func:`.ppd.accept_length_row`'s rows)."""
    fig, ax = plots.figure(width=6.8, height=3.6)
    ns = [r["tree_size"] for r in fig8a]
    for i, kind in enumerate(("dynamic", "static", "random")):
        ax.plot(ns, [r[f"tau_{kind}"] for r in fig8a], "o-", color=f"C{i}", label=f"{kind} (measured)")
        ax.plot(ns, [r[f"tau_theory_{kind}"] for r in fig8a], ":", color=f"C{i}", label=f"{kind} (theory, Prop. 4.4)")
    ax.set(xlabel="tree size n (candidates + their prompt tokens)", ylabel=r"accept length $\tau$ (tokens / call)")
    plots.legend(ax)
    plots.title(fig, plots.BOTH, f"accept length against tree size, PPD on {target}, T = 0; {prompts} prompts x "
                f"{max_new} tokens")
    return fig


def fig8bc_figure(fig8b: Sequence[dict], both: Sequence[dict], ratio: float, chosen: int, chosen_speedup: float,
                  target: str):
    """Fig. 8(b/c): the theoretical speedup against tree size (:func:`.ppd.theoretical_speedups`' rows, lines) and the
    bench's measured points on both baselines (``both``: ``trees.profile_baseline_speedups``), plain decoding on the
    theory's baseline (``ratio``) and the hardware-aware size ``chosen`` at its measured speedup."""
    fig, ax = plots.figure(width=7.2, height=3.8)
    sizes = [r["tree_size"] for r in fig8b]
    ax.plot(sizes, [r["speedup_theory_tau"] for r in fig8b], ":", color="C0",
            label=r"theory $\tau$, profiled $L_{\mathrm{fp}}$ (baseline $L_{\mathrm{fp}}(1)$)")
    ax.plot(sizes, [r["speedup_measured_tau"] for r in fig8b], "-", color="C0",
            label=r"measured $\tau$ (Fig. 8a), profiled $L_{\mathrm{fp}}$ (baseline $L_{\mathrm{fp}}(1)$)")
    ax.plot([b["tree_size"] for b in both], [b["speedup_vs_L_fp1"] for b in both], "o", color="C3",
            label=r"measured speed, baseline $L_{\mathrm{fp}}(1)$ (same as the lines)")
    ax.plot([b["tree_size"] for b in both], [b["speedup_vs_plain"] for b in both], "o", mfc="none", color="C3",
            label="measured speedup, baseline: the bench's plain decoding")
    ax.axhline(ratio, color="0.5", ls="--", lw=0.8,
               label=rf"plain decoding on the $L_{{\mathrm{{fp}}}}(1)$ baseline: {ratio:.2f}")
    ax.axvline(chosen, color="C2", ls="-.", lw=1.0,  # a line, not a marker: the measured points stay visible
               label=f"hardware-aware n = {chosen} (measured there: {chosen_speedup:.2f}x on the bench baseline)")
    ax.axhline(1, color="0.5", lw=0.8)
    ax.set(xlabel="tree size n", ylabel="speedup")
    plots.legend(ax)
    plots.title(fig, plots.BOTH, f"PPD speedup against tree size on this CPU, {target}, T = 0")
    return fig


def fig4_fig5_figure(fig4: Sequence[dict], fig5: Sequence[dict], target: str):
    """Fig. 4 and Fig. 5: (a) the speedup of every method over plain decoding (:func:`.ppd.methods_table`), (b) the
    throughput of plain decoding and PPD by suite and (c) PPD's speedup by suite
    (:func:`.ppd.throughput_by_suite`), beside the paper's Table 1 throughputs and §5.1 range."""
    fig, axes = plots.figure(1, 3, width=14, height=4.6)
    paper_7b = f"Vicuna-7B, MT-Bench non-greedy, {PAPER_GPU}"
    axes[0].bar([r["method"] for r in fig4], [r["speedup"] for r in fig4], color="C0", label="ours, pooled")
    axes[0].plot([r["method"] for r in fig4], [r["speedup_median"] for r in fig4], "kD", ms=4,
                 label="ours, per-prompt median")
    plots.document_marker(axes[0], ["ppd", "medusa"], [paper_speedup("Vicuna-7B", m) for m in ("PPD", "Medusa")],
                          f"PPD paper, Table 1 throughputs (T / T vanilla):\n{paper_7b}")
    axes[0].axhline(1, color="0.5", lw=0.8)
    axes[0].set(ylabel="speedup over plain decoding", title="(a) Fig. 4: methods, same prompts and run")
    axes[0].tick_params(axis="x", labelrotation=20, labelsize=7)
    x = np.arange(len(fig5))
    mobile = {m: paper_table1("MobileLLaMA", m)["throughput"] for m in ("vanilla", "PPD")}
    axes[1].bar(x - 0.2, [r["ar_tok_s"] for r in fig5], 0.4, label="ours, vanilla")
    axes[1].bar(x + 0.2, [r["ppd_tok_s"] for r in fig5], 0.4, label="ours, PPD")
    # The paper's numbers stand in a slot of their own, past our suites: its MT-Bench is not one of our bars.
    paper_x = len(fig5)
    plots.document_marker(axes[1], [paper_x - 0.2, paper_x + 0.2], [mobile["vanilla"], mobile["PPD"]],
                          f"PPD paper, Table 1: MobileLLaMA, MT-Bench, T = 0,\n{PAPER_GPU} (left vanilla, right PPD)")
    labels = [r["suite"] for r in fig5] + ["paper:\nMT-Bench"]
    axes[1].set_xticks(np.arange(paper_x + 1), labels, fontsize=7)
    axes[1].set_yscale("log")  # a 135M model on one CPU thread beside a 1.4B one on a GPU
    axes[1].set(ylabel="tokens / s", title="(b) Fig. 5: throughput by task")
    axes[2].bar(x, [r["ppd_speedup"] for r in fig5], 0.5, color="C1", label="ours, PPD over vanilla")
    low, high = PAPER_FIG5_RANGE
    axes[2].axhline(low, color="k", ls="--", lw=0.9, label=f"PPD paper: {low}x, lowest (§5.1; T = 0, every task,\n"
                    "MobileLLaMA to Vicuna-13B, A100-40GB and RTX 4090, fp16, batch 1)")
    axes[2].axhline(high, color="k", ls="-.", lw=0.9, label=f"PPD paper: {high}x, highest (§5.1; code and math "
                    f"{PAPER_FIG5_CODE_MATH[0]}x to {high}x)")
    plots.document_marker(axes[2], [paper_x], [paper_speedup("MobileLLaMA", "PPD")],
                          "PPD paper, Table 1 throughputs: MobileLLaMA,\nMT-Bench, T = 0 (108.7 / 50.2)")
    axes[2].axhline(1, color="0.5", lw=0.8)
    axes[2].set_xticks(np.arange(paper_x + 1), labels, fontsize=7)
    axes[2].set(ylabel="PPD speedup over plain decoding", title="(c) Fig. 5: PPD speedup by task")
    for ax in axes:
        plots.legend(ax, "below", ncol=1)
    plots.title(fig, plots.MEASURED, f"speedup and throughput of PPD on {target} at T = 0, beside the PPD paper's "
                "printed numbers")
    return fig


def fig7_fig1_figure(fig7: Sequence[dict], target: str):
    """Fig. 7 and Fig. 1: (a) the extra weights of each method as a share of the target's, (b) that share against
    the measured speedup with the training time as the circle's area (:func:`.ppd.memory_table`'s rows), beside the
    paper's Table 1 and abstract numbers."""
    fig, axes = plots.figure(1, 2, width=11, height=4.4)
    names, colors = [r["method"] for r in fig7], ["C2", "C1", "C0"]
    p_tr = {m: paper_table1("Vicuna-7B", m)["trainable_pct"] for m in ("PPD", "Medusa")}
    axes[0].bar(names, [r["extra_pct_of_target"] for r in fig7], color=colors,
                label="ours, extra weights (one colour a method)")
    for i, r in enumerate(fig7):
        axes[0].annotate(f"{r['extra_weight_MB']:.3g} MB ({r['bench_dtype']})", (i, r["extra_pct_of_target"]),
                         ha="center", fontsize=7, textcoords="offset points", xytext=(0, 3))
    plots.document_marker(axes[0], ["PPD", "Medusa"], [p_tr["PPD"], p_tr["Medusa"]],
                          "PPD paper, Table 1 trainable parameters: Vicuna-7B")
    axes[0].axhline(PAPER_RUNTIME_MEMORY_PCT, color="k", ls="--", lw=0.9,
                    label="PPD paper: PPD runtime memory overhead 0.0004 %\n(abstract; model not named)")
    axes[0].set_yscale("log")
    pcts = [r["extra_pct_of_target"] for r in fig7] + [p_tr["PPD"]]
    axes[0].set_ylim(min(pcts) / 5, 30 * max(pcts))  # room for the labels above the bars and the paper's PPD star
    axes[0].set(ylabel="extra weights (% of the target's parameters)", title="(a) Fig. 7: memory overhead")
    axes[0].tick_params(axis="x", labelsize=7)
    for r, c in zip(fig7, colors):
        axes[1].scatter(r["extra_pct_of_target"], r["speedup"], s=30 + 4 * r["train_cpu_min"], color=c, alpha=0.6,
                        label=f"ours, {r['method']} ({r['train_cpu_min']:.0f} CPU-min training)")
    plots.document_marker(axes[1], [p_tr["PPD"], p_tr["Medusa"]],
                          [paper_speedup("Vicuna-7B", m) for m in ("PPD", "Medusa")],
                          f"PPD paper, Table 1: Vicuna-7B, MT-Bench non-greedy,\n{PAPER_GPU};\nleft PPD "
                          f"({PAPER_TRAIN_HOURS:g} h on one A100-40GB), right Medusa")
    axes[1].axhline(1, color="0.5", lw=0.8)
    axes[1].set_xscale("log")
    axes[1].set(xlabel="extra weights (% of the target's parameters)", ylabel="speedup over plain decoding",
                title="(b) Fig. 1: circle area ~ training time")
    plots.legend(axes[0], "below", ncol=1)
    plots.legend(axes[1], "below", ncol=1, markerscale=0.5)  # the circles' legend entries at half size
    plots.title(fig, plots.MEASURED, f"memory, speedup and training cost of PPD, Medusa and a draft model on "
                f"{target}, beside the PPD paper's printed numbers")
    return fig
