"""How good a draft is: α in the verification loop, the teacher-forced agreement with the target on its own
continuations and on stored data, and the cost ratio c of one cached decode step (the draft trainer's step 3;
the DistillSpec study scores its cells with ``data_agreement`` too)."""
from __future__ import annotations

import statistics
import time

import torch

from ..decode.autoregressive import autoregressive_generate
from ..core.config import DecodeConfig, SamplingConfig
from ..engine.draft_model import ReducedVocabDraft
from ..drafters import LMDrafter
from ..metrics.profile import forward_timer
from ..core.decoding import model_device
from ..engine.models import LoadedModel
from ..core.prompts import encode_prompt, load_suite
from ..core.record import alpha_of
from ..decode.speculative import speculative_generate
from .data import Example, collate
from .losses import student_rows

EVAL_SUITES = ("instruct", "chat", "math", "summarize", "humaneval")  # held out: never used for training


def held_out_prompts(target: LoadedModel, per_suite: int) -> dict[str, list[list[int]]]:
    """The first ``per_suite`` prompts of each evaluation suite, chat-encoded as the CLI would."""
    return {s: [encode_prompt(target, p.messages) for p in load_suite(s, limit=per_suite)] for s in EVAL_SUITES}


def evaluate_alpha(target: torch.nn.Module, draft: torch.nn.Module, prompts: dict[str, list[list[int]]],
                   temperature: float, cfg, eos: set[int]) -> dict:
    """α = accepted / tested draft tokens, pooled over prompts (and per suite), with the verification loop at γ =
    ``cfg.gamma`` for ``cfg.eval_max_new`` tokens (prompt k of a suite seeded ``cfg.seed + k``)."""
    t0, records = time.perf_counter(), {}
    for suite, plist in prompts.items():
        records[suite] = [speculative_generate(target, LMDrafter(draft), ids, DecodeConfig(
            max_new_tokens=cfg.eval_max_new, gamma=cfg.gamma, sampling=SamplingConfig(temperature=temperature),
            seed=cfg.seed + k), eos) for k, ids in enumerate(plist)]
    every = [r for recs in records.values() for r in recs]
    return {"temperature": temperature, "gamma": cfg.gamma, "alpha": alpha_of(every),
            "per_suite": {suite: alpha_of(recs) for suite, recs in records.items()},
            "accepted": sum(sum(r.accept_lengths) for r in every), "tested": sum(r.tested for r in every),
            "new_tokens": sum(r.new_tokens for r in every), "prompts": len(every),
            "seconds": round(time.perf_counter() - t0, 1)}



def teacher_forced_agreement(target: torch.nn.Module, draft: torch.nn.Module, prompts: dict[str, list[list[int]]],
                             max_new: int, eos: set[int]) -> dict:
    """How well q matches p on the target's own greedy continuations, per suite and pooled.

    For each prompt the target decodes ``max_new`` tokens greedily; one forward pass of each model over prompt +
    continuation then gives, at every continuation position, ``top1`` (the draft's argmax is the target's) and
    ``overlap`` (Σ min(p, q) at T = 1, the chance that a sampled draft token is accepted there). Unlike α from
    the loop, neither depends on where a draft block happened to start, so drafts compare position by position."""
    per_suite, pooled = {}, [0.0, 0.0, 0]
    for suite, plist in prompts.items():
        top1 = overlap = 0.0
        n = 0
        for ids in plist:
            cont = autoregressive_generate(target, ids, DecodeConfig(max_new_tokens=max_new), eos).token_ids
            seq = torch.tensor([ids + cont])  # [1, L]
            with torch.inference_mode():
                lp = target(input_ids=seq.to(model_device(target))).logits[0, len(ids) - 1: -1].float()  # [n, V]
                lq = draft(input_ids=seq.to(model_device(draft))).logits[0, len(ids) - 1: -1].float()  # [n, V]
                lq = lq.to(lp.device)
            top1 += float((lp.argmax(-1) == lq.argmax(-1)).sum())
            overlap += float(torch.minimum(lp.softmax(-1), lq.softmax(-1)).sum())
            n += lp.shape[0]
        per_suite[suite] = {"top1": top1 / n, "overlap": overlap / n, "positions": n} if n else None
        pooled = [pooled[0] + top1, pooled[1] + overlap, pooled[2] + n]
    return {"top1": pooled[0] / pooled[2] if pooled[2] else None,
            "overlap": pooled[1] / pooled[2] if pooled[2] else None, "positions": pooled[2], "per_suite": per_suite,
            "max_new": max_new}


def data_agreement(draft: ReducedVocabDraft, examples: list[Example], max_len: int, chunk: int = 32) -> dict:
    """Top-1 agreement and Σ min(p, q) of the draft on stored conversations, read off the teacher rows (no target
    call): the figures of ``teacher_forced_agreement`` at every position with a row.

    On training conversations against held-out ones of the same kind, the gap says how much the draft has
    memorised rather than learnt: a large gap means the draft is short of data. Σ min runs over the teacher's
    top-k ids only (the tail is not stored), so it is a lower bound."""
    top1 = overlap = 0.0
    rows = 0
    with torch.no_grad():
        for i in range(0, len(examples), chunk):
            b = collate(examples[i: i + chunk], max_len).to(draft.token_map.device)
            logq, p, logq_c = student_rows(draft, b)  # [R, N], [R, K+1], [R, K+1]
            top1 += float((draft.kept_ids[logq.argmax(-1)] == b.top_ids[b.row_mask][:, 0]).sum())  # col 0: p's argmax
            overlap += float(torch.minimum(p[:, :-1], logq_c[:, :-1].exp()).sum())  # the top-k, not "rest"
            rows += int(logq.shape[0])
    return {"top1": top1 / rows if rows else None, "overlap": overlap / rows if rows else None,
            "rows": rows, "sequences": len(examples)}


def measure_cost_ratio(target: torch.nn.Module, draft: torch.nn.Module, prompt_ids: list[int], steps: int) -> dict:
    """c = draft / target time of one cached decode step after the same context, timed by the package's one
    timing primitive (``metrics.profile.forward_timer``: device-synchronised, rolled back after each call).

    Steps alternate between the two models so that load from other processes hits both alike; medians."""
    timers = {"target": forward_timer(target, list(prompt_ids)), "draft": forward_timer(draft, list(prompt_ids))}
    times: dict[str, list[float]] = {k: [] for k in timers}
    for _ in range(steps):
        for m, time_forward in timers.items():
            times[m].append(time_forward(1))
    t_ms, d_ms = (1e3 * statistics.median(times[m]) for m in ("target", "draft"))
    return {"c": d_ms / t_ms, "target_ms": t_ms, "draft_ms": d_ms, "steps": steps, "context": len(prompt_ids),
            "dtype": str(next(draft.parameters()).dtype)}

