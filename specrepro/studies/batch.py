"""The measuring code of ``notebooks/batch_speculative.ipynb`` (issue 24, item 2): speculative decoding's speedup over
batched AR against the batch size B, measured end to end, beside the survey blog's prediction from the measured
β(B, γ+1) and α, and the MJSD paper's Table 1 claim checked on the same runs.

Notation (docs/notation.md): B = rows at once, γ = draft tokens per step, α = acceptance rate, τ = tokens per step,
c = draft/target cost ratio of one forward, β(B, n) = L(B, n) / L(B, 1) = what scoring n tokens in each of B rows
costs relative to one token in each (``metrics.batching``).

What one batch size B runs. The suite's prompts are cycled to ``rows`` prompt rows (row r is prompt r mod P), the
same rows at every B, decoded in rows / B batches of B. For each batch, in turn: one batched prefill of its prompts,
timed alone (``prefill_s``), then batched AR once and every speculative method at every γ on the same B prompts
(``generate.generate_batch``), the runs' order rotated from batch to batch, so that machine drift hits every run
alike. Neither the prefill nor AR depends on γ, so the cells (B, γ) of one B share them: a cell is AR's runs and the
timed prefill of its B beside the methods' runs at its γ. Greedy (T = 0) and no stop at EOS: every row writes
``max_new_tokens`` tokens, so B stays B through an AR run, and a lossless method's rows must equal AR's token for
token (``identical_to_ar``).

The prediction (survey blog, seed 004, *Batch Size*)::

    E(speedup) = (1 − α^{γ+1}) / ((1 − α)(γ·c + β)),   β = β(B, γ+1) measured, α measured on the cell's runs

with c = 0 for prompt lookup ("a process which produces deterministic tokens") and, for the draft model, the measured
draft/target cost at batch B: L_q(B, 1) / L_p(B, 1) when the draft's forwards ran batched, B·L_q(1, 1) / L_p(B, 1)
when each row drafted alone (a reduced-vocabulary draft without position ids: ``batched.BatchedDraft``). It models
decode steps only, so it is compared with the speedup of the decode (the timed prefill subtracted from both walls)
and, as measured end to end, with the prefill in both.
"""
from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from simulations.speculative import expected_speedup, expected_tokens

from ..core.batch_cache import BatchCache
from ..core.config import DecodeConfig, SamplingConfig
from ..core.decoding import Clock, model_device
from ..core.deps import untraced
from ..run.cache import BENCH_RECORD, recording, restart_if_code_changed
from ..run.generate import generate_batch
from ..metrics.batching import BatchingResult, measure_batching
from ..engine.models import LoadedModel
from ..core.record import GenerationRecord, pooled_alpha
from .common import StudyCache, cached_json

FORMAT = "specrepro-batch-study/1"
SURVEY = "survey blog (seed 004), Batch Size"
MJSD = "MJSD paper (seed 000), §4 Table 1"
DOCUMENT = "Survey blog (004): speculative decoding at batch size B"  # where INDEX.md files its artifacts
STATEMENTS = {  # the documents' words the notebook sets beside the figures
    "batch_1": ("survey blog (seed 004), Batch Size: \"Virtually all speculative decoding papers only discuss the "
                "single batch case, because the highest speedup comes at batch size 1.\""),
    "beta_k": ("survey blog (seed 004), Batch Size: \"at very high batch sizes, the matmuls become compute bound and "
               "β gets closer to k.\""),
    "memory_bound": ("survey blog (seed 004), Batch Size: \"linear layers are memory bound for batch sizes in the "
                     "tens on A100's\""),
    "table1": ("MJSD paper (seed 000), §4: \"As batch size doubles, although the number of FLOPs doubles, the energy "
               "consumption per run increases slightly\" (Table 1: OPT-13b, 2 A10 GPUs)"),
}
# The MJSD paper's Table 1, Time/run (s) by batch size b (OPT-13b on 2 A10 GPUs, a fixed number of runs).
MJSD_TIME_PER_RUN = {1: 0.376, 2: 0.397, 4: 0.392, 8: 0.403, 16: 0.418}
# "about as much": a step at b within 25 % of one at 1 (the paper's own Time/run at b = 16 is 1.11x its b = 1)
TABLE1_ABOUT = 1.25
GOAL_BATCH = 8  # issue 24's goal: prompt lookup at B = 8 faster than batched AR on the CPU
GOAL_TOLERANCE = 0.10  # issue 24's goal: |measured − predicted| / predicted ≤ 10 % at every B
AR = "ar"
METHODS = ("prompt-lookup", "speculative")  # the registry's names; "speculative" drafts with the zoo draft model


@dataclass(frozen=True)
class BatchStudyConfig:
    """One batch-size study: what is decoded, at which B and γ, and how the costs are timed."""

    target: str  # the target's zoo name (or a label for a model built in place, as the tests' tiny ones)
    draft: str | None  # the draft model's name for "speculative"; None: that method is not run
    suite: str  # the prompt suite (specrepro.core.prompts.SUITES); a label where the prompts are given as ids
    batches: tuple[int, ...]  # B values, ascending; each must divide ``rows``
    gammas: tuple[int, ...]  # γ values
    rows: int  # prompt rows per cell: the suite's prompts cycled to this many, the same rows at every B
    max_new_tokens: int  # tokens every row writes (no stop at EOS)
    dtype: str = "fp32"  # the target's and draft's dtype (the notebook runs ``models.exact_dtype()``)
    seed: int = 0  # every row's seed (T = 0 draws nothing, but the record keeps it)
    methods: tuple[str, ...] = METHODS  # speculative methods run beside batched AR in every cell
    prompt_tokens: int | None = None  # keep each prompt's last this many tokens (a smoke run's short prefill); None: all
    beta_rounds: int = 3  # metrics.batching: timed rounds of every (B, n) cell
    beta_forwards: int = 2  # metrics.batching: forwards per timed sample
    beta_warmup: int = 1  # metrics.batching: untimed rounds first

    def __post_init__(self) -> None:
        if not self.batches or min(self.batches) < 1 or list(self.batches) != sorted(set(self.batches)):
            raise ValueError(f"batches must be distinct ascending integers >= 1, got {self.batches}")
        if not self.gammas or min(self.gammas) < 1:
            raise ValueError(f"gammas must be integers >= 1, got {self.gammas}")
        bad = [b for b in self.batches if self.rows % b]
        if bad:
            raise ValueError(f"rows = {self.rows} must be a multiple of every B (the same rows at every B), not of {bad}")
        if "speculative" in self.methods and self.draft is None:
            raise ValueError("method 'speculative' needs a draft model: give draft, or leave it out of methods")

    def decode(self, method: str, gamma: int) -> DecodeConfig:
        return DecodeConfig(method=method, max_new_tokens=self.max_new_tokens, gamma=gamma,
                            sampling=SamplingConfig(temperature=0.0), seed=self.seed, stop_at_eos=False)


# ------------------------------------------------------------------ the prompts


def fill_rows(prompts: Sequence[tuple[str, list[int]]], rows: int,
              prompt_tokens: int | None = None) -> list[tuple[str, list[int]]]:
    """``rows`` (prompt id, ids) rows: the prompts cycled, row r = prompt r mod P; each prompt cut to its last
    ``prompt_tokens`` tokens where that is given."""
    if not prompts:
        raise ValueError("no prompts to fill the rows with")
    cut = slice(-prompt_tokens if prompt_tokens else None, None)
    return [(pid, list(ids)[cut]) for pid, ids in (prompts[r % len(prompts)] for r in range(rows))]


def decode_context(rows: Sequence[tuple[str, list[int]]], max_new_tokens: int) -> list[int]:
    """The context of the cost measurement: the rows' mean prompt length plus half the new tokens (the mean context
    a decode step sees), taken from the rows' tokens laid end to end."""
    length = round(statistics.mean(len(ids) for _, ids in rows) + max_new_tokens / 2)
    tokens = [t for _, ids in rows for t in ids]
    return (tokens * (length // len(tokens) + 1))[:length]


# ------------------------------------------------------------------ one cell: the runs


def time_prefill(model: torch.nn.Module, prompts: list[list[int]]) -> float:
    """Seconds of one batched forward over the B prompts in a fresh ``BatchCache``: the prefill a batched run pays
    in its first step (which also scores the first token, and for a speculative run its first draft)."""
    clock = Clock(model_device(model))
    cache = BatchCache(model, len(prompts), [len(p) for p in prompts])  # (as the runs' caches: bulk prompts)
    t0 = clock.now()
    cache.score([list(p) for p in prompts])
    return clock.now() - t0


def row_summary(rec: GenerationRecord, prompt_id: str) -> dict:
    """What the study keeps of one row's record."""
    return {"prompt_id": prompt_id, "prompt_tokens": rec.prompt_tokens, "token_ids": list(rec.token_ids),
            "new_tokens": rec.new_tokens, "wall_time_s": rec.wall_time_s, "target_calls": rec.target_calls,
            "draft_calls": rec.draft_calls, "accept_lengths": list(rec.accept_lengths),
            "proposed_lengths": list(rec.proposed_lengths), "time_draft_s": rec.time_draft_s,
            "time_target_s": rec.time_target_s, "draft": rec.provenance.get("batch", {}).get("draft"),
            "batch_wall_time_s": rec.provenance.get("batch", {}).get("wall_time_s")}


def run_batch_size(target: LoadedModel, draft: LoadedModel | None, rows: Sequence[tuple[str, list[int]]],
                   config: BatchStudyConfig, batch: int) -> list[dict]:
    """The cells (B, γ) of one B, γ as in ``config.gammas``: the rows in batches of B; per batch its timed prefill,
    AR once and each method at each γ, the order rotated per batch. Returns one cell per γ, {"batch", "gamma",
    "batches": [{"prompt_ids", "prefill_s", "runs": {method: [row summaries]}}]}, the prefill and AR's runs the
    same in each."""
    runs = [(AR, min(config.gammas)), *((m, g) for g in config.gammas for m in config.methods)]
    chunks = []
    for j in range(0, len(rows), batch):
        chunk = rows[j:j + batch]
        ids = [list(p) for _, p in chunk]
        done: dict[tuple[str, int], list[dict]] = {}
        k = (j // batch) % len(runs)
        with untraced():  # timed: a dependency trace (core/deps.py) saw this code in run_study's warm-up
            prefill = time_prefill(target.model, ids)
            for label, gamma in runs[k:] + runs[:k]:  # rotated: no run always comes first after the prefill
                records = generate_batch(target, ids, config.decode(label, gamma),
                                         draft=draft if label == "speculative" else None)
                done[label, gamma] = [row_summary(rec, pid) for rec, (pid, _) in zip(records, chunk)]
        chunks.append(([pid for pid, _ in chunk], prefill, done))
    return [{"batch": batch, "gamma": g, "batches": [
        {"prompt_ids": pids, "prefill_s": prefill,
         "runs": {AR: done[runs[0]], **{m: done[m, g] for m in config.methods}}} for pids, prefill, done in chunks]}
        for g in config.gammas]


def warm_up(target: LoadedModel, draft: LoadedModel | None, rows: Sequence[tuple[str, list[int]]],
            config: BatchStudyConfig) -> None:
    """One short untimed run of every method on the first row (first calls pay allocations and lazy imports)."""
    small = dataclasses.replace(config, max_new_tokens=min(4, config.max_new_tokens))
    for label in (AR, *config.methods):
        generate_batch(target, [list(rows[0][1])], small.decode(label, min(config.gammas)),
                       draft=draft if label == "speculative" else None)


# ------------------------------------------------------------------ one cell: its numbers


def method_row(cell: dict, label: str) -> dict:
    """One method's numbers in a cell, pooled over its batches. tokens/s = all rows' tokens over the batches' wall
    time; latency per token = a row's wall time over its tokens, averaged over rows; target calls = the batched
    forwards (the most any row took part in), summed over batches; a decode step = the walls less the batches' timed
    prefills over the target calls less one per batch (a batch's first call is its prefill); α = accepted / tested
    drafts (``pooled_alpha``); accepted per step and τ = tokens per target call, over every row's steps."""
    batches = cell["batches"]
    rows = [r for b in batches for r in b["runs"][label]]
    walls = [max(r["batch_wall_time_s"] for r in b["runs"][label]) for b in batches]
    prefill = sum(b["prefill_s"] for b in batches)
    tokens = sum(r["new_tokens"] for r in rows)
    calls = sum(max(r["target_calls"] for r in b["runs"][label]) for b in batches)
    accepts = [a for r in rows for a in r["accept_lengths"]]
    return {"method": label, "batch_size": cell["batch"], "gamma": cell["gamma"], "rows": len(rows),
            "new_tokens": tokens, "wall_s": sum(walls), "prefill_s": prefill,
            "tokens_per_s": tokens / sum(walls),
            "decode_tokens_per_s": tokens / max(sum(walls) - prefill, 1e-12),
            "latency_per_token_ms": 1e3 * statistics.mean(r["wall_time_s"] / r["new_tokens"] for r in rows),
            "target_calls": calls, "step_ms": 1e3 * sum(walls) / calls,
            "decode_step_ms": 1e3 * (sum(walls) - prefill) / max(calls - len(batches), 1),
            "alpha": pooled_alpha(accepts, [g for r in rows for g in r["proposed_lengths"]]),
            "accepted_per_step": statistics.mean(accepts) if accepts else None,
            "tokens_per_call": sum(r["new_tokens"] for r in rows) / sum(r["target_calls"] for r in rows),
            "draft": rows[0]["draft"], "draft_s_per_row": statistics.mean(r["time_draft_s"] for r in rows),
            "prompt_ids": [r["prompt_id"] for r in rows]}


def identical_to_ar(cell: dict, label: str) -> bool:
    """Whether every row of ``label`` wrote AR's tokens in the same cell (T = 0: a lossless method must)."""
    return all(r["token_ids"] == a["token_ids"] for b in cell["batches"]
               for r, a in zip(b["runs"][label], b["runs"][AR]))


# ------------------------------------------------------------------ the costs and the prediction


def measure_costs(target: LoadedModel, draft: LoadedModel | None, context: list[int], config: BatchStudyConfig,
                  label: str = "") -> dict:
    """β(B, n) of the target for n = 1 and every γ+1, and the draft's one-token forward at every B (its c), on the
    same context, dtype and threads as the runs (``metrics.batching``). JSON: {"target": ..., "draft": ... | None}."""
    timing = dict(rounds=config.beta_rounds, forwards=config.beta_forwards, warmup=config.beta_warmup)
    ns = sorted({1, *(g + 1 for g in config.gammas)})
    result = {"target": measure_batching(target.model, context, config.batches, ns, label=label or config.target,
                                         **timing).to_dict(), "draft": None}
    if draft is not None and "speculative" in config.methods:
        result["draft"] = measure_batching(draft.model, context, config.batches, (1,), label=config.draft,
                                           **timing).to_dict()
    return result


def draft_cost(target: BatchingResult, draft: BatchingResult | None, batch: int, how: str | None) -> float:
    """c at batch B: 0 without a draft model (prompt lookup); L_q(B, 1) / L_p(B, 1) when the draft's forwards ran
    batched ("batched"); B·L_q(1, 1) / L_p(B, 1) when each row drafted alone ("per-row")."""
    if draft is None or how in (None, "none"):
        return 0.0
    target_s = target.cell(batch, 1).latency.median_s
    if how == "batched":
        return draft.cell(batch, 1).latency.median_s / target_s
    if how == "per-row":
        return batch * draft.cell(1, 1).latency.median_s / target_s
    raise ValueError(f"unknown draft mode {how!r} (batched, per-row or none)")


def predicted_speedup(alpha: float, gamma: int, beta: float, c: float) -> float:
    """τ(α, γ) / (γ·c + β): the survey blog's E(speedup) (*Batch Size*), ``simulations.speculative``."""
    return float(expected_speedup(alpha, gamma, c, beta))


def relative_error(measured: float, predicted: float) -> float:
    """(measured − predicted) / predicted."""
    return (measured - predicted) / predicted


def speedup_rows(cells: Sequence[dict], costs: dict) -> list[dict]:
    """Fig. (a): per (method, B, γ) the measured speedup over the same cell's batched AR (end to end, and of the
    decode: the timed prefill subtracted from both walls), the survey's prediction from the measured β(B, γ+1), α
    and c, the relative errors, τ measured and its own prediction τ(α, γ), and the token identity with AR."""
    target = BatchingResult.from_dict(costs["target"])
    draft = BatchingResult.from_dict(costs["draft"]) if costs.get("draft") else None
    out = []
    for cell in cells:
        ar = method_row(cell, AR)
        for label in cell["batches"][0]["runs"]:
            if label == AR:
                continue
            m = method_row(cell, label)
            b, g = cell["batch"], cell["gamma"]
            beta = target.beta(b, g + 1)
            c = draft_cost(target, draft if label == "speculative" else None, b, m["draft"])
            alpha = m["alpha"] if m["alpha"] is not None else 0.0
            predicted = predicted_speedup(alpha, g, beta, c)
            measured = m["tokens_per_s"] / ar["tokens_per_s"]
            decode = m["decode_tokens_per_s"] / ar["decode_tokens_per_s"]
            out.append({"method": label, "batch_size": b, "gamma": g, "rows": m["rows"],
                        "speedup": measured, "speedup_decode": decode, "predicted": predicted,
                        "rel_error_decode": relative_error(decode, predicted),
                        "rel_error_end_to_end": relative_error(measured, predicted),
                        "alpha": m["alpha"], "beta": beta, "c": c, "draft": m["draft"],
                        "tau_measured": m["tokens_per_call"], "tau_predicted": float(expected_tokens(alpha, g)),
                        "accepted_per_step": m["accepted_per_step"], "tokens_per_s": m["tokens_per_s"],
                        "ar_tokens_per_s": ar["tokens_per_s"], "latency_per_token_ms": m["latency_per_token_ms"],
                        "ar_latency_per_token_ms": ar["latency_per_token_ms"], "target_calls": m["target_calls"],
                        "ar_target_calls": ar["target_calls"], "prefill_share_ar": ar["prefill_s"] / ar["wall_s"],
                        "identical_to_ar": identical_to_ar(cell, label),
                        "same_prompts_as_ar": m["prompt_ids"] == ar["prompt_ids"]})
    return out


def throughput_rows(cells: Sequence[dict]) -> list[dict]:
    """Fig. (b): tokens/s and latency per token per row of every method at every (B, γ) (AR's row the same at
    every γ of a B: one run, shared)."""
    return [{k: v for k, v in method_row(cell, label).items() if k != "prompt_ids"}
            for cell in cells for label in cell["batches"][0]["runs"]]


def table1_rows(cells: Sequence[dict], costs: dict) -> list[dict]:
    """Fig. (c), the MJSD paper's Table 1 on our runs: per B, batched AR's wall time per decode step at B over at 1
    (``method_row``'s decode step: the prefill, which grows with B's prompts, apart), the median over the cells' γ
    (AR does not depend on γ: the cells of one B share its runs, so the median is their value); the wall time per
    step with the prefill spread over the steps, as the paper's Time/run counts it; the same ratio of the raw
    one-token forward (``metrics.batching``, same context); per input (÷ B); and the paper's Time/run at b over at 1
    where Table 1 has the b."""
    target = BatchingResult.from_dict(costs["target"])
    steps: dict[int, list[float]] = {}
    decode: dict[int, list[float]] = {}
    for cell in cells:
        row = method_row(cell, AR)
        steps.setdefault(cell["batch"], []).append(row["step_ms"])
        decode.setdefault(cell["batch"], []).append(row["decode_step_ms"])
    step = {b: statistics.median(v) for b, v in steps.items()}
    dec = {b: statistics.median(v) for b, v in decode.items()}
    if 1 not in step:
        raise ValueError("the Table 1 check needs B = 1 among the batches")
    raw1 = target.cell(1, 1).latency.median_s
    return [{"batch_size": b, "ar_decode_step_ms": dec[b], "decode_step_over_b1": dec[b] / dec[1],
             "decode_step_per_input_over_b1": dec[b] / dec[1] / b,
             "ar_step_with_prefill_ms": step[b], "step_with_prefill_over_b1": step[b] / step[1],
             "forward_ms": 1e3 * target.cell(b, 1).latency.median_s,
             "forward_over_b1": target.cell(b, 1).latency.median_s / raw1,
             "mjsd_time_per_run_over_b1": (MJSD_TIME_PER_RUN[b] / MJSD_TIME_PER_RUN[1]
                                           if b in MJSD_TIME_PER_RUN else None)}
            for b in sorted(step)]


def beta_rows(costs: dict, gammas: Sequence[int]) -> list[dict]:
    """β(B, γ+1) measured at every (B, γ), beside γ+1, the compute-bound limit the survey names ("β gets closer to
    k")."""
    target = BatchingResult.from_dict(costs["target"])
    return [{"batch_size": b, "gamma": g, "beta": target.beta(b, g + 1), "compute_bound_limit": g + 1}
            for b in target.batches for g in gammas]


# ------------------------------------------------------------------ the goals


def goal_rows(speedups: Sequence[dict], goal_batch: int = GOAL_BATCH,
              tolerance: float = GOAL_TOLERANCE) -> list[dict]:
    """Issue 24's goals against the measured rows: prompt lookup at B = ``goal_batch`` faster than batched AR (at
    its best γ, and at every γ), and |measured − predicted| / predicted ≤ ``tolerance`` at every B (per method, over
    every γ; for the decode speedup, which the formula models, and end to end)."""
    out = []
    at_goal = [r for r in speedups if r["method"] == "prompt-lookup" and r["batch_size"] == goal_batch]
    if at_goal:
        best = max(at_goal, key=lambda r: r["speedup"])
        out.append({"goal": f"prompt lookup at B = {goal_batch} faster than batched AR (best γ, end to end)",
                    "method": "prompt-lookup", "target": "> 1", "measured": best["speedup"],
                    "where": f"γ = {best['gamma']}", "met": best["speedup"] > 1})
        worst = min(at_goal, key=lambda r: r["speedup"])
        out.append({"goal": f"prompt lookup at B = {goal_batch} faster than batched AR (every γ, end to end)",
                    "method": "prompt-lookup", "target": "> 1", "measured": worst["speedup"],
                    "where": f"γ = {worst['gamma']}", "met": worst["speedup"] > 1})
    else:
        out.append({"goal": f"prompt lookup at B = {goal_batch} faster than batched AR", "method": "prompt-lookup",
                    "target": "> 1", "measured": None, "where": f"B = {goal_batch} not measured", "met": None})
    for method in dict.fromkeys(r["method"] for r in speedups):
        mine = [r for r in speedups if r["method"] == method]
        for key, what in (("rel_error_decode", "decode (prefill subtracted)"), ("rel_error_end_to_end", "end to end")):
            worst = max(mine, key=lambda r: abs(r[key]))
            out.append({"goal": f"|measured − predicted| ≤ {tolerance:.0%} of predicted at every B, {what}",
                        "method": method, "target": f"≤ {tolerance:g}", "measured": abs(worst[key]),
                        "where": f"worst at B = {worst['batch_size']}, γ = {worst['gamma']} ({worst[key]:+.1%})",
                        "met": abs(worst[key]) <= tolerance})
    return out


# ------------------------------------------------------------------ the study, resumable


@dataclass(frozen=True)
class BatchStudy:
    """What a run of the study holds: its config, the costs (β, c) and every cell's runs, as saved."""

    config: BatchStudyConfig
    costs: dict  # {"target": BatchingResult dict, "draft": BatchingResult dict | None}
    cells: tuple[dict, ...]  # run_batch_size outputs, B ascending then γ
    context_tokens: int  # L of the cost measurement
    folder: str  # where it is kept in the run cache

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, **dataclasses.asdict(self)}


def run_study(config: BatchStudyConfig, target: LoadedModel, draft: LoadedModel | None,
              prompts: Sequence[tuple[str, list[int]]], cache: StudyCache, echo: bool = True) -> BatchStudy:
    """The costs, then every B's cells (B ascending, γ within), each B kept as one JSON file in the run-cache folder
    ``cache.dir("cells", config, prompt ids)``: a run with the same config, prompts and code resumes at the first
    file missing; ``cache.fresh`` recomputes."""
    rows = fill_rows(list(prompts), config.rows, config.prompt_tokens)
    folder = cache.dir("cells", config, [pid for pid, _ in rows])
    record = folder / BENCH_RECORD  # one record for every cell: they share the warm-up that traces the timed code
    restart_if_code_changed(folder, record)
    context = decode_context(rows, config.max_new_tokens)
    warmed = False

    def computed(path, compute):
        nonlocal warmed
        if not path.exists() and not warmed:  # (restart_if_code_changed left only cells the record vouches for)
            warm_up(target, draft, rows, config)
            warmed = True
        return cached_json(path, compute, record=record)

    with recording(record):
        costs = computed(folder / "costs.json", lambda: measure_costs(target, draft, context, config))
        cells = []
        for b in config.batches:
            path = folder / f"cells-b{b}.json"
            cached = path.exists()
            cells.extend(computed(path, lambda: run_batch_size(target, draft, rows, config, b)))
            if echo:
                print(f"B = {b:>2}, γ in {config.gammas}: {'resumed' if cached else 'measured'} ({path.name})")
    study = BatchStudy(config=config, costs=costs, cells=tuple(cells), context_tokens=len(context),
                       folder=str(folder))
    cached_json(folder / "study.json", study.to_dict, record=record)  # the whole run, with its config, in one file
    return study


def statement_rows(speedups: Sequence[dict], betas: Sequence[dict], table1: Sequence[dict]) -> list[dict]:
    """The documents' statements beside what these runs measured: where each method's speedup peaks in B (per γ),
    β(B, γ+1) at the largest B against γ+1, and the per-step cost at the largest B against at 1 (ours, raw forwards
    and the MJSD paper's)."""
    out = []
    for method in dict.fromkeys(r["method"] for r in speedups):
        for g in sorted({r["gamma"] for r in speedups if r["method"] == method}):
            mine = [r for r in speedups if r["method"] == method and r["gamma"] == g]
            best = max(mine, key=lambda r: r["speedup"])
            out.append({"statement": STATEMENTS["batch_1"], "measured": f"{method}, γ = {g}: highest speedup "
                        f"{best['speedup']:.3g}× at B = {best['batch_size']}",
                        "agrees": best["batch_size"] == min(r["batch_size"] for r in mine)})
    top = max(r["batch_size"] for r in betas)
    for r in (r for r in betas if r["batch_size"] == top):
        low = next(x for x in betas if x["batch_size"] == min(b["batch_size"] for b in betas)
                   and x["gamma"] == r["gamma"])
        out.append({"statement": STATEMENTS["beta_k"], "measured": f"γ = {r['gamma']}: β(B, γ+1) = {low['beta']:.3g} "
                    f"at B = {low['batch_size']}, {r['beta']:.3g} at B = {top} (γ+1 = {r['gamma'] + 1})",
                    "agrees": abs(r["beta"] - (r["gamma"] + 1)) < abs(low["beta"] - (r["gamma"] + 1))})
    last = max((r for r in table1 if r["mjsd_time_per_run_over_b1"] is not None), key=lambda r: r["batch_size"])
    out.append({"statement": STATEMENTS["table1"], "measured": f"B = {last['batch_size']}: AR decode step "
                f"{last['decode_step_over_b1']:.3g}× the B = 1 step ({last['step_with_prefill_over_b1']:.3g}× with the "
                f"prefill spread over the steps), raw forward {last['forward_over_b1']:.3g}× (paper's Time/run "
                f"{last['mjsd_time_per_run_over_b1']:.3g}×)",
                "agrees": last["decode_step_over_b1"] <= TABLE1_ABOUT})
    return out
