"""The one verification loop: propose, score the proposal tree in one target forward, verify, keep the path.

Every speculative method in the package is a ``Drafter`` plus an acceptance rule plugged in here. A proposal is
a token tree (``specrepro.tree``); classic speculative decoding proposes a chain, the tree whose every node has
one child, so it runs through the same steps: the target scores the newest committed token and the N nodes in
one forward (tree attention, ``CachedModel.logits_for_tree``), a pure rule picks the accepted root path and the
next token (``specrepro.acceptance``), and the cache keeps exactly that path (``CachedModel.keep_path``).
"""
from __future__ import annotations

from typing import Callable

import torch

from .acceptance import TREE_RULES, TreeRule
from .adaptive import FixedGamma, GammaPolicy
from .config import DecodeConfig
from .decoding import commit, start_run
from .drafters.base import Drafter, Proposal, StepFeedback
from .kvcache import CachedModel
from .record import GenerationRecord
from .tree import depths
from .warping import one_hot, warp


def speculative_generate(target: torch.nn.Module, drafter: Drafter, prompt_ids: list[int], config: DecodeConfig,
                         eos: set[int] = frozenset(), rule: TreeRule | Callable = TREE_RULES["exact"],
                         context_length: int | None = None, method: str = "speculative",
                         on_step: Callable[[CachedModel, Drafter, list[int]], None] | None = None,
                         gamma_policy: GammaPolicy | None = None) -> GenerationRecord:
    """Batch size 1. ``on_step(target_cache, drafter, committed_ids)`` runs after each step (tests use it).

    ``rule(p [N+1, V], q [N, V], tokens [N], parents [N], uniforms [N+1]) -> (path, next_token)``: a tree rule
    (default: exact recursive rejection sampling, which on a chain is speculative sampling with the same
    uniforms). ``gamma_policy`` says how many drafts to ask for at each step: ``FixedGamma(config.gamma)``
    unless given (``config.gamma == "auto"`` needs an ``AdaptiveGamma`` built from a device profile).
    """
    if gamma_policy is None:
        if config.gamma == "auto":
            raise ValueError("gamma 'auto' needs a device profile: pass gamma_policy=AdaptiveGamma.from_profile(...) "
                             "(the command line calibrates one for you)")
        gamma_policy = FixedGamma(config.gamma)
    run = start_run(target, prompt_ids, config, method, context_length)
    generator, clock, p_model, ids, out, rec = run.generator, run.clock, run.p_model, run.ids, run.out, run.rec
    rec.provenance["gamma_policy"] = gamma_policy.to_dict()
    rec.provenance["acceptance"] = rule.describe() if isinstance(rule, TreeRule) else {"name": rule.__name__}
    start = clock.now()
    drafter.reset()  # timed, as drafting: what a drafter does between sequences (an online update) is its cost
    rec.time_draft_s += clock.now() - start
    stop = None
    while stop is None:
        # 1. Propose: γ from the policy (acceptances so far), never more than the budget left after the target's token.
        gamma = min(gamma_policy.choose(rec.accept_lengths, rec.proposed_lengths), config.max_new_tokens - len(out) - 1)
        rec.gammas.append(gamma)
        t0 = clock.now()
        proposal = drafter.propose(ids, gamma, config.sampling, run.draft_generator) if gamma > 0 else Proposal.empty()
        t1 = clock.now()
        tokens, parents = proposal.tokens.long().cpu(), proposal.tree_parents()  # [N], [N]
        n = tokens.numel()

        # 2. Score: one target forward over the newest committed token and the N nodes -> N+1 rows (and the
        #    hidden states of any prompt nodes, which the drafter reads in feedback).
        extra = proposal.prompt_nodes
        logits, hidden = p_model.logits_for_tree(ids, tokens, parents, output_hidden=drafter.needs_hidden,
                                                 prompt_embeds=None if extra is None else extra.embeds,
                                                 prompt_parents=None if extra is None else extra.parents)
        t2 = clock.now()
        p = warp(logits, config.sampling)  # [N+1, V]
        tokens = tokens.to(p.device)
        q = proposal.probs.to(p.device) if proposal.probs is not None else one_hot(tokens, p.shape[-1])  # [N, V]

        # 3. Verify: a pure rule on tensors; uniforms come from the run's (CPU) generator, a stream of its own.
        uniforms = torch.rand(n + 1, generator=generator, dtype=torch.float64).to(p.device)  # [N+1]
        path, next_token = rule(p, q, tokens, parents, uniforms)

        # 4. Commit the accepted path and the recovered/bonus token.
        stop = commit(ids, out, [int(tokens[i]) for i in path] + [next_token], config, eos)

        # 5. Keep the path: the target caches every committed token but the newest (not yet run through it).
        p_model.keep_path(path)
        p_model.rollback(len(ids) - 1)  # (a stop inside the path commits fewer tokens than were kept)
        drafter.feedback(StepFeedback(ids=ids, path=list(path), p=p, hidden=hidden))

        rec.target_calls += 1
        rec.draft_calls += proposal.calls
        if n > 0:
            rec.accept_lengths.append(len(path))
            rec.proposed_lengths.append(int(depths(parents).max()))  # the longest root path offered
            rec.tree_sizes.append(n)
        rec.input_lengths.append(1 + n + (0 if extra is None else len(extra)))
        rec.time_draft_s += t1 - t0
        rec.time_target_s += t2 - t1
        if on_step is not None:
            on_step(p_model, drafter, ids)
    rec.wall_time_s = clock.now() - start
    rec.time_other_s = rec.wall_time_s - rec.time_draft_s - rec.time_target_s
    rec.stop_reason = stop
    return rec
