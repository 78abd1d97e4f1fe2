"""Beam search and beam sampling: the depth tokens of (approximately) highest joint likelihood after a prefix.

Beam decoding as the MJSD paper defines it (Qin et al., §2.1 "Beam Decoding"): keep M sequences; at each
position every beam proposes candidate tokens from its distribution, and the M candidates of highest joint
likelihood ``log p(x_1:t | prefix) = Σ_i log p(x_i | prefix, x_<i)`` are kept. Two ways to propose:

- ``beam_search``: each beam's M most likely tokens under the model's own distribution softmax(logits), so the
  search approximates argmax_x p(x_1:K | prefix), which is what MJGD needs (§3.1: "We use beam decoding to
  approximate the argmax sampling from the joint distribution"). Deterministic; M = 1 is greedy decoding.
- ``beam_sample``: the paper's beam *sample* (Algorithm 1 line 2, §2.1 "M tokens are then sampled from
  p(·|x_1:t−1^(m)) for each sequence m and the top M sequences with the highest likelihood p(x_1:t|prefix) will be
  kept"). Each beam draws M distinct tokens from its *warped* distribution (``specrepro.core.warping``; without
  replacement, so a beam's candidates differ), and candidates are ranked by the joint likelihood under those same
  warped rows, the q(x_1:i | input) that Algorithm 1 verifies. At T = 0 a warped row is one-hot, so every beam but
  the argmax chain has likelihood 0: beam sampling at T = 0 is greedy decoding, for any M.
  transformers' beam sample (``generate(do_sample=True, num_beams=M)``) differs: it adds the running beam score to
  each beam's warped log-probabilities (not renormalised after top-k/top-p), draws 2M candidates at once from the
  softmax of those joint scores over all beams, and keeps the M best; here candidates are drawn per beam from its
  own warped row, as the paper writes, and the score is that row's log-probability.

EOS is not special: every beam has exactly ``depth`` tokens (the decoding loop stops at an EOS it commits).
Cost: one forward over the uncached part of the prefix (its last row gives position 1), then depth − 1 forwards of
at most M rows through a ``kvcache.BeamCache``; the batch-1 prefix cache is left as a fresh forward would leave it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .config import SamplingConfig
from .kvcache import BeamCache, CachedModel
from .warping import warp


@dataclass(frozen=True)
class BeamResult:
    """The best beam after ``depth`` positions."""

    tokens: list[int]  # [depth] the best sequence
    probs: torch.Tensor  # [depth, V] row i: the distribution tokens[i] was scored under, after prefix + tokens[:i]
    log_likelihood: float  # Σ_i log probs[i, tokens[i]]: its joint log-likelihood given the prefix
    forwards: int  # model forwards spent: 1 for the prefix, then one batched forward per further position


# Scores a step: logits [B, V] -> (probs [B, V] as returned in BeamResult.probs, log-probs [B, V] float64)
Scorer = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
# Proposes candidates: (probs [B, V], log-probs [B, V], count C) -> (tokens [B, C], their log-probs [B, C]),
# −inf for a slot left empty (a beam with fewer than C possible tokens)
Proposer = Callable[[torch.Tensor, torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]]


def beam_search(lm: CachedModel, prefix: list[int], depth: int, num_beams: int) -> BeamResult:
    """The ``depth`` tokens after ``prefix`` of highest joint likelihood under the model's softmax(logits) that a
    beam of ``num_beams`` finds (exact when num_beams >= V^(depth−1)); num_beams = 1 is greedy decoding."""
    def score(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logp = logits.double().log_softmax(-1)  # [B, V]
        return logp.exp().float(), logp

    def top(probs: torch.Tensor, logp: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        best = logp.topk(count, dim=-1)  # [B, C]
        return best.indices, best.values

    return _beams(lm, prefix, depth, num_beams, score, top)


def beam_sample(lm: CachedModel, prefix: list[int], depth: int, num_beams: int, sampling: SamplingConfig,
                generator: torch.Generator) -> BeamResult:
    """Beam sampling from the warped distributions (the paper's beam sample, module docstring): each beam draws
    ``num_beams`` distinct tokens from its warped row, the ``num_beams`` candidates of highest warped joint
    likelihood are kept. Every uniform comes from ``generator`` (CPU), num_beams per beam per position."""
    def score(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        probs = warp(logits, sampling)  # [B, V] float32, as the verification loop warps
        return probs, probs.double().log()

    def draw(probs: torch.Tensor, logp: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        uniforms = torch.rand(probs.shape[0], count, generator=generator, dtype=torch.float64)  # [B, C]
        tokens, drawn = sample_without_replacement(probs, uniforms.to(probs.device))  # [B, C], [B, C]
        return tokens, logp.gather(-1, tokens).masked_fill(~drawn, float("-inf"))

    return _beams(lm, prefix, depth, num_beams, score, draw)


def sample_without_replacement(
    probs: torch.Tensor,  # [B, V]
    uniforms: torch.Tensor,  # [B, C] in [0, 1)
) -> tuple[torch.Tensor, torch.Tensor]:  # tokens [B, C] long, drawn [B, C] bool
    """C distinct tokens per row, drawn one after another by inverse CDF (as ``warping.sample``), each from the row
    with the earlier draws removed and the rest renormalised: P(x_1, x_2) = p(x_1)·p(x_2)/(1 − p(x_1)), and so on.
    Once a row's support is used up, its later slots are not drawn (``drawn`` False, the token meaningless)."""
    left = probs.double().clone()  # [B, V] mass not drawn yet
    tokens, drawn = [], []
    for c in range(uniforms.shape[1]):
        cdf = left.cumsum(-1)  # [B, V]
        mass = cdf[:, -1:]  # [B, 1]
        x = torch.searchsorted(cdf, uniforms[:, c:c + 1].double() * mass, right=True).clamp_max(probs.shape[-1] - 1)
        ok = left.gather(-1, x) > 0  # [B, 1]: False once nothing is left (or the draw rounded onto a spent token)
        left.scatter_(-1, x, 0.0)
        tokens.append(x)
        drawn.append(ok)
    return torch.cat(tokens, dim=-1), torch.cat(drawn, dim=-1)


def _beams(lm: CachedModel, prefix: list[int], depth: int, num_beams: int, score: Scorer,
           propose: Proposer) -> BeamResult:
    """The loop both searches share: propose candidates per beam, keep the num_beams best by joint likelihood."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth (tokens per beam) must be an integer >= 1, got {depth!r}")
    if isinstance(num_beams, bool) or not isinstance(num_beams, int) or num_beams < 1:
        raise ValueError(f"num_beams must be an integer >= 1, got {num_beams!r}")
    probs, logp = score(lm.logits_for(list(prefix))[-1:])  # [1, V]: the one beam so far is the prefix itself
    count = min(num_beams, probs.shape[-1])  # candidates per beam
    joint = torch.zeros(1, dtype=torch.float64, device=logp.device)  # [B] joint log-likelihood of each beam
    seqs = torch.empty(1, 0, dtype=torch.long, device=logp.device)  # [B, t]
    rows = torch.empty(1, 0, probs.shape[-1], dtype=probs.dtype, device=probs.device)  # [B, t, V]
    beams, forwards = None, 1
    for t in range(depth):
        # 1. Candidates: `count` tokens from every beam, scored by the beam's joint log-likelihood plus theirs.
        tokens, token_logp = propose(probs, logp, count)  # [B, C], [B, C]
        scores = joint[:, None] + token_logp  # [B, C]
        # 2. Keep the num_beams best (candidates of likelihood 0 are not beams; one always remains).
        best = scores.flatten().topk(min(num_beams, scores.numel()))  # sorted, best first
        keep = best.values > float("-inf")
        keep[0] = True
        order = best.indices[keep]  # [B'] into the flattened [B·C] candidates
        parents, new = order // count, tokens.flatten()[order]  # [B'], [B']
        joint = best.values[keep]
        seqs = torch.cat([seqs[parents], new[:, None]], dim=1)  # [B', t+1]
        rows = torch.cat([rows[parents], probs[parents][:, None]], dim=1)  # [B', t+1, V]
        # 3. Score the next position of every kept beam in one forward (none after the last token).
        if t + 1 < depth:
            if beams is None:
                beams = BeamCache(lm)
            probs, logp = score(beams.step(parents, new))  # [B', V]
            forwards += 1
    return BeamResult(tokens=seqs[0].tolist(), probs=rows[0], log_likelihood=float(joint[0]), forwards=forwards)
