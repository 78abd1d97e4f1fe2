"""One verification step: score a proposal, warp, apply the rule, keep the accepted path.

Both levels of verification in the package run this function: the decoding loop (``speculative.py``, the target
verifies a drafter's proposal) and the staged drafter's inner level (``drafters/staged.py``, the draft model
verifies a zero-cost drafter's proposal with the draft in the target's place). Its steps:

1. score: the drafter's scorer runs the verifier over the newest committed token and the N nodes in one forward
   (``Drafter.score``; PPD's adds its prompt nodes there) -> logits [N+1, V];
2. warp: p = the verifier's warped rows [N+1, V]; q = the proposal's rows, or one-hot for a deterministic drafter;
3. rule: a pure function on tensors, on the host, its N+1 uniforms drawn from the caller's (CPU) generator
   (``specrepro.acceptance``) -> the accepted root path and the recovered/bonus token.
   Steps 2-3 are ``decide``, which the batched loop (``specrepro.decode.batched``) runs for its rows too: one path from
   logits to verdict at every batch size;
4. keep the path: the verifier's cache keeps exactly the accepted nodes (``CachedModel.keep_path``).

The caller commits ``Verdict.tokens`` (the loop stops at EOS or the budget; the staged drafter grows its chain).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

import torch

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
           rule: Callable, generator: torch.Generator, score: Scorer,
           clock: Clock | None = None) -> Verdict:
    """Verify ``proposal`` after the committed ``ids`` with ``model`` (batch size 1); see the module docstring.

    ``rule(p [N+1, V], q [N, V], tokens [N], parents [N], uniforms [N+1]) -> (path, next_token)``: a
    ``specrepro.acceptance.TreeRule`` (this layer sits below the rules and takes one as a callable).
    """
    # 1. Score.
    start = clock.now() if clock is not None else 0.0
    scores = score(model, ids, proposal.tokens.long().cpu(), proposal.tree_parents())  # logits [S, V]
    score_s = clock.now() - start if clock is not None else 0.0
    # 2-3. Warp and rule: the steps every batch size shares.
    (decision,) = decide([scores.logits], [proposal], sampling, rule, [generator])
    # 4. Keep the path: the cache holds ids and the accepted nodes; next_token is not run through it yet.
    model.keep_path(decision.path)
    return Verdict(tokens=decision.tokens, path=decision.path, p=decision.p, hidden=scores.hidden,
                   n_inputs=scores.n_inputs, score_s=score_s)


class Decision(NamedTuple):
    """Steps 2-3 for one row: what its rule decided."""

    path: list[int]  # accepted node indices of the proposal, root child first
    tokens: list[int]  # the accepted path's tokens, then the recovered/bonus token
    p: torch.Tensor  # [N+1, V] the verifier's warped rows, on the verifier's device


def decide(logits: Sequence[torch.Tensor], proposals: Sequence[Proposal], sampling: SamplingConfig,
           rule: Callable, generators: Sequence[torch.Generator]) -> list[Decision]:
    """Steps 2-3 of verification for B rows (B = 1 in ``verify``; the batched loop's active rows): row b's
    ``logits[b]`` [≥ N_b+1, V] (its first N_b+1 rows are its own: the batched loop pads with dummy nodes), its
    proposal and its generator.

    2. warp: p_b = the warped rows [N_b+1, V], on the verifier's device; q_b = the proposal's rows, or one-hot;
    3. rule: the pure rule on the host, on N_b+1 uniforms drawn from the row's (CPU) generator.

    Every row's p, q and tokens come to the host in ONE download (``to_host``) before any rule runs: the rules read
    values token by token (``int``, ``float``, ``.tolist()``), which on a GPU would each make the host wait for the
    device's queue. The download is p and q, (2N+1)·V floats per row (~1.8 MB at N = 4, V = 49152), against the
    tens of host waits it replaces. The rules then compute on the host exactly as before on a CPU run.
    """
    tokens = [prop.tokens.long() for prop in proposals]  # [N_b]
    p = [warp(rows[:t.numel() + 1], sampling) for rows, t in zip(logits, tokens)]  # [N_b+1, V]
    q = [prop.probs for prop in proposals]  # [N_b, V] or None
    host = to_host(p + [x for x in q if x is not None] + tokens)
    p_host, rest = host[:len(p)], iter(host[len(p):])
    q_host = [next(rest) if x is not None else None for x in q]
    decisions = []
    for b, (prop, gen) in enumerate(zip(proposals, generators)):
        toks = next(rest)  # [N_b] on the host
        q_b = q_host[b] if q_host[b] is not None else one_hot(toks, p_host[b].shape[-1])  # [N_b, V]
        uniforms = torch.rand(toks.numel() + 1, generator=gen, dtype=torch.float64)  # [N_b+1], CPU
        path, next_token = rule(p_host[b], q_b, toks, prop.tree_parents(), uniforms)
        path = [int(i) for i in path]
        decisions.append(Decision(path=path, tokens=toks[path].tolist() + [int(next_token)], p=p[b]))
    return decisions


def to_host(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """``tensors`` on the host, those on a device downloaded in ONE copy per device (one wait for its queue, where a
    ``.cpu()`` each would wait once per tensor). Host tensors come back as they are: a CPU run copies nothing."""
    out = list(tensors)
    by_device: dict[torch.device, list[int]] = {}
    for i, t in enumerate(tensors):
        if t.device.type != "cpu":
            by_device.setdefault(t.device, []).append(i)
    for idx in by_device.values():
        for i, t in zip(idx, download([tensors[i] for i in idx])):
            out[i] = t
    return out


def download(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Tensors of one device (any dtypes and shapes) copied to the host with one ``.cpu()``: their bytes are
    concatenated on the device and split again on the host."""
    # Widest element first, so that each tensor's bytes start at a multiple of its element size.
    order = sorted(range(len(tensors)), key=lambda i: -tensors[i].element_size())
    raw = [tensors[i].detach().contiguous().reshape(-1).view(torch.uint8) for i in order]  # bytes of each
    flat = torch.cat(raw).cpu()  # the one download
    out: list[torch.Tensor] = [None] * len(tensors)
    for i, chunk in zip(order, flat.split([r.numel() for r in raw])):
        out[i] = chunk.view(tensors[i].dtype).view(tensors[i].shape)
    return out
