"""What the explorer notebook (``notebooks/explore.ipynb``) draws and runs; the notebook only wires widgets to it.

- :class:`Controls`: every knob of the documents' trade-offs (α, γ, c, β or a measured β(n), temperature, tree size,
  batch size, MoE experts E and k, mentored D), checked once.
- Theory figures from ``simulations/`` (numpy only, each well under a second): :func:`tokens_figure`,
  :func:`speedup_figure`, :func:`tree_figure`, :func:`moe_figure`, :func:`mentored_figure`. Where a committed bench
  (``figures/bench/*``, :func:`bench_points`) measured a method, its point sits on the theory, labelled with its device.
- :func:`run_traced`: one method on the offline model and one prompt, each token labelled with where it came from
  (:func:`token_sources`), shown by :func:`tokens_html` and :func:`trace_figure`.

Batch size enters through a roofline assumption (ours, not a document's): a forward of t tokens costs
max(1, t/K) weight loads, K the knee in tokens, so a measured batch-1 β(n) becomes β(n) · r_B(n) / r_1(n) at
batch B, with
r_B(n) = max(1, B·n/K) / max(1, B/K); with the constant β, β(n) = β · r_B(n), so a token tree wider than the knee
costs more even at batch 1.
"""
from __future__ import annotations

import csv
import functools
import html
import io
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
from matplotlib.figure import Figure

import simulations as sim

from . import plots
from ..drafters.base import Drafter
from ..core.record import tokens_per_call

REPO = Path(__file__).resolve().parents[2]
BENCH_DIR = REPO / "figures" / "bench"  # the committed hand-run benches (figures/bench/<name>/summary.csv)
PROFILE_FOOTER = "explorer"  # the footer's profile field: live figures, not a make-figures profile
CHAIN_METHODS = ("speculative", "prompt-lookup")  # bench rows whose α and γ the chain theory predicts
TREE_METHODS = ("medusa", "ppd")  # bench rows whose tree size and τ the tree theory predicts
RUN_METHODS = ("ar", "speculative", "prompt-lookup", "medusa", "ppd")  # what the run panel offers
TARGET, DRAFT = "smollm2-135m-instruct", "smollm2-135m-draft"  # the offline pair (make models)
SOURCE_COLOURS = {  # token source -> colour in the run panel
    "target": "#d9d9d9",  # a plain decode step: the target's own token, nothing was drafted
    "accepted draft": "#a6dba0",  # a draft token on the drafter's first chain, accepted
    "accepted tree branch": "#80cdc1",  # a draft token accepted on another branch of the token tree
    "bonus": "#92c5de",  # the target's token after every draft token of the path was accepted
    "corrected": "#f4a582",  # the target's token that replaced a rejected draft token
}


@dataclass(frozen=True)
class Controls:
    alpha: float = 0.6  # acceptance rate α; also the tree drafter's top-1 accuracy at distance 1
    gamma: int = 4  # draft tokens per step γ
    c: float = 0.05  # draft/target cost ratio of one forward
    beta: float = 1.0  # verification cost of γ+1 tokens relative to one decode step (constant), when no profile
    profile: str = ""  # a device profile (.json from `python -m specrepro calibrate`): its measured β(n) and c
    temperature: float = 0.0  # which committed benches' points to show (their sampling temperature)
    tree_size: int = 16  # nodes of the token tree
    batch: int = 1  # sequences decoded together
    knee: int = 32  # tokens per forward at which the roofline turns compute-bound
    experts: int = 8  # MoE experts per layer E
    top_k: int = 2  # experts each token routes to
    bound: float = 0.1  # mentored decoding's KL bound D (nats)
    gamma_max: int = 16  # the γ axes run 1..gamma_max

    def __post_init__(self) -> None:
        checks = {"alpha": 0.0 <= self.alpha < 1.0, "gamma": 1 <= self.gamma <= self.gamma_max,
                  "c": self.c >= 0.0, "beta": self.beta > 0.0, "temperature": self.temperature >= 0.0,
                  "tree_size": self.tree_size >= 2, "batch": self.batch >= 1, "knee": self.knee >= 1,
                  "experts": self.experts >= 1, "top_k": 1 <= self.top_k <= self.experts, "bound": self.bound >= 0.0,
                  "gamma_max": self.gamma_max >= 1}
        wanted = {"alpha": "in [0, 1)", "gamma": f"in 1..gamma_max = {self.gamma_max}", "c": "≥ 0", "beta": "> 0",
                  "temperature": "≥ 0", "tree_size": "≥ 2", "batch": "≥ 1", "knee": "≥ 1", "experts": "≥ 1",
                  "top_k": f"in 1..experts = {self.experts}", "bound": "≥ 0", "gamma_max": "≥ 1"}
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"{name} must be {wanted[name]}, got {getattr(self, name)!r}")


# ------------------------------------------------------------------ cost model: β(n), batch, the device profile


@dataclass(frozen=True)
class DeviceCosts:
    """β(n) and c of one device profile file (``calibrate``), without importing torch."""

    name: str  # the file's name
    device: str  # e.g. "cpu:AMD EPYC:avx2"
    dtype: str
    beta: sim.BetaCurve
    c: float | None  # None: a profile without a draft model


def profiles_dir() -> Path:
    """Where ``calibrate`` caches device profiles (``$SPECREPRO_CACHE/profiles``)."""
    from .cache import cache_root
    return cache_root() / "profiles"


def device_profiles(folder: Path | None = None) -> dict[str, Path]:
    """name -> path of every device profile cached here, newest first."""
    folder = profiles_dir() if folder is None else Path(folder)
    files = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True) if folder.is_dir() else []
    return {p.name: p for p in files}


# metrics.profile.FORMAT_1 and FORMAT, spelled here so that the explorer reads profiles without importing torch
PROFILE_FORMATS = ("specrepro-device-profile/1", "specrepro-device-profile/2")


@functools.lru_cache(maxsize=32)
def read_profile(path: str) -> DeviceCosts:
    """The β curve and c of a profile file (format ``specrepro-device-profile/1`` or ``/2``, which adds longer contexts
    and the prefill: the β here is the base context's, as before)."""
    d = json.loads(Path(path).read_text())
    if d.get("format") not in PROFILE_FORMATS:
        raise ValueError(f"{path} is not a specrepro device profile (format {d.get('format')!r})")
    forward = {int(n): float(t["median_s"]) for n, t in d["forward"]}
    ns = sorted(forward)
    l1 = forward[1]
    key = d.get("key", {})
    draft = d.get("draft_decode")
    return DeviceCosts(name=Path(path).name, device=str(key.get("device", "?")), dtype=str(key.get("dtype", "?")),
                       beta=sim.BetaCurve(tuple(ns), tuple([1.0] + [forward[n] / l1 for n in ns[1:]])),
                       c=draft["median_s"] / l1 if draft else None)


def roofline(n, batch: int, knee: int):
    """r_B(n) = max(1, B·n/K) / max(1, B/K): a forward of B sequences × n tokens against one of B × 1 tokens, in the
    roofline of the module docstring."""
    n = np.asarray(n, dtype=float)
    return np.maximum(1.0, batch * n / knee) / max(1.0, batch / knee)


def beta_of(ctrl: Controls) -> Callable[[int], float]:
    """n -> β(n) at the controls' batch size. With a profile: its measured batch-1 curve (clipped to its largest
    measured n) times r_B(n) / r_1(n). Without: the constant β for every n > 1 times r_B(n), the roofline's growth
    once B·n passes the knee."""
    if ctrl.profile:
        curve = read_profile(ctrl.profile).beta
        return lambda n: (float(curve(min(int(n), curve.n_max)))
                          * float(roofline(n, ctrl.batch, ctrl.knee) / roofline(n, 1, ctrl.knee)))
    return lambda n: (1.0 if int(n) <= 1 else ctrl.beta) * float(roofline(n, ctrl.batch, ctrl.knee))


def cost_ratio(ctrl: Controls) -> float:
    """c: the profile's measured c when it has one, else the slider's."""
    if ctrl.profile:
        measured = read_profile(ctrl.profile).c
        if measured is not None:
            return measured
    return ctrl.c


def describe_costs(ctrl: Controls) -> str:
    beta = beta_of(ctrl)
    where = (f"β(n), c measured ({read_profile(ctrl.profile).device}, {read_profile(ctrl.profile).dtype})"
             if ctrl.profile else f"constant β = {ctrl.beta:g}, c = {ctrl.c:g}")
    return f"{where}; batch {ctrl.batch} (knee {ctrl.knee}): β(γ+1) = {beta(ctrl.gamma + 1):.2f}, c = {cost_ratio(ctrl):.3g}"


# ------------------------------------------------------------------ the committed benches' measured points


@dataclass(frozen=True)
class BenchPoint:
    bench: str  # the folder under figures/bench/
    method: str  # the bench's label, e.g. "speculative:gauto"
    base: str  # the method family, e.g. "speculative"
    dtype: str
    device: str  # e.g. "cpu: AMD EPYC (2 logical cores)"
    temperature: float
    alpha: float | None
    speedup: float  # measured tokens/s over AR, same prompts, same run
    predicted: float | None  # the chain theory at the point's own α, mean γ, c and β (the bench's column)
    tokens_per_call: float
    mean_proposed: float | None  # mean γ (chain) or tree depth offered
    tree_size: float | None  # mean nodes scored per call (token-tree methods)
    batch_size: int = 1  # prompts decoded at once (bench --batch-size); speedup then over batched AR at that B

    def label(self) -> str:
        batch = f", B = {self.batch_size}" if self.batch_size > 1 else ""
        return f"{self.method} ({self.dtype}), {self.device}, T = {self.temperature:g}{batch}"


def _float(text: str) -> float | None:
    return float(text) if text not in ("", "None", "nan") else None


def bench_points(folder: Path = BENCH_DIR) -> list[BenchPoint]:
    """Every method row of every committed bench (``<folder>/<name>/summary.csv`` beside its config and
    provenance), with the device it ran on and, for token-tree methods, the mean tree size of its records."""
    points = []
    for bench in sorted(p for p in Path(folder).glob("*") if (p / "summary.csv").is_file()):
        config = json.loads((bench / "config.json").read_text())
        sessions = json.loads((bench / "provenance.json").read_text()).get("sessions", [{}])
        device = sessions[0].get("device_name", "unknown device")
        trees = _tree_sizes(bench / "records.jsonl")
        with (bench / "summary.csv").open() as handle:
            for row in csv.DictReader(handle):
                if row.get("error") or row["base_method"] == "ar" or _float(row["speedup"]) is None:
                    continue
                points.append(BenchPoint(
                    bench=bench.name, method=row["method"], base=row["base_method"], dtype=row["dtype"],
                    device=device, temperature=float(config["temperature"]), alpha=_float(row["alpha"]),
                    speedup=float(row["speedup"]), predicted=_float(row["predicted_speedup"]),
                    tokens_per_call=float(row["tokens_per_call"]), mean_proposed=_float(row["mean_proposed"]),
                    tree_size=trees.get(row["method"]), batch_size=int(config.get("batch_size", 1))))
    return points


def _tree_sizes(records: Path) -> dict[str, float]:
    """method -> mean nodes per verifying call over its records (empty when it never drafted)."""
    sizes: dict[str, list[int]] = {}
    if records.is_file():
        for line in records.read_text().splitlines():
            rec = json.loads(line)
            sizes.setdefault(rec["method"], []).extend(rec.get("tree_sizes", []))
    return {m: statistics.fmean(s) for m, s in sizes.items() if s}


def _at_temperature(points: list[BenchPoint], ctrl: Controls, bases: tuple[str, ...]) -> list[BenchPoint]:
    return [p for p in points if p.base in bases and abs(p.temperature - ctrl.temperature) < 1e-9]


# ------------------------------------------------------------------ theory figures


def _figure(ncols: int, width: float, height: float = 4.0):
    """A figure outside pyplot (widgets redraw without leaking figures) with a fixed layout: no layout engine, whose
    extra pass would double the time of a redraw; ``png`` crops to what was drawn."""
    fig = Figure(figsize=(width, height), layout="none")
    axes = fig.subplots(1, ncols)
    fig.subplots_adjust(left=0.08, right=0.97, bottom=0.33, top=0.9, wspace=0.3)
    return fig, np.atleast_1d(axes)


def _footer(fig: Figure, kind: str, ctrl: Controls, note: str = "", measured: bool = False) -> None:
    device = "committed benches' devices, as labelled" if measured else "none (analytic)"
    footer = plots.Footer(kind, model="see labels" if measured else "none (analytic)", device=device,
                          profile=PROFILE_FOOTER, commit=_commit(), note=note or describe_costs(ctrl))
    _inside(fig, footer)


def _inside(fig: Figure, footer: plots.Footer) -> None:
    """``plots.draw_footer``, moved from under the figure into its bottom margin: ``png`` draws the fixed layout once,
    without the extra pass that cropping to a footer outside the figure would take."""
    plots.draw_footer(fig, footer)
    for text in fig.texts:
        if text.get_gid() == plots.FOOTER_GID:
            text.set_position((0.01, 0.01))
            text.set_verticalalignment("bottom")


@functools.lru_cache(maxsize=1)
def _commit() -> str:
    from ..core.provenance import git_revision
    revision = git_revision(ignore=("figures", "notebooks/executed"), root=REPO)
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
    fig, (ax,) = _figure(1, 7.4)
    gammas = np.arange(1, ctrl.gamma_max + 1)
    for a in sorted({0.5, 0.7, 0.9} - {ctrl.alpha}):
        ax.plot(gammas, sim.expected_tokens(a, gammas), color="0.65", lw=1, label=f"α = {a:g}")
    ax.plot(gammas, sim.expected_tokens(ctrl.alpha, gammas), color="C0", lw=2, label=f"α = {ctrl.alpha:.2f}")
    ax.scatter([ctrl.gamma], [sim.expected_tokens(ctrl.alpha, ctrl.gamma)], s=60, color="C0", zorder=5,
               label=f"γ = {ctrl.gamma}: {float(sim.expected_tokens(ctrl.alpha, ctrl.gamma)):.2f} tokens")
    measured = _measured(ax, _at_temperature(points or [], ctrl, CHAIN_METHODS), lambda p: p.mean_proposed,
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
    fig, (left, right) = _figure(2, 11.0, 4.0)
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
    chain = _at_temperature(points or [], ctrl, CHAIN_METHODS)
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
    fig, (left, right) = _figure(2, 11.0)
    left.plot(sizes, dynamic, "o-", ms=3, label="dynamic sparse tree (optimal)")
    left.plot(sizes, static, "s--", ms=3, label="static tree")
    i = sizes.index(ctrl.tree_size)
    left.scatter([ctrl.tree_size], [dynamic[i]], s=60, color="C0", zorder=5,
                 label=f"n = {ctrl.tree_size}: τ = {dynamic[i]:.2f}")
    measured = _measured(left, _at_temperature(points or [], ctrl, TREE_METHODS), lambda p: p.tree_size,
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
    fig, (left, right) = _figure(2, 11.0)
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
    fig, (left, right) = _figure(2, 11.0)
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


def png(fig: Figure, dpi: int = 80) -> bytes:
    """The figure as PNG bytes (what an ``ipywidgets.Image`` shows): one draw of the fixed layout, footer inside.
    ``plots.check`` is not run on every redraw (it walks every tick); tests/test_explore.py runs it on each figure."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


# ------------------------------------------------------------------ "run it here": one traced generation


@dataclass
class Trace:
    method: str
    prompt: str
    pieces: list[str]  # each generated token's text
    sources: list[str]  # each token's source, a key of SOURCE_COLOURS
    accept_lengths: list[int]  # draft tokens accepted per verifying call
    tokens_per_s: float
    ar_tokens_per_s: float  # plain decoding of the same prompt, measured just before
    alpha: float | None
    tokens_per_call: float
    predicted_speedup: float | None  # the theory at this run's own α, mean γ (or τ and tree size) and the costs
    predicted_from: str
    record: dict = field(default_factory=dict)

    @property
    def speedup(self) -> float:
        return self.tokens_per_s / self.ar_tokens_per_s


class TracingDrafter(Drafter):
    """Wraps a drafter and keeps each step's proposal and accepted path, for :func:`token_sources`; everything else
    is the wrapped drafter's."""

    def __init__(self, inner: Drafter):
        self.inner = inner
        self.name, self.needs_hidden = inner.name, inner.needs_hidden
        self.steps: list[tuple[list[int], list[int]]] = []  # (parents [N] of the proposal, accepted path node ids)
        self._parents: list[int] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def propose(self, ids, gamma, sampling, generator):
        proposal = self.inner.propose(ids, gamma, sampling, generator)
        self._parents = [int(p) for p in proposal.tree_parents().tolist()] if proposal.size else []  # −1: the root
        return proposal

    def score(self, model, ids, tokens, parents):
        return self.inner.score(model, ids, tokens, parents)

    def feedback(self, step) -> None:
        self.steps.append((self._parents, [int(i) for i in step.path]))
        self._parents = []
        self.inner.feedback(step)

    def reset(self) -> None:
        self.steps.clear()
        self.inner.reset()


def token_sources(steps: list[tuple[list[int], list[int]]], n_tokens: int) -> list[str]:
    """Each committed token's source from each step's (parents, accepted path): the path's nodes are accepted draft
    tokens (on the first chain, or another tree branch), then one target token, a bonus when the path ends at a leaf,
    else a correction; a step that proposed nothing gives one target token. Cut to the ``n_tokens`` committed (a stop
    inside the last step commits fewer)."""
    sources = []
    for parents, path in steps:
        if not parents:
            sources.append("target")
            continue
        first = {}  # parent -> its first child: the drafter's main chain follows first children from the root
        for node, parent in enumerate(parents):
            first.setdefault(parent, node)
        on_main = True
        for node in path:
            on_main = on_main and first.get(parents[node]) == node
            sources.append("accepted draft" if on_main else "accepted tree branch")
        leaf = bool(path) and path[-1] not in first
        sources.append("bonus" if leaf else "corrected")
    return sources[:n_tokens]


@functools.lru_cache(maxsize=2)
def _models(dtype: str):
    from ..engine.models import load_draft, load_model
    target = load_model(TARGET, dtype=dtype)
    return target, load_draft(DRAFT, target)


def run_traced(method_name: str, prompt: str, *, temperature: float = 0.0, gamma: int = 4, tree_size: int = 16,
               max_new_tokens: int = 48, dtype: str = "fp32", seed: int = 0, ctrl: Controls | None = None) -> Trace:
    """Run ``method_name`` (one of RUN_METHODS) on the offline pair and ``prompt``, after plain decoding of the same
    prompt (the baseline of the measured speedup); the prediction uses ``ctrl``'s costs (β(n), c)."""
    from ..core.config import SamplingConfig
    from .generate import generate
    from ..methods import Needs, method

    if method_name not in RUN_METHODS:
        raise ValueError(f"the run panel runs one of {RUN_METHODS}, got {method_name!r}")
    if not prompt.strip():
        raise ValueError("the prompt is empty")
    spec = method(method_name)
    target, draft_model = _models(dtype)
    sampling = SamplingConfig(temperature=temperature)
    config = spec.config(max_new_tokens=max_new_tokens, sampling=sampling, gamma=gamma,
                         tree_size=tree_size if spec.tree is not None else None, seed=seed)
    ar = generate(target, prompt, method("ar").config(max_new_tokens=max_new_tokens, sampling=sampling, seed=seed))
    drafter = None
    if spec.drafter is not None:
        source = spec.needs.source(draft_model if spec.needs is Needs.DRAFT_MODEL else None, None, weights=None)
        drafter = TracingDrafter(spec.build_drafter(source, target, config))
    rec = generate(target, prompt, config, draft=drafter)
    tok = target.tokenizer
    pieces = [tok.decode([t]) for t in rec.token_ids]
    sources = ["target"] * rec.new_tokens if drafter is None else token_sources(drafter.steps, rec.new_tokens)
    per_call = tokens_per_call([rec]) or float("nan")
    predicted, why = _prediction(rec, spec.tree is not None, ctrl or Controls())
    return Trace(method=method_name, prompt=prompt, pieces=pieces, sources=sources, accept_lengths=rec.accept_lengths,
                 tokens_per_s=rec.tokens_per_s, ar_tokens_per_s=ar.tokens_per_s, alpha=rec.alpha,
                 tokens_per_call=per_call, predicted_speedup=predicted, predicted_from=why, record=rec.to_dict())


def _prediction(rec, tree: bool, ctrl: Controls) -> tuple[float | None, str]:
    """The theory's speedup for this run: a chain at its own α and mean γ (draft cost c), or a token tree at its own
    tokens per call and mean scored nodes (c = 0: the tree's drafts ride in the target's forward)."""
    beta = beta_of(ctrl)
    if not rec.accept_lengths:
        return 1.0, "plain decoding: 1× by definition"
    if tree:
        tau = 1.0 + statistics.fmean(rec.accept_lengths)
        nodes = statistics.fmean(rec.input_lengths) if rec.input_lengths else 1.0
        return tau / beta(round(nodes)), f"τ = {tau:.2f} / β({round(nodes)})"
    alpha, gamma = rec.alpha, max(1, round(statistics.fmean(rec.gammas)))
    c = cost_ratio(ctrl) if rec.draft_calls else 0.0
    return float(sim.expected_speedup(alpha, gamma, c, beta(gamma + 1))), \
        f"α = {alpha:.2f}, γ = {gamma}, c = {c:.3g}, β(γ+1) = {beta(gamma + 1):.2f}"


def tokens_html(trace: Trace) -> str:
    """The generated text, each token on the colour of its source, with a legend and the counts."""
    counts = {s: trace.sources.count(s) for s in SOURCE_COLOURS if s in trace.sources}
    legend = " ".join(f'<span style="background:{SOURCE_COLOURS[s]};padding:1px 4px;border-radius:3px">'
                      f"{html.escape(s)}: {n}</span>" for s, n in counts.items())
    body = "".join(f'<span title="{html.escape(s)}" style="background:{SOURCE_COLOURS[s]}">'
                   f"{html.escape(piece).replace(chr(10), '¶<br>')}</span>"
                   for piece, s in zip(trace.pieces, trace.sources))
    predicted = (f"{trace.predicted_speedup:.2f}× ({html.escape(trace.predicted_from)})"
                 if trace.predicted_speedup is not None else "none")
    alpha = f"{trace.alpha:.2f}" if trace.alpha is not None else "–"
    facts = (f"<b>{html.escape(trace.method)}</b>: {trace.tokens_per_s:.1f} tokens/s measured, "
             f"AR {trace.ar_tokens_per_s:.1f} tokens/s on the same prompt: <b>{trace.speedup:.2f}×</b> measured, "
             f"{predicted} predicted; α {alpha}, {trace.tokens_per_call:.2f} tokens per target call")
    return (f"<div class='specrepro-trace'><p>{facts}</p><p>{legend}</p>"
            f"<div style='font-family:monospace;line-height:1.7'>{body}</div></div>")


def trace_figure(trace: Trace) -> Figure:
    """Accepted draft tokens at each verifying step, and measured against predicted speedup."""
    fig, (left, right) = _figure(2, 10.0, 3.2)
    steps = np.arange(1, len(trace.accept_lengths) + 1)
    left.bar(steps, trace.accept_lengths, color=SOURCE_COLOURS["accepted draft"], edgecolor="0.4", lw=0.4)
    left.set(xlabel="verifying step", ylabel="draft tokens accepted")
    plots.title(left, plots.MEASURED, f"{trace.method}: accept length per step")
    bars = {"AR (measured)": 1.0, f"{trace.method} (measured)": trace.speedup}
    if trace.predicted_speedup is not None:
        bars[f"{trace.method} (theory)"] = trace.predicted_speedup
    right.barh(list(bars), list(bars.values()), color=["0.7", "C0", "none"][:len(bars)], edgecolor="C0", hatch=["", "", "//"][:len(bars)])
    right.axvline(1.0, color="black", lw=0.8)
    right.set(xlabel="speedup over AR (tokens/s ratio, same prompt)")
    plots.title(right, plots.BOTH, "measured beside predicted")
    from ..engine.models import default_device
    _inside(fig, plots.Footer(plots.BOTH, model=f"target {TARGET}, draft {DRAFT}",
                                        device=str(default_device()), dtype=trace.record.get("provenance", {})
                                        .get("dtype", "?"), profile=PROFILE_FOOTER, commit=_commit(),
                                        note="one prompt, one run: a noisy ratio"))
    return fig
