"""One verification step: score a proposal, warp, apply the rule, keep the accepted path.

Both levels of verification in the package run this function: the decoding loop (``speculative.py``, the target
verifies a drafter's proposal) and the staged drafter's inner level (``drafters/staged.py``, the draft model
verifies a zero-cost drafter's proposal with the draft in the target's place). Its steps:

1. score: the drafter's scorer runs the verifier over the newest committed token and the N nodes in one forward
   (``Drafter.score``; PPD's adds its prompt nodes there) -> logits [N+1, V];
2. warp: p = the verifier's warped rows [N+1, V]; q = the proposal's rows, or one-hot for a deterministic drafter;
3. rule: a pure function on tensors, its N+1 uniforms drawn from the caller's (CPU) generator
   (``specrepro.acceptance``) -> the accepted root path and the recovered/bonus token;
4. keep the path: the verifier's cache keeps exactly the accepted nodes (``CachedModel.keep_path``).

The caller commits ``Verdict.tokens`` (the loop stops at EOS or the budget; the staged drafter grows its chain).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .acceptance import TreeRule
from .config import SamplingConfig
from .decoding import Clock
from .kvcache import CachedModel
from .proposal import Proposal, Scorer
from .warping import one_hot, warp


@dataclass(frozen=True)
class Verdict:
    """What one verification step decided."""

    tokens: list[int]  # what the step emits: the accepted path's tokens, then the recovered/bonus token
    path: list[int]  # accepted node indices of the proposal, root child first
    p: torch.Tensor  # [N+1, V] the verifier's warped rows over the scored tree
    hidden: torch.Tensor | None  # [S, H] the verifier's final hidden states, when the scorer asked for them
    n_inputs: int  # S: positions scored (the root, the N nodes and any the scorer added: PPD's S_input)
    score_s: float  # seconds in the scorer (the verifier's forward); 0.0 without a clock


def verify(model: CachedModel, ids: list[int], proposal: Proposal, sampling: SamplingConfig,
           rule: TreeRule | Callable, generator: torch.Generator, score: Scorer,
           clock: Clock | None = None) -> Verdict:
    """Verify ``proposal`` after the committed ``ids`` with ``model`` (batch size 1); see the module docstring.

    ``rule(p [N+1, V], q [N, V], tokens [N], parents [N], uniforms [N+1]) -> (path, next_token)``.
    """
    tokens, parents = proposal.tokens.long().cpu(), proposal.tree_parents()  # [N], [N]
    n = tokens.numel()
    # 1. Score.
    start = clock.now() if clock is not None else 0.0
    scores = score(model, ids, tokens, parents)
    score_s = clock.now() - start if clock is not None else 0.0
    # 2. Warp.
    p = warp(scores.logits, sampling)  # [N+1, V]
    tokens = tokens.to(p.device)
    q = proposal.probs.to(p.device) if proposal.probs is not None else one_hot(tokens, p.shape[-1])  # [N, V]
    # 3. Rule.
    uniforms = torch.rand(n + 1, generator=generator, dtype=torch.float64).to(p.device)  # [N+1]
    path, next_token = rule(p, q, tokens, parents, uniforms)
    # 4. Keep the path: the cache holds ids and the accepted nodes; next_token is not run through it yet.
    model.keep_path(path)
    return Verdict(tokens=[int(tokens[i]) for i in path] + [int(next_token)], path=list(path), p=p,
                   hidden=scores.hidden, n_inputs=scores.n_inputs, score_s=score_s)
