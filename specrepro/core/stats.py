"""The package's estimators of a speedup and its one confidence interval: every bench summary, study table and
verdict computes a ratio of speeds, or its interval, here.

A speedup compares a method with a baseline on the same prompts, and three numbers are called that:

- :func:`pooled_ratio` (``POOLED_RATIO``): Σ tokens / Σ seconds of the method over the same of the baseline. Each
  run weighs by its length, so it is the throughput a user sees over the whole prompt set: the bench summary's
  ``speedup`` and the survey's speedup by task.
- :func:`median_of_ratios` (``MEDIAN_OF_RATIOS``): the median over runs (prompt, repeat) of the method's tokens/s over
  the baseline's on the same run. One run stalled by another process on a shared CPU cannot move it much: the
  bench summary's ``speedup_median``.
- :func:`mean_of_ratios` (``MEAN_OF_RATIOS``): the mean over runs of those paired ratios. Every prompt weighs the
  same, however long its runs; this is how the MJSD paper's Table 2 averages its speedups, so its claims are
  decided on it.

They differ whenever the ratio varies with the length of a run, so a caption says which one it shows (the
``*_RATIOS`` / ``POOLED_RATIO`` strings). :func:`paired_bootstrap` is the interval of any of them, or of any other
statistic of paired runs; :func:`wilson_interval`, :func:`bounded_mean_interval` and
:func:`normal_interval` are the closed-form 95% intervals the reproduction report puts on numbers written without one.

The layout every estimator reads, x [..., 2, 2]: the leading axes index the runs (e.g. [P, S], prompts and seeds),
axis −2 is (method, baseline) and axis −1 is (amount, seconds). The amount is tokens for a speed; the same
estimators take any amount over any count (accepted drafts per iteration, joules per token).

Why this module sits in ``core`` and not in ``metrics``: ``core.record``'s median speedup of two sets of records, an
aggregate every layer above reads, needs :func:`median_of_ratios`, and ``core`` may import nothing above it. It
imports numpy only, so ``metrics.verdict``, the benches and the studies take it from here.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

LEVEL = 0.95  # the default interval level of every verdict
Z95 = 1.959964  # two-sided 95% normal quantile: the closed-form intervals below

POOLED_RATIO = "pooled tokens/s ratio"
MEDIAN_OF_RATIOS = "median of paired ratios"
MEAN_OF_RATIOS = "mean of paired ratios"

__all__ = ["LEVEL", "MEAN_OF_RATIOS", "MEDIAN_OF_RATIOS", "POOLED_RATIO", "mean_of_ratios", "median_of_ratios",
           "paired_bootstrap", "paired_ratios", "pooled_ratio"]


def _runs(x) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    if x.ndim < 2 or x.shape[-2:] != (2, 2):
        raise ValueError(f"x is [..., 2, 2]: per run, (method, baseline) x (amount, seconds); got shape {x.shape}")
    if x.size == 0:
        raise ValueError("x holds no run")
    return x


def pooled_ratio(x) -> float:
    """The method's Σ amount / Σ seconds over the baseline's, sums over every run of x [..., 2, 2] (module
    docstring): the throughput ratio over the whole prompt set, each run weighed by its length. A caller holding
    totals already (the bench, whose batched rows share one wall time) passes them as x [2, 2]."""
    # Summed run by run in the runs' index order, whatever the memory layout (a bootstrap resample is not
    # C-contiguous): the same runs always give the same float.
    sums = _runs(x).reshape(-1, 2, 2).sum(axis=0)  # [2, 2]: (method, baseline) x (amount, seconds)
    return float((sums[0, 0] / sums[0, 1]) / (sums[1, 0] / sums[1, 1]))


def paired_ratios(x) -> np.ndarray:
    """Per run of x [..., 2, 2], the method's amount / seconds over the baseline's on the same run: [...]."""
    x = _runs(x)
    return (x[..., 0, 0] / x[..., 0, 1]) / (x[..., 1, 0] / x[..., 1, 1])


def median_of_ratios(x) -> float:
    """The median over runs of :func:`paired_ratios` (x [..., 2, 2]): robust to a few runs slowed by something
    else on the machine, which the pooled ratio is not."""
    return float(np.median(paired_ratios(x)))


def mean_of_ratios(x) -> float:
    """The mean over runs of :func:`paired_ratios` (x [..., 2, 2]): every run weighs the same, however many tokens
    it made (how a paper that averages per-prompt speedups reports them)."""
    return float(np.mean(paired_ratios(x)))


def paired_bootstrap(x, statistic: Callable[[np.ndarray], float], *, resamples: int = 2000, level: float = LEVEL,
                     seed: int | np.random.Generator = 0) -> tuple[float, float]:
    """Percentile interval at ``level`` of ``statistic`` over ``resamples`` resamples of prompts and seeds.

    ``x`` is [P] (P prompts) or [P, S, ...] (S seeds; axis 1 is always seeds, so methods go on axis 2 or later,
    with S = 1 for one seed). Each resample draws P prompts with replacement along
    axis 0 and, when ``x`` has a second axis, S seeds with replacement along axis 1 (the same seeds for every
    prompt: a seed is a run of every method); whatever sits on later axes (methods, numerators and denominators)
    stays together, so differences and ratios between methods are paired. ``statistic`` maps an array of ``x``'s
    layout to a float (any estimator above, on x [P, S, 2, 2]). ``seed`` is an int, or a ``numpy.random.Generator``
    that the resamples are drawn from (and advance), so the interval is the same on every run."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    x = np.asarray(x, dtype=float)
    if x.ndim == 0 or x.shape[0] == 0:
        raise ValueError(f"x must have at least one prompt on axis 0, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError("x holds a value that is not finite (drop that prompt from every method first)")
    rng = np.random.default_rng(seed)  # a Generator passes through unchanged
    values = np.empty(resamples)
    for b in range(resamples):
        sample = x[rng.integers(0, x.shape[0], x.shape[0])]  # [P, ...]
        if x.ndim >= 2:
            sample = sample[:, rng.integers(0, x.shape[1], x.shape[1])]  # [P, S, ...]
        values[b] = statistic(sample)
    tail = (1 - level) / 2
    return float(np.quantile(values, tail)), float(np.quantile(values, 1 - tail))


# The closed-form intervals the reproduction report puts on numbers a notebook wrote without one (a share of
# prompts, a mean of values in [0, 1], a value with its standard error), at 95%.

def wilson_interval(share: float, n: float) -> tuple[float, float]:
    """95% Wilson interval of a binomial proportion ``share`` of ``n`` trials."""
    if n <= 0:
        return 0.0, 1.0
    z2 = Z95 ** 2
    centre = (share + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(share * (1 - share) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return centre - half, centre + half


def bounded_mean_interval(mean_value: float, n: float) -> tuple[float, float]:
    """95% normal interval of a mean of n values in [0, 1]: their variance is at most m(1 − m)."""
    half = Z95 * math.sqrt(max(mean_value * (1 - mean_value), 0.0) / max(n, 1.0))
    return mean_value - half, mean_value + half


def normal_interval(value: float, standard_error: float) -> tuple[float, float]:
    """95% normal interval around ``value`` from its standard error."""
    return value - Z95 * standard_error, value + Z95 * standard_error
