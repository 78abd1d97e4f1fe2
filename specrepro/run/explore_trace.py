"""The explorer's run panel: one method on the offline model and one prompt (:func:`run_traced`), each token
labelled with where it came from (:func:`token_sources`), shown by :func:`tokens_html` and :func:`trace_figure`
beside the theory's prediction at the run's own α and γ (or τ and tree size).
"""
from __future__ import annotations

import functools
import html
import statistics
from dataclasses import dataclass, field

import numpy as np
from matplotlib.figure import Figure

import simulations as sim

from . import plots
from .bench_summary import step_split
from ..core.config import SamplingConfig
from ..core.record import tokens_per_call
from ..drafters.base import Drafter
from ..engine.models import default_device, load_draft, load_model
from ..methods import Needs, method
from .explore_benches import DRAFT, RUN_METHODS, TARGET
from .explore_costs import Controls, beta_of, cost_ratio
from .explore_figures import PROFILE_FOOTER, commit_label, figure_grid, place_footer
from .generate import generate

SOURCE_COLOURS = {  # token source -> colour in the run panel
    "target": "#d9d9d9",  # a plain decode step: the target's own token, nothing was drafted
    "accepted draft": "#a6dba0",  # a draft token on the drafter's first chain, accepted
    "accepted tree branch": "#80cdc1",  # a draft token accepted on another branch of the token tree
    "bonus": "#92c5de",  # the target's token after every draft token of the path was accepted
    "corrected": "#f4a582",  # the target's token that replaced a rejected draft token
}


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
    target = load_model(TARGET, dtype=dtype)
    return target, load_draft(DRAFT, target)


def run_traced(method_name: str, prompt: str, *, temperature: float = 0.0, gamma: int = 4, tree_size: int = 16,
               max_new_tokens: int = 48, dtype: str = "fp32", seed: int = 0, ctrl: Controls | None = None) -> Trace:
    """Run ``method_name`` (one of RUN_METHODS) on the offline pair and ``prompt``, after plain decoding of the same
    prompt (the baseline of the measured speedup); the prediction uses ``ctrl``'s costs (β(n), c)."""
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
             f"{predicted} predicted; α {alpha}, {trace.tokens_per_call:.2f} tokens per target call"
             f"{split_text(trace.record)}")
    return (f"<div class='specrepro-trace'><p>{facts}</p><p>{legend}</p>"
            f"<div style='font-family:monospace;line-height:1.7'>{body}</div></div>")


def split_text(record: dict) -> str:
    """"; a step: …": a steady step's time in the target's forwards, the draft's and the host's work (after the
    first step, which holds the prefill; ``bench_summary.step_split``), or "" where the run was not split."""
    split = step_split([record])
    if split["step_target_ms"] is None:
        return ""
    return (f"; a step: target forward {split['step_target_ms']:.2f} ms, draft forwards "
            f"{split['step_draft_ms']:.2f} ms, host {split['step_host_ms']:.2f} ms")


def trace_figure(trace: Trace) -> Figure:
    """Accepted draft tokens at each verifying step, and measured against predicted speedup."""
    fig, (left, right) = figure_grid(2, 10.0, 3.2)
    steps = np.arange(1, len(trace.accept_lengths) + 1)
    left.bar(steps, trace.accept_lengths, color=SOURCE_COLOURS["accepted draft"], edgecolor="0.4", lw=0.4)
    left.set(xlabel="verifying step", ylabel="draft tokens accepted")
    plots.title(left, plots.MEASURED, f"{trace.method}: accept length per step")
    bars = {"AR (measured)": 1.0, f"{trace.method} (measured)": trace.speedup}
    if trace.predicted_speedup is not None:
        bars[f"{trace.method} (theory)"] = trace.predicted_speedup
    right.barh(list(bars), list(bars.values()), color=["0.7", "C0", "none"][:len(bars)], edgecolor="C0",
               hatch=["", "", "//"][:len(bars)])
    right.axvline(1.0, color="black", lw=0.8)
    right.set(xlabel="speedup over AR (tokens/s ratio, same prompt)")
    plots.title(right, plots.BOTH, "measured beside predicted")
    dtype = trace.record.get("provenance", {}).get("dtype", "?")
    place_footer(fig, plots.Footer(plots.BOTH, model=f"target {TARGET}, draft {DRAFT}", device=str(default_device()),
                                   dtype=dtype, profile=PROFILE_FOOTER, commit=commit_label(),
                                   note="one prompt, one run: a noisy ratio"))
    return fig
