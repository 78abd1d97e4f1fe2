"""The baseline: one target forward per token, greedy (T = 0) or sampling."""
from __future__ import annotations

import torch

from .config import DecodeConfig
from .decoding import Clock, check_prompt, commit, model_device
from .kvcache import CachedModel
from .record import GenerationRecord
from .warping import sample, warp


def autoregressive_generate(target: torch.nn.Module, prompt_ids: list[int], config: DecodeConfig,
                            eos: set[int] = frozenset(), context_length: int | None = None) -> GenerationRecord:
    context_length = context_length or target.config.max_position_embeddings
    check_prompt(prompt_ids, config, context_length)
    generator = torch.Generator().manual_seed(config.seed)
    clock = Clock(model_device(target))
    p_model = CachedModel(target)
    ids, out = list(prompt_ids), []
    rec = GenerationRecord(method="ar", token_ids=out, prompt_tokens=len(prompt_ids), config=config.to_dict())

    start = clock.now()
    stop = None
    while stop is None:
        t0 = clock.now()
        logits = p_model.logits_for(ids)[-1]  # [V]
        rec.time_target_s += clock.now() - t0
        rec.target_calls += 1
        p = warp(logits, config.sampling)  # [V]
        u = torch.rand(1, generator=generator, dtype=torch.float64)
        stop = commit(ids, out, [sample(p, u[0])], config, eos)
    rec.wall_time_s = clock.now() - start
    rec.time_other_s = rec.wall_time_s - rec.time_target_s
    rec.stop_reason = stop
    return rec
