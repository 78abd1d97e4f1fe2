"""Measured accept length of a tree drafter (Medusa heads, PPD prompt tokens): the τ of the PPD paper's Fig. 8(a),
shared by ``notebooks/medusa_trees.ipynb`` and ``notebooks/ppd_parallel_prompt_decoding.ipynb``."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from ..bench import BenchPrompt
from ..config import DecodeConfig
from ..drafters.base import Drafter
from ..speculative import speculative_generate


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
