"""Speculative decoding for B sequences at once: the verification loop of ``speculative.py`` over a batch of rows.

Issue 24, item 1. Each row is its own generation: its own prompt, drafter, seed, EOS and budget. One step is

1. propose: per row, from the row's own drafter and draft stream (``decoding.draft_stream`` of the row's seed);
   a draft model's forwards run batched across the rows (``BatchedDraft``), model-free and self-drafting drafters
   (prompt lookup, n-gram tables, Medusa heads) propose per row, as at batch 1;
2. score: ONE target forward over every row's newest committed token and its tree, the trees padded to one node
   count with masked dummy nodes, each row at its own positions behind its own mask (``batch_cache.BatchCache``);
3. verdict: per row, the very steps of the batch-1 loop (``verify.decide``): warp the row's p [N_b+1, V], draw its
   N_b+1 uniforms from the row's own generator, apply the pure rule (``specrepro.acceptance``);
4. keep and commit: each row keeps its accepted path in its slots (ragged acceptance), commits its tokens with its
   own EOS / max_new_tokens (``decoding.commit``), its drafter hears the feedback, its record the step;
5. leave: a row that stopped leaves the batch (its cache rows are dropped); the others go on.

Every random draw of a row comes from the row's two generators, seeded as ``decoding.start_run`` seeds them for the
row's seed, in the order the batch-1 loop draws them, so a row's output is the batch-1 loop's output for its prompt
and seed, and never depends on its batch-mates (up to the rounding of a batched forward, which at T = 0 leaves
the argmax and at T > 0 moves a CDF boundary by ~1e-7).

Which drafters batch: those whose class declares how (``Drafter.batching``, the one declaration; ``Method.batches``
derives from it): a draft model (``LMDrafter``, its forwards batched when every row drafts with the same model and
that model takes per-row position ids, else per-row instances), prompt lookup and n-gram tables (per row,
model-free), Medusa heads (per row on the target's hidden states, a tree scored with tree attention). Any other
drafter (its own scorer, a tree drafted by a second model, state shared with the rule) raises one error naming the
method: run it at batch size 1. Any rule verifies at every batch size: the rows go through ``verify.decide``.

Records: one ``GenerationRecord`` per row, in prompt order. Its times are the row's view: ``wall_time_s`` from the
batch's start to the step the row stopped at (its latency), ``time_target_s`` every batched forward it took part
in, ``time_draft_s`` its own proposals (or the batched draft forwards it took part in). ``provenance["batch"]``
says the batch size, the row, how the draft ran and the whole batch's wall time.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from ..acceptance import TREE_RULES, TreeRule
from .adaptive import FixedGamma
from ..core.batch_cache import BatchCache, check_batchable
from ..core.config import DecodeConfig, SamplingConfig
from ..core.decoding import Run, commit, start_run
from ..drafters.base import Drafter, Proposal, StepFeedback
from ..drafters.lm import LMDrafter
from ..core.record import GenerationRecord
from .speculative import record_step
from ..core.verify import Verdict, decide, to_host
from ..core.warping import sample, warp

DrafterSource = Sequence[Drafter] | Callable[[int], Drafter]  # one drafter per row, or a factory row -> drafter


@dataclass
class Row:
    """One row of the batch: its prompt's run (seeded generators, sequences, record) and its drafter."""

    index: int  # position in the caller's prompt list
    run: Run
    drafter: Drafter | None  # None for the AR baseline
    stop: str | None = None


def batched_generate(target: torch.nn.Module, drafters: DrafterSource, prompts: list[list[int]], config: DecodeConfig,
                     eos: set[int] = frozenset(), rule: TreeRule | Callable = TREE_RULES["exact"],
                     seeds: list[int] | None = None, context_length: int | None = None,
                     method: str = "speculative",
                     on_step: Callable[[BatchCache, list[list[int]]], None] | None = None) -> list[GenerationRecord]:
    """Speculative decoding of ``prompts`` (B rows) at once; one record per row, in order. See the module docstring.

    ``drafters``: one ``Drafter`` per row (distinct objects: a drafter holds its row's state) or a factory
    ``row -> Drafter``. ``seeds[b]`` seeds row b as ``config.seed`` seeds a batch-1 run (default: ``config.seed``
    for every row, so row b reproduces ``speculative_generate(target, drafter, prompts[b], config)``).
    ``rule``: a tree rule, as ``speculative_generate`` takes. γ is ``config.gamma`` at every step (a fixed policy;
    ``"auto"`` is batch-1 only). ``on_step(target_cache, active_ids)`` runs after each step, once the finished
    rows have left (tests check the cache invariant there).
    """
    rows = start_rows(target, prompts, config, method, seeds, context_length)
    for row, drafter in zip(rows, check_drafters(drafters, len(rows), method)):
        row.drafter = drafter
    if config.gamma == "auto":
        raise ValueError("batched decoding takes a fixed gamma (an integer); gamma 'auto' runs at batch size 1")
    policy = FixedGamma(config.gamma)
    cache = BatchCache(target, len(rows), [len(p) for p in prompts])
    draft = BatchedDraft.for_rows(rows)
    needs_hidden = any(row.drafter.needs_hidden for row in rows)
    clock = rows[0].run.clock
    for row in rows:
        row.run.rec.provenance["gamma_policy"] = policy.to_dict()
        row.run.rec.provenance["acceptance"] = rule.describe() if isinstance(rule, TreeRule) else {"name": rule.__name__}
        row.run.rec.provenance["batch"] = {"size": len(rows), "row": row.index,
                                           "draft": "batched" if draft is not None else "per-row"}

    start = clock.now()
    for row in rows:  # timed, as drafting, like the batch-1 loop's reset
        t0 = clock.now()
        row.drafter.reset()
        row.run.rec.time_draft_s += clock.now() - t0
    active = rows
    while active:
        # 1. Propose, per row: γ never more than the row's budget after the target's token.
        gammas = [min(policy.choose(row.run.rec.accept_lengths, row.run.rec.proposed_lengths),
                      config.max_new_tokens - len(row.run.out) - 1) for row in active]
        proposals = propose(active, gammas, config.sampling, draft, clock)

        # 2. Score: one target forward over every row's root and tree (dummy nodes pad the smaller trees).
        t0 = clock.now()
        logits, hidden = cache.score([row.run.ids for row in active],
                                     [(prop.tokens, prop.tree_parents()) for prop in proposals], needs_hidden)
        score_s = clock.now() - t0

        # 3. Verdict per row: warp -> the row's uniforms -> the rule, as the batch-1 loop's (``verify.decide``).
        decisions = decide([logits[b] for b in range(len(active))], proposals, config.sampling, rule,
                           [row.run.generator for row in active])
        verdicts = [Verdict(tokens=d.tokens, path=d.path, p=d.p, n_inputs=prop.size + 1, score_s=score_s,
                            hidden=None if hidden is None else hidden[b, :prop.size + 1])
                    for b, (d, prop) in enumerate(zip(decisions, proposals))]
        cache.keep([v.path for v in verdicts])

        # 4. Commit per row (its EOS, its budget), feedback, record.
        for row, gamma, prop, verdict in zip(active, gammas, proposals, verdicts):
            row.run.rec.gammas.append(gamma)
            row.stop = commit(row.run.ids, row.run.out, verdict.tokens, config, eos)
            if draft is None:  # a batched draft rolls its own cache back at its next forward
                row.drafter.feedback(StepFeedback(ids=row.run.ids, path=verdict.path, p=verdict.p,
                                                  hidden=verdict.hidden))
            record_step(row.run.rec, prop, verdict)
            if row.stop is not None:
                finish(row, clock.now() - start)

        # 5. Finished rows leave the batch.
        active = leave(active, cache, draft)
        if on_step is not None and active:
            on_step(cache, [row.run.ids for row in active])
    return batch_records(rows, clock.now() - start)


def batched_autoregressive(target: torch.nn.Module, prompts: list[list[int]], config: DecodeConfig,
                           eos: set[int] = frozenset(), seeds: list[int] | None = None,
                           context_length: int | None = None) -> list[GenerationRecord]:
    """The batched baseline: one target forward per token for every row at once, each row drawing from its own
    generator exactly as ``autoregressive_generate`` draws (so row b reproduces it for its prompt and seed)."""
    rows = start_rows(target, prompts, config, "ar", seeds, context_length)
    cache = BatchCache(target, len(rows), [len(p) for p in prompts])
    clock = rows[0].run.clock
    for row in rows:
        row.run.rec.provenance["batch"] = {"size": len(rows), "row": row.index, "draft": "none"}
    start = clock.now()
    active = rows
    while active:
        t0 = clock.now()
        logits, _ = cache.score([row.run.ids for row in active])  # [B, 1, V]
        cache.keep([[] for _ in active])
        forward_s = clock.now() - t0
        # Every row's p comes to the host in one download, where the rows draw their tokens.
        p = to_host([warp(logits[b, 0], config.sampling) for b in range(len(active))])  # B × [V]
        for b, row in enumerate(active):
            rec = row.run.rec
            rec.time_target_s += forward_s
            rec.target_calls += 1
            u = torch.rand(1, generator=row.run.generator, dtype=torch.float64)
            row.stop = commit(row.run.ids, row.run.out, [sample(p[b], u[0])], config, eos)
            if row.stop is not None:
                finish(row, clock.now() - start)
        active = leave(active, cache, None)
    return batch_records(rows, clock.now() - start)


# ------------------------------------------------------------------------------------------------ the steps


def propose(active: list[Row], gammas: list[int], sampling: SamplingConfig, draft: "BatchedDraft | None",
            clock) -> list[Proposal]:
    """Each active row's proposal (empty where its γ is 0, as the batch-1 loop does), its drafting time recorded."""
    if draft is not None:
        t0 = clock.now()
        proposals = draft.propose([row.run.ids for row in active], gammas, sampling,
                                  [row.run.draft_generator for row in active])
        spent = clock.now() - t0
        for row, gamma in zip(active, gammas):
            row.run.rec.time_draft_s += spent if gamma > 0 else 0.0
        return proposals
    proposals = []
    t0 = clock.now()  # one reading between two rows' proposals: B+1 readings, each a device sync on CUDA
    for row, gamma in zip(active, gammas):
        proposals.append(row.drafter.propose(row.run.ids, gamma, sampling, row.run.draft_generator)
                         if gamma > 0 else Proposal.empty())
        t1 = clock.now()
        row.run.rec.time_draft_s += t1 - t0
        t0 = t1
    return proposals


def leave(active: list[Row], cache: BatchCache, draft: "BatchedDraft | None") -> list[Row]:
    """The rows still going; the finished ones' cache rows (target and draft) are dropped."""
    keep = [b for b, row in enumerate(active) if row.stop is None]
    if keep and len(keep) < len(active):
        cache.select(keep)
        if draft is not None:
            draft.select(keep)
    return [active[b] for b in keep]


def finish(row: Row, wall_s: float) -> None:
    rec = row.run.rec
    rec.stop_reason = row.stop
    rec.wall_time_s = wall_s
    rec.time_other_s = rec.wall_time_s - rec.time_draft_s - rec.time_target_s


def batch_records(rows: list[Row], wall_s: float) -> list[GenerationRecord]:
    for row in rows:
        row.run.rec.provenance["batch"]["wall_time_s"] = wall_s
    return [row.run.rec for row in rows]


# ------------------------------------------------------------------------------------------------ the inputs


def start_rows(target: torch.nn.Module, prompts: list[list[int]], config: DecodeConfig, method: str,
               seeds: list[int] | None, context_length: int | None) -> list[Row]:
    """One batch-1 ``Run`` per prompt (its checks, its seeded generators, its record), after one clear error for each
    bad batch input."""
    if not isinstance(prompts, (list, tuple)) or len(prompts) == 0:
        raise ValueError("prompts is empty: give a list of at least one prompt (a list of token ids per row)")
    if all(isinstance(t, int) for t in prompts):
        raise ValueError("prompts must be a list of prompts, one list of token ids per row; got one list of ints "
                         "(wrap a single prompt as [prompt])")
    if seeds is None:
        seeds = [config.seed] * len(prompts)
    if not isinstance(seeds, (list, tuple)) or len(seeds) != len(prompts):
        raise ValueError(f"seeds must give one seed per prompt: {len(prompts)} prompts, got "
                         f"{len(seeds) if isinstance(seeds, (list, tuple)) else seeds!r}")
    rows = []
    for b, (prompt, seed) in enumerate(zip(prompts, seeds)):
        if not isinstance(prompt, (list, tuple)) or not all(isinstance(t, int) for t in prompt):
            raise ValueError(f"prompt {b} must be a list of token ids, got {prompt!r}")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValueError(f"seeds[{b}] must be an integer, got {seed!r}")
        try:
            run = start_run(target, list(prompt), dataclasses.replace(config, seed=seed), method, context_length)
        except ValueError as err:
            raise ValueError(f"prompt {b}: {err}") from None
        rows.append(Row(index=b, run=run, drafter=None))
    return rows


def check_drafters(drafters: DrafterSource, n_rows: int, method: str) -> list[Drafter]:
    """One drafter per row, distinct, of a class that batches; one clear error otherwise."""
    if callable(drafters) and not isinstance(drafters, (list, tuple, Drafter)):
        drafters = [drafters(b) for b in range(n_rows)]
    if isinstance(drafters, Drafter) or not isinstance(drafters, (list, tuple)):
        raise ValueError("drafters must be one Drafter per row (a list) or a factory row -> Drafter, got "
                         f"{type(drafters).__name__}")
    if len(drafters) != n_rows:
        raise ValueError(f"drafters must give one drafter per prompt: {n_rows} prompts, got {len(drafters)} drafters")
    for b, drafter in enumerate(drafters):
        if not isinstance(drafter, Drafter):
            raise ValueError(f"drafters[{b}] is a {type(drafter).__name__}, not a Drafter")
        if type(drafter).batching is None:
            raise ValueError(f"method {method!r} (drafter {type(drafter).__name__}, {drafter.name!r}) cannot batch: "
                             "its drafter has no batched proposal (``Drafter.batching``); run it at batch size 1")
    if len({id(d) for d in drafters}) != n_rows:
        raise ValueError("two rows share one drafter object: a drafter holds its row's state, give one per row "
                         "(a factory row -> Drafter)")
    return list(drafters)


# ------------------------------------------------------------------------------------- the batched draft model


class BatchedDraft:
    """Speculative sampling's draft model q for every row at once: at draft position i, one forward of the rows still
    drafting (γ_b > i) in a ``BatchCache`` of the draft; row b's token is drawn from its warped q row with its own
    uniforms, drawn first from its draft stream as ``LMDrafter.propose`` draws them. Each row's draft cache keeps its
    common prefix with the committed tokens at the next forward (``LMDrafter.feedback``'s rollback, done lazily)."""

    def __init__(self, model: torch.nn.Module, batch_size: int):
        self.lm = BatchCache(model, batch_size)

    @classmethod
    def for_rows(cls, rows: list[Row]) -> "BatchedDraft | None":
        """A batched draft when every row drafts with one draft model (``LMDrafter``) that can batch; None: the rows
        propose with their own drafters."""
        drafters = [row.drafter for row in rows]
        if not all(type(d) is LMDrafter for d in drafters):
            return None
        model = drafters[0].lm.model
        if any(d.lm.model is not model for d in drafters):
            return None
        try:
            check_batchable(model)
        except ValueError:
            return None  # e.g. a reduced-vocabulary draft whose forward takes no position ids: per-row drafts
        return cls(model, len(rows))

    def propose(self, ids: list[list[int]], gammas: list[int], sampling: SamplingConfig,
                generators: list[torch.Generator]) -> list[Proposal]:
        uniforms = [torch.rand(g, generator=gen, dtype=torch.float64) if g > 0 else None  # [γ_b]
                    for g, gen in zip(gammas, generators)]
        seqs = [list(row) for row in ids]
        tokens: list[list[int]] = [[] for _ in ids]
        probs: list[list[torch.Tensor]] = [[] for _ in ids]
        for i in range(max(gammas, default=0)):
            drafting = [i < g for g in gammas]
            logits, _ = self.lm.score([seq if on else None for seq, on in zip(seqs, drafting)])  # [B, 1, V]
            self.lm.keep([[] for _ in ids])
            rows = [b for b, on in enumerate(drafting) if on]
            # The drafting rows' q rows come to the host in one download, where each row draws its token (the next
            # forward takes host ids) and its proposal keeps its rows.
            q = to_host([warp(logits[b, 0], sampling) for b in rows])  # [V] each
            for b, q_i in zip(rows, q):
                x_i = sample(q_i, uniforms[b][i])
                tokens[b].append(x_i)
                probs[b].append(q_i)
                seqs[b].append(x_i)
        return [Proposal(tokens=torch.tensor(tokens[b], dtype=torch.long), probs=torch.stack(probs[b]), calls=g)
                if g > 0 else Proposal.empty() for b, g in enumerate(gammas)]

    def select(self, keep: list[int]) -> None:
        self.lm.select(keep)
