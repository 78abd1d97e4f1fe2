"""The statistics of the exactness tests: one false-alarm rate for every χ² test, one tolerance for every Monte Carlo
mean, the χ² p-value, and the exact law of the first two emitted tokens with its Monte Carlo counts.

A χ² test uses fixed seeds and rejects at FALSE_ALARM: were the sampler exact, a fresh seed would fail such a test
with probability FALSE_ALARM; the seeds are fixed, so the outcome is deterministic. Each such test has a companion
power check: a deliberately wrong sampler fails the same test, with the same number of runs, so the tests can fail.

A Monte Carlo mean agrees with its closed form within N_SIGMA standard errors computed from the sample's own
variance, with fixed seeds, so a failure means a wrong formula rather than bad luck (a 5σ miss has probability
below 1e-6 per comparison).
"""
from __future__ import annotations

import numpy as np
import torch
from scipy import stats

from specrepro.acceptance import TREE_RULES
from specrepro.core.config import DecodeConfig, SamplingConfig
from specrepro.decode.speculative import speculative_generate
from specrepro.core.warping import warp
from tests.helpers import PROMPT, V

FALSE_ALARM = 1e-3  # per χ² test
N_SIGMA = 5.0  # per Monte Carlo mean
RUNS = 500  # seeded loop runs per χ² test of the first two tokens


def chi2_pvalue(counts: np.ndarray, probs: np.ndarray, *, pool_below: float | None = 5.0) -> float:
    """χ² goodness of fit of ``counts`` to the law ``probs`` (same shape); returns the p-value.

    ``pool_below = 5`` (the loop tests, many rare cells among V² = 64): the cells whose expected count is below 5
    are pooled into one, as the χ² approximation asks; ``probs`` must sum to one.
    ``pool_below = None`` (the rule tests on hand-made laws, whose trial counts keep every expected cell above
    100): only the support of ``probs`` is tested, ``probs`` renormalised on it; that the cells of probability 0
    stay empty the caller checks separately.
    """
    if pool_below is None:
        support = probs > 0
        expected = probs[support] / probs[support].sum() * counts.sum()
        return stats.chisquare(counts[support], expected).pvalue
    n = counts.sum()
    expected = probs.ravel() * n
    observed = counts.ravel().astype(float)
    small = expected < pool_below
    if small.any():
        expected = np.append(expected[~small], expected[small].sum())
        observed = np.append(observed[~small], observed[small].sum())
    return stats.chisquare(observed, expected).pvalue


def exact_first_two(target, prompt: list[int], sampling: SamplingConfig) -> np.ndarray:
    """p(x1, x2) = p(x1 | prompt) p(x2 | prompt, x1) as a [V, V] array, from the target's logits."""
    with torch.inference_mode():
        p1 = warp(target(input_ids=torch.tensor([prompt])).logits[0, -1], sampling)  # [V]
        batch = torch.tensor([prompt + [x] for x in range(V)])  # [V, T+1]
        p2 = warp(target(input_ids=batch).logits[:, -1], sampling)  # [V, V]
    joint = (p1[:, None] * p2).double().numpy()
    return joint / joint.sum()


def first_two_counts(target, drafter, sampling, rule=TREE_RULES["exact"], runs=RUNS, prompt=PROMPT,
                     on_step=None) -> np.ndarray:
    """Counts [V, V] of the first two emitted tokens over ``runs`` seeds (``on_step``: the loop's per-step check)."""
    counts = np.zeros((V, V), dtype=np.int64)
    for seed in range(runs):
        # max_new_tokens 3 with γ = 2: the first step drafts two tokens, so both positions are tested.
        cfg = DecodeConfig(max_new_tokens=3, gamma=2, sampling=sampling, seed=seed, stop_at_eos=False)
        out = speculative_generate(target, drafter, prompt, cfg, rule=rule, on_step=on_step).token_ids
        counts[out[0], out[1]] += 1
    return counts
