"""The one verification loop: propose, verify the proposal tree in one target forward, commit, record.

Every speculative method in the package is a ``Drafter`` plus an acceptance rule plugged in here. A proposal is
a token tree (``specrepro.core.tree``); classic speculative decoding proposes a chain, the tree whose every node has
one child, so it runs through the same steps. One verification step (``specrepro.core.verify``, also the staged
drafter's inner level) scores the newest committed token and the N nodes in one target forward through the
drafter's scorer (tree attention, ``CachedModel.logits_for_tree``), lets a pure rule pick the accepted root path
and the next token (``specrepro.acceptance``), and keeps exactly that path in the target's cache.
"""
from __future__ import annotations

from typing import Callable

import torch

from ..acceptance import TREE_RULES, TreeRule
from .adaptive import FixedGamma, GammaPolicy
from ..core.config import DecodeConfig
from ..core.decoding import StepSplit, commit, start_run
from ..drafters.base import Drafter, Proposal, StepFeedback
from ..core.kvcache import CachedModel
from ..core.record import GenerationRecord
from ..core.verify import Verdict, verify


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
    gamma_policy = fixed_gamma(config) if gamma_policy is None else gamma_policy
    run = start_run(target, prompt_ids, config, method, context_length)
    clock, p_model, ids, out, rec = run.clock, run.p_model, run.ids, run.out, run.rec
    rec.provenance["gamma_policy"] = gamma_policy.to_dict()
    rec.provenance["acceptance"] = rule.describe() if isinstance(rule, TreeRule) else {"name": rule.__name__}
    split = StepSplit(clock)
    start = clock.now()
    drafter.reset()  # timed, as drafting: what a drafter does between sequences (an online update) is its cost
    rec.time_draft_s += clock.now() - start
    split.charge("draft")
    stop = None
    while stop is None:
        # 1. Propose: γ from the policy (acceptances so far), never more than the budget left after the target's token.
        budget = config.max_new_tokens - len(out) - 1
        gamma = min(gamma_policy.choose(rec.accept_lengths, rec.proposed_lengths), budget)
        if gamma == 0 < budget and "fell_back" not in rec.provenance:  # drafting stopped paying: the step is AR's
            rec.provenance["fell_back"] = {"step": len(rec.gammas) + 1, "why": gamma_policy.explain(
                rec.accept_lengths, rec.proposed_lengths)}
        rec.gammas.append(gamma)
        t0 = clock.now()
        proposal = drafter.propose(ids, gamma, config.sampling, run.draft_generator) if gamma > 0 else Proposal.empty()
        rec.time_draft_s += clock.now() - t0
        split.charge("draft")

        # 2. Verify: score (one target forward, through the drafter's scorer) -> warp -> rule -> keep the path.
        step = verify(p_model, ids, proposal, config.sampling, rule, run.generator, score=drafter.score, clock=clock)
        split.charge("target")

        # 3. Commit the accepted path and the recovered/bonus token. The target caches every committed token but
        #    the newest (not yet run through it); a stop inside the path commits fewer tokens than were kept.
        stop = commit(ids, out, step.tokens, config, eos)
        p_model.rollback(len(ids) - 1)

        # 4. Feedback, then the record.
        drafter.feedback(StepFeedback(ids=ids, path=step.path, p=step.p, hidden=step.hidden))
        split.charge("draft")  # a drafter's forwards on what was committed (an online update) are its own
        record_step(rec, proposal, step)
        split.step(clock.now() - start)
        if on_step is not None:
            on_step(p_model, drafter, ids)
    rec.wall_time_s = clock.now() - start
    rec.time_other_s = rec.wall_time_s - rec.time_draft_s - rec.time_target_s
    rec.time_split = split.record(rec.wall_time_s)
    rec.stop_reason = stop
    return rec


def fixed_gamma(config: DecodeConfig) -> FixedGamma:
    """The default γ policy: ``config.gamma`` at every step."""
    if config.gamma == "auto":
        raise ValueError("gamma 'auto' needs a device profile: pass gamma_policy=AdaptiveGamma.from_profile(...) "
                         "(the command line calibrates one for you)")
    return FixedGamma(config.gamma)


def record_step(rec: GenerationRecord, proposal: Proposal, step: Verdict) -> None:
    """Add one step to the record: calls, accept and proposal lengths, the scored input and the target's time."""
    rec.target_calls += 1
    rec.draft_calls += proposal.calls
    if proposal.size > 0:
        rec.accept_lengths.append(len(step.path))
        rec.proposed_lengths.append(proposal.depth())  # the longest root path offered
        rec.tree_sizes.append(proposal.size)
    rec.input_lengths.append(step.n_inputs)  # the root, the N nodes and any the scorer added (PPD's prompt nodes)
    rec.time_target_s += step.score_s

