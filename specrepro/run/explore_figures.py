"""The explorer's theory figures, each redrawn from the analytic models of ``simulations/`` (numpy only, each well
under a second): :func:`tokens_figure`, :func:`speedup_figure`, :func:`tree_figure`, :func:`moe_figure`,
:func:`mentored_figure`, and the measured :func:`step_split_figure`. Where a committed bench measured a method
(``explore_benches.bench_points``), its point sits on the theory, labelled with its device. Figures are built
outside pyplot with a fixed layout and the footer inside (:func:`figure_grid`, :func:`place_footer`), so that a
widget redraws one quickly without leaking figures.
"""
from __future__ import annotations

import functools
import io
from typing import Callable

import numpy as np
from matplotlib.figure import Figure

import simulations as sim

from . import plots
from ..core.provenance import git_revision
from .explore_benches import CHAIN_METHODS, TREE_METHODS, BenchPoint, StepSplit, at_temperature
from .explore_costs import Controls, beta_of, cost_ratio, describe_costs

PROFILE_FOOTER = "explorer"  # the footer's profile field: live figures, not a make-figures profile


def figure_grid(ncols: int, width: float, height: float = 4.0):
    """A figure outside pyplot (widgets redraw without leaking figures) with a fixed layout: no layout engine, whose
    extra pass would double the time of a redraw; ``png`` crops to what was drawn."""
    fig = Figure(figsize=(width, height), layout="none")
    axes = fig.subplots(1, ncols)
    fig.subplots_adjust(left=0.08, right=0.97, bottom=0.33, top=0.9, wspace=0.3)
    return fig, np.atleast_1d(axes)


def _footer(fig: Figure, kind: str, ctrl: Controls, note: str = "", measured: bool = False) -> None:
    device = "committed benches' devices, as labelled" if measured else "none (analytic)"
    footer = plots.Footer(kind, model="see labels" if measured else "none (analytic)", device=device,
                          profile=PROFILE_FOOTER, commit=commit_label(), note=note or describe_costs(ctrl))
    place_footer(fig, footer)


def place_footer(fig: Figure, footer: plots.Footer) -> None:
    """``plots.draw_footer``, moved from under the figure into its bottom margin: ``png`` draws the fixed layout once,
    without the extra pass that cropping to a footer outside the figure would take."""
    plots.draw_footer(fig, footer)
    for text in fig.texts:
        if text.get_gid() == plots.FOOTER_GID:
            text.set_position((0.01, 0.01))
            text.set_verticalalignment("bottom")


@functools.lru_cache(maxsize=1)
def commit_label() -> str:
    """The commit for the footers, short, with "(with uncommitted changes)" when the code differs from it (the
    figures and executed notebooks do not count); read once per session."""
    revision = git_revision(ignore=("figures", "notebooks/executed"))
    return revision[:10] + revision[40:]


def _measured(ax, points: list[BenchPoint], x: Callable[[BenchPoint], float | None],
              y: Callable[[BenchPoint], float]) -> int:
    """Scatter the points, one marker and one legend entry per committed bench (its device and temperature), each
    point annotated with its method and dtype; returns how many were drawn."""
    shown = 0
    for k, bench in enumerate(sorted({p.bench for p in points})):
        group = [p for p in points if p.bench == bench and x(p) is not None]
        if not group:
            continue
        ax.scatter([x(p) for p in group], [y(p) for p in group], marker="DsP^v"[k % 5], s=28, edgecolors="black",
                   linewidths=0.6, zorder=6, color=f"C{3 + k}",
                   label=f"measured, bench {bench}: {group[0].device}, T = {group[0].temperature:g}"
                         + (f", B = {group[0].batch_size} (over batched AR)" if group[0].batch_size > 1 else ""))
        for p in group if len(group) <= 4 else []:  # a larger bench's labels would cover each other
            ax.annotate(f"{p.method} {p.dtype}", (x(p), y(p)), fontsize=5.5, xytext=(3, 2),
                        textcoords="offset points", color="0.25")
        shown += len(group)
    return shown


def tokens_figure(ctrl: Controls, points: list[BenchPoint] | None = None) -> Figure:
    """E[tokens per step] = (1 − α^{γ+1}) / (1 − α) against γ, at the controls' α and three others; the committed
    chain benches' measured tokens per target call at their mean γ."""
    fig, (ax,) = figure_grid(1, 7.4)
    gammas = np.arange(1, ctrl.gamma_max + 1)
    for a in sorted({0.5, 0.7, 0.9} - {ctrl.alpha}):
        ax.plot(gammas, sim.expected_tokens(a, gammas), color="0.65", lw=1, label=f"α = {a:g}")
    ax.plot(gammas, sim.expected_tokens(ctrl.alpha, gammas), color="C0", lw=2, label=f"α = {ctrl.alpha:.2f}")
    ax.scatter([ctrl.gamma], [sim.expected_tokens(ctrl.alpha, ctrl.gamma)], s=60, color="C0", zorder=5,
               label=f"γ = {ctrl.gamma}: {float(sim.expected_tokens(ctrl.alpha, ctrl.gamma)):.2f} tokens")
    measured = _measured(ax, at_temperature(points or [], ctrl, CHAIN_METHODS), lambda p: p.mean_proposed,
                         lambda p: p.tokens_per_call)
    ax.set(xlabel="draft tokens per step γ", ylabel="tokens per target call")
    plots.legend(ax, "below", fontsize=6.5, ncol=2)
    plots.title(ax, plots.BOTH if measured else plots.THEORY, r"$E[\mathrm{tokens}] = (1-\alpha^{\gamma+1})/(1-\alpha)$")
    _footer(fig, plots.BOTH if measured else plots.THEORY, ctrl, note="α i.i.d. per token (slides 003 §3)",
            measured=bool(measured))
    return fig


def speedup_grid(ctrl: Controls, alphas: np.ndarray) -> np.ndarray:
    """Expected speedup [len(alphas), gamma_max] over AR at the controls' c and β(γ+1) (batch included)."""
    beta, c = beta_of(ctrl), cost_ratio(ctrl)
    return np.stack([np.asarray(sim.expected_speedup(alphas, g, c, beta(g + 1)), dtype=float)
                     for g in range(1, ctrl.gamma_max + 1)], axis=1)


def speedup_figure(ctrl: Controls, points: list[BenchPoint] | None = None) -> Figure:
    """Left: the speedup surface over (α, γ) with the optimal γ per α. Right: the speedup against α at the chosen γ
    and at the optimal γ, with the committed benches' measured speedups at their α (and the theory at each point's
    own c and β, hollow)."""
    fig, (left, right) = figure_grid(2, 11.0, 4.0)
    alphas = np.linspace(0.0, 0.98, 50)
    grid = speedup_grid(ctrl, alphas)  # [A, G]
    gammas = np.arange(1, ctrl.gamma_max + 1)
    image = left.pcolormesh(gammas, alphas, grid, shading="nearest", cmap="viridis")
    fig.colorbar(image, ax=left, label="expected speedup")
    left.contour(gammas, alphas, grid, levels=[1.0], colors="white", linewidths=1.0)
    left.plot(gammas[grid.argmax(axis=1)], alphas, color="red", lw=1.5, label="optimal γ")
    left.scatter([ctrl.gamma], [ctrl.alpha], marker="x", color="white", s=60, zorder=5, label="chosen (α, γ)")
    left.set(xlabel="γ", ylabel="α")
    plots.legend(left, "below", fontsize=7, ncol=2)
    plots.title(left, plots.THEORY, "speedup over AR (white: 1×)")
    now = grid[:, ctrl.gamma - 1]
    right.plot(alphas, now, color="C0", lw=2, label=f"γ = {ctrl.gamma}")
    right.plot(alphas, grid.max(axis=1), color="red", lw=1, ls="--", label="optimal γ")
    right.axhline(1.0, color="black", lw=0.8)
    chain = at_temperature(points or [], ctrl, CHAIN_METHODS)
    measured = _measured(right, chain, lambda p: p.alpha, lambda p: p.speedup)
    predicted = [p for p in chain if p.alpha is not None and p.predicted is not None]
    if predicted:
        right.scatter([p.alpha for p in predicted], [p.predicted for p in predicted], marker="D", s=30,
                      facecolors="none", edgecolors="0.3", zorder=5, label="theory at each point's α, γ, c, β")
    right.set(xlabel="α", ylabel="expected speedup")
    plots.legend(right, "below", fontsize=6.5, ncol=1)
    plots.title(right, plots.BOTH if measured else plots.THEORY,
                r"$(1-\alpha^{\gamma+1}) / ((1-\alpha)(\gamma c+\beta))$")
    _footer(fig, plots.BOTH if measured else plots.THEORY, ctrl, measured=bool(measured))
    return fig


def _tree_curves(alpha: float, sizes: tuple[int, ...], m: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """τ of the optimal (dynamic sparse) and static trees at each size, for top-k accuracies scaled from the PPD
    paper's so that the top-1 at distance 1 is ``alpha``."""
    points = np.array([_tree_point(alpha, int(n), m) for n in sizes])  # [len(sizes), 2]
    return points[:, 0], points[:, 1]


@functools.lru_cache(maxsize=4096)
def _tree_point(alpha: float, n: int, m: int) -> tuple[float, float]:
    """(τ of the optimal tree, τ of the static tree; NaN below m + 1 nodes) of size n. The optimal tree's candidate
    counts come from coordinate ascent (``simulations.ppd.optimal_tree``, checked against the exhaustive search in
    its tests), so that a redraw stays well under a second; each (α, n) is computed once."""
    rank = tree_rank_probs(alpha)
    dynamic = sim.ppd.accept_length(sim.ppd.optimal_tree(rank, n, m, search="coordinate"), rank)
    static = sim.ppd.accept_length(sim.ppd.static_tree(rank, n, m), rank) if n >= m + 1 else np.nan
    return float(dynamic), float(static)


def tree_rank_probs(alpha: float) -> np.ndarray:
    """Rank probabilities [3, 10]: the PPD paper's top-1/top-5 anchors at distances 1 and 2 scaled by α / 0.485
    (capped below 1), interpolated over k and extrapolated to distance 3 as in ``notebooks/theory_ppd``."""
    scale = max(alpha, 1e-3) / sim.ppd.PAPER_TOPK_ANCHORS[1][1]
    anchors = {d: {k: min(0.99, v * scale) for k, v in row.items()} for d, row in sim.ppd.PAPER_TOPK_ANCHORS.items()}
    anchor3 = {k: anchors[2][k] ** 2 / anchors[1][k] for k in (1, 5)}
    topk = np.stack([sim.ppd.topk_from_anchors(anchors[1][1], anchors[1][5]),
                     sim.ppd.topk_from_anchors(anchors[2][1], anchors[2][5]),
                     sim.ppd.topk_from_anchors(anchor3[1], anchor3[5])])
    return sim.ppd.rank_probabilities(topk)


TREE_SIZES = (2, 4, 8, 16, 32, 64)


def tree_figure(ctrl: Controls, points: list[BenchPoint] | None = None) -> Figure:
    """Left: τ against tree size (dynamic sparse and static trees, PPD §4). Right: the hardware-aware speedup
    τ(n) / β(n + 1) with its best size. The committed token-tree benches' tokens per call at their mean tree size."""
    sizes = tuple(sorted(set(TREE_SIZES) | {ctrl.tree_size}))
    dynamic, static = _tree_curves(round(ctrl.alpha, 2), sizes)
    fig, (left, right) = figure_grid(2, 11.0)
    left.plot(sizes, dynamic, "o-", ms=3, label="dynamic sparse tree (optimal)")
    left.plot(sizes, static, "s--", ms=3, label="static tree")
    i = sizes.index(ctrl.tree_size)
    left.scatter([ctrl.tree_size], [dynamic[i]], s=60, color="C0", zorder=5,
                 label=f"n = {ctrl.tree_size}: τ = {dynamic[i]:.2f}")
    measured = _measured(left, at_temperature(points or [], ctrl, TREE_METHODS), lambda p: p.tree_size,
                         lambda p: p.tokens_per_call)
    left.set(xlabel="tree size n (candidate nodes)", ylabel="τ: tokens per target call")
    _size_axis(left, sizes)
    plots.legend(left, "below", fontsize=7)
    plots.title(left, plots.BOTH if measured else plots.THEORY, f"accept length, top-1 at distance 1 = {ctrl.alpha:.2f}")
    beta = beta_of(ctrl)
    speed = np.array([d / beta(n + 1) for d, n in zip(dynamic, sizes)])
    right.plot(sizes, speed, "o-", ms=3, color="C2", label=r"$\tau(n) / \beta(n+1)$")
    best = int(np.nanargmax(speed))
    right.scatter([sizes[best]], [speed[best]], s=80, marker="*", color="red", zorder=5,
                  label=f"best size {sizes[best]}: {speed[best]:.2f}×")
    right.axhline(1.0, color="black", lw=0.8)
    right.set(xlabel="tree size n", ylabel="expected speedup over AR")
    _size_axis(right, sizes)
    plots.legend(right, "below", fontsize=7)
    plots.title(right, plots.THEORY, "hardware-aware tree size")
    _footer(fig, plots.BOTH if measured else plots.THEORY, ctrl, measured=bool(measured),
            note=f"top-k accuracies: PPD paper's anchors scaled to α (illustrative); {describe_costs(ctrl)}")
    return fig


def _size_axis(ax, sizes) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(sizes), [str(n) for n in sizes])
    ax.minorticks_off()


def moe_figure(ctrl: Controls) -> Figure:
    """Left: expected experts loaded and the MoE β = experts(T) / experts(1) against tokens verified together T.
    Right: the speedup against γ with that β and with β = 1 (survey blog, Mixture of Experts)."""
    fig, (left, right) = figure_grid(2, 11.0)
    tokens = np.arange(1, ctrl.gamma_max + 2)
    left.plot(tokens, sim.expected_experts(ctrl.experts, ctrl.top_k, tokens), "o-", ms=3, label="E[experts loaded]")
    left.plot(tokens, sim.moe_beta(ctrl.experts, ctrl.top_k, tokens), "s-", ms=3, label="β = experts(T) / experts(1)")
    left.axvline(ctrl.gamma + 1, color="0.5", lw=0.8, ls=":", label=f"T = γ + 1 = {ctrl.gamma + 1}")
    left.set(xlabel="tokens verified together T", ylabel="experts / β")
    plots.legend(left, "below", fontsize=7)
    plots.title(left, plots.THEORY, f"E = {ctrl.experts} experts, top-{ctrl.top_k}")
    gammas = np.arange(1, ctrl.gamma_max + 1)
    c = cost_ratio(ctrl)
    moe = [float(sim.expected_speedup(ctrl.alpha, g, c, float(sim.moe_beta(ctrl.experts, ctrl.top_k, g + 1))))
           for g in gammas]
    right.plot(gammas, moe, "o-", ms=3, label="β from expert loads")
    right.plot(gammas, sim.expected_speedup(ctrl.alpha, gammas, c, 1.0), "--", label="β = 1 (dense)")
    right.axhline(1.0, color="black", lw=0.8)
    right.set(xlabel="γ", ylabel="expected speedup")
    plots.legend(right, "below", fontsize=7)
    plots.title(right, plots.THEORY, f"speedup at α = {ctrl.alpha:.2f}, c = {c:.3g}")
    _footer(fig, plots.THEORY, ctrl, note="routers pick k of E experts uniformly (survey blog 004)")
    return fig


MENTORED_BOUNDS = tuple(np.round(np.geomspace(1e-3, 3.0, 25), 5))


@functools.lru_cache(maxsize=1)
def _mentored_curve() -> np.ndarray:
    """The optimal acceptance probability at each D of ``MENTORED_BOUNDS``, mean over 64 synthetic (p, q) rows."""
    p, q = sim.mentored.random_pair(np.random.default_rng(0), 64, 32)
    curve = sim.mentored.acceptance_curve(p, q, MENTORED_BOUNDS)
    return np.asarray(curve, dtype=float).reshape(len(MENTORED_BOUNDS), -1).mean(axis=1)


def mentored_figure(ctrl: Controls) -> Figure:
    """Left: mentored decoding's acceptance probability against the KL bound D (D = 0 is speculative sampling's
    α). Right: its walltime improvement at the controls' γ and c."""
    fig, (left, right) = figure_grid(2, 11.0)
    bounds = np.array(MENTORED_BOUNDS)
    accept = _mentored_curve()
    at = float(np.interp(ctrl.bound, bounds, accept))
    speculative = float(np.asarray(sim.acceptance_rate(*sim.mentored.random_pair(np.random.default_rng(0), 64, 32)))
                        .mean())
    left.plot(bounds, accept, "o-", ms=3, label="mentored: optimal acceptance")
    left.axhline(speculative, color="0.4", ls="--", lw=1, label=f"speculative sampling (D = 0): {speculative:.2f}")
    left.scatter([ctrl.bound], [at], s=60, color="C0", zorder=5, label=f"D = {ctrl.bound:g}: {at:.2f}")
    left.set(xlabel="KL bound D (nats)", ylabel="acceptance probability", xscale="log", ylim=(0, 1.02))
    plots.legend(left, "below", fontsize=7)
    plots.title(left, plots.THEORY, "mentored α against D (synthetic pair)")
    c = cost_ratio(ctrl)
    right.plot(bounds, sim.mentored.walltime_improvement(accept, ctrl.gamma, c), "o-", ms=3, label=f"γ = {ctrl.gamma}")
    right.axhline(float(sim.mentored.walltime_improvement(speculative, ctrl.gamma, c)), color="0.4", ls="--", lw=1,
                  label="speculative sampling")
    right.axvline(ctrl.bound, color="0.5", lw=0.8, ls=":")
    right.set(xlabel="KL bound D (nats)", ylabel="walltime improvement", xscale="log")
    plots.legend(right, "below", fontsize=7)
    plots.title(right, plots.THEORY, f"speedup at c = {c:.3g} (β = 1)")
    _footer(fig, plots.THEORY, ctrl, note="64 synthetic rows, vocabulary 32 (simulations.mentored.random_pair)")
    return fig


STEP_PARTS = (("target_ms", "target forwards", "C0"), ("draft_ms", "draft forwards", "C1"),
              ("host_ms", "host's work (drafting logic, tree, acceptance, cache, sampling)", "0.6"))


def step_split_figure(ctrl: Controls, splits: list[StepSplit]) -> Figure:
    """Measured: each committed bench row at the controls' temperature as one bar, a steady step's wall time split
    into the target's forwards, the draft's forwards and the host's work (ms), with its measured speedup over AR
    beside the predictions from the forwards alone and with the host's work. The host's share is what a prediction
    from the forwards alone does not see."""
    rows = [s for s in splits if abs(s.temperature - ctrl.temperature) < 1e-9]
    fig, (ax,) = figure_grid(1, 11.0, height=max(3.2, 1.4 + 0.32 * len(rows)))
    fig.subplots_adjust(left=0.34, right=0.97, bottom=0.9 / max(3.2, 1.4 + 0.32 * len(rows)) + 0.12, top=0.9)
    y = np.arange(len(rows))[::-1]
    left = np.zeros(len(rows))
    for attr, label, colour in STEP_PARTS:
        widths = np.array([getattr(s, attr) for s in rows])
        ax.barh(y, widths, left=left, color=colour, label=label, height=0.7)
        left += widths
    for yi, s, end in zip(y, rows, left):
        predicted = "–" if s.predicted is None else f"{s.predicted:.2f}x"
        with_host = "–" if s.predicted_with_host is None else f"{s.predicted_with_host:.2f}x"
        ax.annotate(f"{s.speedup:.2f}x measured; predicted {predicted}, with host {with_host}", (end, yi),
                    xytext=(3, -3), textcoords="offset points", fontsize=6.5, color="0.2")
    ax.set_yticks(y, [s.label() for s in rows], fontsize=7)
    ax.set(xlabel="ms per steady step", xlim=(0, 1.6 * max(left, default=1.0)))
    if not rows:
        ax.text(0.5, 0.5, f"no committed bench split its steps at T = {ctrl.temperature:g}", ha="center",
                transform=ax.transAxes)
    plots.legend(ax, "below", fontsize=7)
    plots.title(ax, plots.MEASURED, f"where a step's time goes (committed benches, T = {ctrl.temperature:g})")
    devices = sorted({s.device for s in rows})
    footer = plots.Footer(plots.MEASURED, model="see labels (each bench's config.json)",
                          device="; ".join(devices) or "none", profile=PROFILE_FOOTER, commit=commit_label(),
                          note="each bench's summary.csv: step_target_ms, step_draft_ms, step_host_ms")
    place_footer(fig, footer)
    return fig


def png(fig: Figure, dpi: int = 80) -> bytes:
    """The figure as PNG bytes (what an ``ipywidgets.Image`` shows): one draw of the fixed layout, footer inside.
    ``plots.check`` is not run on every redraw (it walks every tick); tests/test_explore.py runs it on each figure."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()
