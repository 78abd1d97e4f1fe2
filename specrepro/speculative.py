"""The one verification loop: draft, score with the target in one forward pass, accept, roll back.

Every speculative method in the package is a ``Drafter`` plus an acceptance rule plugged in here.
"""
from __future__ import annotations

from typing import Callable

import torch

from .acceptance import speculative_sampling
from .adaptive import FixedGamma, GammaPolicy
from .config import DecodeConfig
from .decoding import commit, start_run
from .drafters.base import Drafter, Proposal
from .kvcache import CachedModel
from .record import GenerationRecord
from .warping import one_hot, warp

AcceptanceRule = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], tuple[int, int]]


def speculative_generate(target: torch.nn.Module, drafter: Drafter, prompt_ids: list[int], config: DecodeConfig,
                         eos: set[int] = frozenset(), rule: AcceptanceRule = speculative_sampling,
                         context_length: int | None = None, method: str = "speculative",
                         on_step: Callable[[CachedModel, Drafter, list[int]], None] | None = None,
                         gamma_policy: GammaPolicy | None = None) -> GenerationRecord:
    """Batch size 1. ``on_step(target_cache, drafter, committed_ids)`` runs after each step (tests use it).

    ``gamma_policy`` says how many drafts to ask for at each step: ``FixedGamma(config.gamma)`` unless given
    (``config.gamma == "auto"`` needs an ``AdaptiveGamma`` built from a device profile).
    """
    if gamma_policy is None:
        if config.gamma == "auto":
            raise ValueError("gamma 'auto' needs a device profile: pass gamma_policy=AdaptiveGamma.from_profile(...) "
                             "(the command line calibrates one for you)")
        gamma_policy = FixedGamma(config.gamma)
    run = start_run(target, prompt_ids, config, method, context_length)
    generator, clock, p_model, ids, out, rec = run.generator, run.clock, run.p_model, run.ids, run.out, run.rec
    rec.provenance["gamma_policy"] = gamma_policy.to_dict()
    drafter.reset()

    start = clock.now()
    stop = None
    while stop is None:
        # 1. Draft: γ from the policy (α so far), never more than the budget left after the target's token.
        gamma = min(gamma_policy.choose(sum(rec.accept_lengths), rec.tested), config.max_new_tokens - len(out) - 1)
        rec.gammas.append(gamma)
        t0 = clock.now()
        if gamma > 0:
            proposal = drafter.propose(ids, gamma, config.sampling, generator)
        else:
            proposal = Proposal(tokens=torch.empty(0, dtype=torch.long), probs=None)  # one plain step
        t1 = clock.now()
        drafts = proposal.tokens.tolist()
        g = len(drafts)

        # 2. Verify: one target forward over the newest committed token and the g drafts -> g+1 rows.
        logits = p_model.logits_for(ids + drafts, n_last=g + 1)[-(g + 1):]  # [g+1, V]
        t2 = clock.now()
        p = warp(logits, config.sampling)  # [g+1, V]
        draft_tokens = torch.tensor(drafts, dtype=torch.long, device=p.device)  # [g]
        if proposal.probs is not None:
            q = proposal.probs.to(p.device)  # [g, V]
        else:
            q = one_hot(draft_tokens, p.shape[-1])  # [g, V] deterministic draft

        # 3. Accept: a pure rule on tensors; uniforms come from the run's (CPU) generator.
        uniforms = torch.rand(g + 1, generator=generator, dtype=torch.float64).to(p.device)  # [g+1]
        n, next_token = rule(p, q, draft_tokens, uniforms)

        # 4. Commit the n accepted drafts and the recovered/bonus token.
        stop = commit(ids, out, drafts[:n] + [next_token], config, eos)

        # 5. Roll back: the target keeps every committed token but the newest (not yet run through it).
        p_model.rollback(len(ids) - 1)
        drafter.update(ids)

        rec.target_calls += 1
        rec.draft_calls += proposal.calls
        if g > 0:
            rec.accept_lengths.append(n)
            rec.proposed_lengths.append(g)
        rec.time_draft_s += t1 - t0
        rec.time_target_s += t2 - t1
        if on_step is not None:
            on_step(p_model, drafter, ids)
    rec.wall_time_s = clock.now() - start
    rec.time_other_s = rec.wall_time_s - rec.time_draft_s - rec.time_target_s
    rec.stop_reason = stop
    return rec
