"""Measured accept length of a tree drafter (Medusa heads, PPD prompt tokens): the τ of the PPD paper's Fig. 8(a),
shared by ``notebooks/medusa_trees.ipynb`` and ``notebooks/ppd_parallel_prompt_decoding.ipynb``, with what both read
back from a tree bench: its device profile and the measured speedup of each tree size (Fig. 8(c))."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from ..run.bench_types import BenchPrompt, BenchResult
from ..core.config import DecodeConfig
from ..drafters.base import Drafter
from ..metrics.profile import Profile
from ..decode.speculative import speculative_generate
from .common import rows_of


def tree_tau(model: torch.nn.Module, drafter: Drafter, prompts: Sequence[BenchPrompt], *, max_new: int, gamma: int,
             seed: int, method: str) -> float:
    """Tokens per tree-verifying target call over ``prompts`` at T = 0. Plain steps (the first, before the drafter
    has anything to extend; one at the end of the budget) yield one token each and are left out of both counts."""
    tokens = calls = 0
    for p in prompts:
        rec = speculative_generate(model, drafter, p.ids, DecodeConfig(max_new_tokens=max_new, gamma=gamma, seed=seed),
                                   method=method)
        plain = rec.target_calls - len(rec.tree_sizes)
        tokens, calls = tokens + rec.new_tokens - plain, calls + len(rec.tree_sizes)
    if not calls:
        raise ValueError(f"{method}: no tree-verifying call in {len(prompts)} prompts of {max_new} tokens")
    return tokens / calls


def bench_profile(result: BenchResult, dtype: str) -> Profile:
    """The device profile a tree bench measured in ``dtype`` (that of its first session that measured any): the
    L_fp(n) its tree sizes were chosen from."""
    return Profile.from_dict(next(s for s in result.provenance["sessions"] if s.get("profiles"))["profiles"][dtype])


def step_regime(profile: Profile, betas: Sequence[int] = ()) -> dict:
    """Where a bench's target step sits, from its device ``profile``: L_fp(1) and the memory floor of the weights a
    step reads (the engine's packed bytes where it holds them), in ms (``floor_ms`` None where the profile has no
    bandwidth), and β(n) for each n of ``betas`` (``beta<n>``). The report reads them as the row's regime
    (``notebooks/claims/base.py``, ``Regime``)."""
    floor = profile.held_floor_s or profile.floor_s
    return {"step_ms": 1e3 * profile.decode_s, "floor_ms": None if floor is None else 1e3 * floor,
            **{f"beta{n}": profile.beta(n) for n in betas}}


def measured_speedups(result: BenchResult, variants: Sequence[str]) -> list[tuple[int, float, float]]:
    """(tree size, measured speedup over plain decoding, tokens per call) of each tree variant of a bench, in the
    order of ``variants``: Fig. 8(c)'s points."""
    rows = rows_of(result)
    return [(result.provenance["tree_sizes"][v]["size"], rows[v]["speedup"], rows[v]["tokens_per_call"])
            for v in variants]


def plain_step_ratio(result: BenchResult, prof: Profile, baseline: str = "ar") -> float:
    """L_fp(1) / (seconds per token of plain decoding in the bench): how much of a real plain-decoding step is the one
    target forward the theory counts (1 when nothing else costs time; below 1 by the sampling, cache and Python
    overhead of each step, the prefill and a context longer than the profile's)."""
    return prof.l_fp(1) * rows_of(result)[baseline]["tokens_per_s"]


def profile_baseline_speedups(result: BenchResult, variants: Sequence[str], prof: Profile) -> list[dict]:
    """Fig. 8(c)'s measured points on both baselines, in the order of ``variants``: ``speedup_vs_plain`` over the
    bench's plain decoding (tokens/s ratio), and ``speedup_vs_L_fp1`` = L_fp(1) x tokens/s, over one profiled target
    forward a token: the theory's baseline τ(n)·L_fp(1)/L_fp(n+1). The two differ by :func:`plain_step_ratio`."""
    ratio = plain_step_ratio(result, prof)
    return [{"tree_size": n, "speedup_vs_plain": s, "speedup_vs_L_fp1": s * ratio, "tokens_per_call": tpc}
            for n, s, tpc in measured_speedups(result, variants)]
