"""The baseline: one target forward per token, greedy (T = 0) or sampling."""
from __future__ import annotations

import torch

from ..core.config import DecodeConfig
from ..core.decoding import StepSplit, commit, start_run
from ..core.record import GenerationRecord
from ..core.warping import sample, warp


def autoregressive_generate(target: torch.nn.Module, prompt_ids: list[int], config: DecodeConfig,
                            eos: set[int] = frozenset(), context_length: int | None = None) -> GenerationRecord:
    run = start_run(target, prompt_ids, config, "ar", context_length)
    clock, p_model, ids, out, rec = run.clock, run.p_model, run.ids, run.out, run.rec

    split = StepSplit(clock)
    start = clock.now()
    stop = None
    while stop is None:
        t0 = clock.now()
        logits = p_model.logits_for(ids)[-1]  # [V]
        rec.time_target_s += clock.now() - t0
        split.charge("target")
        rec.target_calls += 1
        p = warp(logits, config.sampling)  # [V]
        u = torch.rand(1, generator=run.generator, dtype=torch.float64)
        stop = commit(ids, out, [sample(p, u[0])], config, eos)
        split.step(clock.now() - start)
    rec.wall_time_s = clock.now() - start
    rec.time_other_s = rec.wall_time_s - rec.time_target_s
    rec.time_split = split.record(rec.wall_time_s)
    rec.stop_reason = stop
    return rec
