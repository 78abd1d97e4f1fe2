"""Multi-token joint greedy decoding (MJGD; Qin et al., §3.1, Definition 3.1, Fig. 1).

Each step commits the K tokens of highest joint likelihood p(x_t+1:t+K | x_1:t) under the target instead of K
successive argmaxes; greedy decoding is K = 1. The exact argmax costs |V|^K, so, as the paper does for Fig. 1,
beam search with ``num_beams`` beams approximates it (``specrepro.core.beam.beam_search``: one forward over the
newly committed tokens, then K − 1 forwards of at most ``num_beams`` rows). The search ranks by the target's own
distribution softmax(logits): MJGD is deterministic and runs at temperature 0 only.
"""
from __future__ import annotations

import torch

from ..core.beam import beam_search
from ..core.config import DecodeConfig
from ..core.decoding import StepSplit, commit, start_run
from ..core.record import GenerationRecord


def mjgd_generate(target: torch.nn.Module, prompt_ids: list[int], config: DecodeConfig, eos: set[int] = frozenset(),
                  context_length: int | None = None, k: int = 2, num_beams: int = 8) -> GenerationRecord:
    """Batch size 1. ``k`` = K, tokens committed per step (Fig. 1 sweeps 1..5); ``num_beams`` beams per search (8 as
    in the paper's Table 5, its only beam count). The last step searches only as deep as max_new_tokens allows; an
    EOS inside a step's K tokens ends the generation there. ``target_calls`` counts every target forward."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k (tokens per MJGD step) must be an integer >= 1, got {k!r}")
    if isinstance(num_beams, bool) or not isinstance(num_beams, int) or num_beams < 1:
        raise ValueError(f"num_beams must be an integer >= 1, got {num_beams!r}")
    if not config.sampling.greedy:
        raise ValueError(f"MJGD searches for the argmax of the joint likelihood, it does not sample: use temperature 0 "
                         f"(got {config.sampling.temperature})")
    run = start_run(target, prompt_ids, config, "mjgd", context_length)
    clock, p_model, ids, out, rec = run.clock, run.p_model, run.ids, run.out, run.rec
    rec.provenance["mjgd"] = {"k": k, "num_beams": num_beams}

    split = StepSplit(clock)  # every forward is the target's (its beam search)
    start = clock.now()
    stop = None
    while stop is None:
        # 1. Search: the best K-token continuation (fewer when the budget ends sooner).
        depth = min(k, config.max_new_tokens - len(out))
        t0 = clock.now()
        best = beam_search(p_model, ids, depth, num_beams)
        rec.time_target_s += clock.now() - t0
        split.charge("target")
        rec.target_calls += best.forwards
        # 2. Commit it (stopping at EOS or the budget).
        stop = commit(ids, out, best.tokens, config, eos)
        split.step(clock.now() - start)
    rec.wall_time_s = clock.now() - start
    rec.time_other_s = rec.wall_time_s - rec.time_target_s
    rec.time_split = split.record(rec.wall_time_s)
    rec.stop_reason = stop
    return rec
