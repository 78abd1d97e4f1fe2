"""Is a lossy method's quality drop within run-to-run noise? The decision rule of issue 15's "Measure and report".

Issue 15 asks for mentored decoding's speed "at the largest KL bound whose quality drop stays within the metric's
run-to-run noise". Lossless methods (AR sampling, speculative sampling at any γ, any seed) all sample the target's
own law, so the differences between their runs are noise and nothing else; their spread is what "within noise"
is measured against. The rule, on a metric x[r, i] of run r on prompt i (a *run* = one method at one seed over
the same prompts; the metric is the mean per-token NLL of the output under the target, i.e. log-perplexity,
lower is better, or ROUGE-L, higher is better):

1. Paired difference of two runs a, b: d(a, b) = (1/P) Σ_i (x[a, i] − x[b, i]), paired by prompt so that the
   prompts' own difficulty cancels.
2. Noise band ε = max |d(a, b)| over every pair of distinct lossless runs (seed against seed, method against
   method): the largest shift two runs of the same distribution showed.
3. Drop of a variant with runs v_1..v_k: Δ = (1/P) Σ_i (x̄_v[i] − x̄_L[i]) with x̄_v the mean over its runs and
   x̄_L over the lossless runs, signed so that Δ > 0 is worse (for a higher-is-better metric, x̄_L − x̄_v).
4. The variant is **within noise** when Δ ≤ ε. One-sided: a variant that scores better than the lossless runs
   is not a quality drop.

Under the null (the variant samples the lossless law) Δ averages k runs against |L| runs, so it spreads less
than a single pair's d, and ε is the largest of |L|(|L| − 1)/2 of those: a same-distribution variant passes
nearly always, and a variant fails once its shift exceeds the largest shift the lossless runs showed. With few
lossless runs ε is itself noisy; :func:`paired_bootstrap_ci` gives Δ a confidence interval over prompts to read
beside it. :func:`largest_within_noise` then picks the largest bound D up to which every variant passes.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable, Hashable, Mapping, Sequence

import numpy as np

__all__ = ["NoiseVerdict", "largest_within_noise", "mean_nll", "noise_band", "paired_bootstrap_ci",
           "quality_drop", "run_matrix", "within_noise"]


def _runs(values, name: str, min_runs: int) -> np.ndarray:
    """``values`` as a finite float array [R, P] with R >= ``min_runs`` and P >= 1; one clear error otherwise."""
    x = np.asarray(values, dtype=float)
    if x.ndim == 1:
        x = x[None, :]  # one run
    if x.ndim != 2 or x.shape[1] == 0:
        raise ValueError(f"{name} must be [runs, prompts] with at least one prompt, got shape {x.shape}")
    if x.shape[0] < min_runs:
        raise ValueError(f"{name} needs at least {min_runs} runs, got {x.shape[0]}")
    if not np.isfinite(x).all():
        raise ValueError(f"{name} holds a value that is not finite (drop those prompts from every run first)")
    return x


def noise_band(lossless) -> float:
    """ε = max over pairs of distinct lossless runs of |mean_i (x[a, i] − x[b, i])| (module docstring, step 2).

    ``lossless`` [R, P], R >= 2 runs of the same distribution on the same P prompts."""
    x = _runs(lossless, "lossless", 2)
    return max(abs(float(np.mean(x[a] - x[b]))) for a, b in itertools.combinations(range(x.shape[0]), 2))


def quality_drop(lossless, variant, higher_is_better: bool = False) -> float:
    """Δ = mean_i (x̄_variant[i] − x̄_lossless[i]), signed so that Δ > 0 is worse (module docstring, step 3).

    ``lossless`` [R, P], ``variant`` [k, P] (or [P] for one run) on the same prompts in the same order."""
    base, x = _runs(lossless, "lossless", 1), _runs(variant, "variant", 1)
    if x.shape[1] != base.shape[1]:
        raise ValueError(f"variant has {x.shape[1]} prompts, lossless {base.shape[1]}: pair them by prompt")
    diff = float(np.mean(x.mean(0) - base.mean(0)))
    return -diff if higher_is_better else diff


def paired_bootstrap_ci(lossless, variant, higher_is_better: bool = False, level: float = 0.95,
                        resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of Δ, resampling prompts (the per-prompt pairs stay together).

    Describes how far Δ itself moves with the choice of prompts; the decision is :func:`within_noise`'s."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    base, x = _runs(lossless, "lossless", 1), _runs(variant, "variant", 1)
    if x.shape[1] != base.shape[1]:
        raise ValueError(f"variant has {x.shape[1]} prompts, lossless {base.shape[1]}: pair them by prompt")
    per_prompt = x.mean(0) - base.mean(0)  # [P]
    if higher_is_better:
        per_prompt = -per_prompt
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, per_prompt.size, size=(resamples, per_prompt.size))  # [B, P]
    means = per_prompt[picks].mean(1)  # [B]
    tail = (1 - level) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))


@dataclass(frozen=True)
class NoiseVerdict:
    """One variant against the lossless runs (module docstring)."""

    drop: float  # Δ, > 0 is worse
    band: float  # ε, the largest |paired difference| between two lossless runs
    within: bool  # Δ <= ε
    lossless_runs: int
    variant_runs: int
    prompts: int


def within_noise(lossless, variant, higher_is_better: bool = False) -> NoiseVerdict:
    """The decision of the module docstring: Δ <= ε, with ``lossless`` [R >= 2, P] and ``variant`` [k, P]."""
    base, x = _runs(lossless, "lossless", 2), _runs(variant, "variant", 1)
    drop, band = quality_drop(base, x, higher_is_better), noise_band(base)
    return NoiseVerdict(drop=drop, band=band, within=drop <= band, lossless_runs=base.shape[0],
                        variant_runs=x.shape[0], prompts=base.shape[1])


def largest_within_noise(verdicts: Mapping[float, NoiseVerdict | bool]) -> float | None:
    """The largest bound D such that the variant at D and at every smaller D in ``verdicts`` is within noise.

    A pass above a failure is not taken (quality can only fall as D grows, so such a pass is the noise's luck);
    None when the smallest D already fails or ``verdicts`` is empty."""
    best = None
    for bound in sorted(verdicts):
        if not (math.isfinite(bound) and bound >= 0):
            raise ValueError(f"a bound must be finite and >= 0, got {bound}")
        verdict = verdicts[bound]
        if not (verdict.within if isinstance(verdict, NoiseVerdict) else bool(verdict)):
            break
        best = bound
    return best


# ------------------------------------------------------------------------- from bench records


def mean_nll(record: Mapping) -> float | None:
    """Mean per-token NLL under the target of one bench record (log of its perplexity); None if it has none."""
    n = record.get("nll_tokens")
    return record["nll_sum"] / n if n else None


def run_matrix(records: Sequence[Mapping], methods: Sequence[str], value: Callable[[Mapping], float | None]
               ) -> tuple[list[tuple[str, int]], list[Hashable], np.ndarray]:
    """Bench records as runs × prompts: (runs [(method, repeat)], prompt ids, values [R, P]).

    A run is one method at one repeat (seed); its rows are ordered as ``methods`` then repeat. Only prompts with
    a value in every run are kept (an empty generation has no NLL), so that every comparison stays paired.
    Raises ValueError when a method has no records or no prompt is left."""
    table: dict[tuple[str, int], dict[Hashable, float | None]] = {}
    for r in records:
        if r["method"] in methods:
            table.setdefault((r["method"], r["repeat"]), {})[r["prompt_id"]] = value(r)
    missing = [m for m in methods if not any(run[0] == m for run in table)]
    if missing:
        raise ValueError(f"no records for {missing}")
    runs = sorted(table, key=lambda run: (list(methods).index(run[0]), run[1]))
    prompts = sorted(set.intersection(*(set(table[run]) for run in runs)), key=str)
    prompts = [p for p in prompts if all(table[run][p] is not None and math.isfinite(table[run][p]) for run in runs)]
    if not prompts:
        raise ValueError("no prompt has a value in every run")
    return runs, prompts, np.array([[table[run][p] for p in prompts] for run in runs], dtype=float)
