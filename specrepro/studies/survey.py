"""The measuring code of ``notebooks/survey_mentored_staged_batch.ipynb``: mentored decoding on the real models'
rows and against task quality (mentored blog, seed 001), staged and fused decoding, β against batch size and
speculative sampling's speedup by task beside Chen et al.'s (survey blog, seed 004).

Notation (docs/notation.md): p = target row, q = draft row, D = the KL bound of mentored decoding, γ = draft length,
R = rows, V = vocabulary.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

import numpy as np
import torch

from simulations.speculative import expected_speedup, max_beta

from ..acceptance.mentored import solve_rows
from ..run.bench_types import BenchPrompt, BenchResult
from ..core.config import DecodeConfig, SamplingConfig
from ..core.decoding import Clock, eos_ids, model_device
from ..core.deps import untraced
from ..drafters.prompt_lookup import PromptLookupDrafter
from ..drafters.staged import FusedDrafter, StagedDrafter
from ..run.generate import generate_ids
from ..metrics.profile import forward_timer
from ..engine.models import LoadedModel
from ..core.record import alpha_of, tokens_per_call
from ..core import stats
from ..decode.speculative import speculative_generate
from ..core.warping import warp
from .common import records_of, rows_of, run_means, task_arrays

CHUNK = 16  # rows per solve_rows call: R x V float64 tensors stay a few MB


def speculative_label(gamma: int) -> str:
    return f"speculative:g{gamma}"


def mentored_label(gamma: int, bound: float) -> str:
    return f"mentored:g{gamma}:kl{bound:g}"


# ------------------------------------------------------------------ mentored blog: one token, real rows


def target_rows(target: LoadedModel, draft: LoadedModel, prompts: Sequence[BenchPrompt], max_new: int, seed: int,
                sampling: SamplingConfig) -> tuple[torch.Tensor, torch.Tensor, list[list[int]]]:
    """(p [R, V], q [R, V], contexts): the target writes ``max_new`` tokens after each prompt by AR sampling (seed
    ``seed + i`` for prompt i); p and q are the target's and the draft's warped rows at every position that predicts
    one of those tokens, float64 on the CPU, each renormalised (fp32 sums drift ~1e-5); a context is the prompt and
    its target-written text."""
    device = model_device(target.model)
    p_rows, q_rows, contexts = [], [], []
    for i, prompt in enumerate(prompts):
        rec = generate_ids(target, prompt.ids,
                           DecodeConfig(method="ar", max_new_tokens=max_new, sampling=sampling, seed=seed + i))
        ids = torch.tensor([prompt.ids + rec.token_ids], device=device)  # [1, L + n]
        at = slice(len(prompt.ids) - 1, ids.shape[1] - 1)  # the rows that predict each target-written token
        with torch.inference_mode():
            p_rows.append(warp(target.model(input_ids=ids).logits[0, at], sampling).double().cpu())  # [n, V]
            q_rows.append(warp(draft.model(input_ids=ids).logits[0, at], sampling).double().cpu())  # [n, V]
        contexts.append(prompt.ids + rec.token_ids)
    p_all, q_all = torch.cat(p_rows), torch.cat(q_rows)  # [R, V] each
    return p_all / p_all.sum(-1, keepdim=True), q_all / q_all.sum(-1, keepdim=True), contexts


def kl_rows(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """KL(p ‖ q) per row [R]; ∞ where q = 0 < p."""
    return torch.where(p > 0, p * (p.log() - q.log()), 0.0).sum(-1)


def speculative_rates(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Speculative sampling's acceptance per row [R]: Σ min(p, q) (mentored decoding at D = 0)."""
    return torch.minimum(p, q).sum(-1)


def acceptance_at(p: torch.Tensor, q: torch.Tensor, bound: float, chunk: int = CHUNK) -> tuple[torch.Tensor, float]:
    """Optimal acceptance A [R] of every row at D = ``bound`` (``solve_rows``, ``chunk`` rows a call), and the
    largest KL(p ‖ π) − D over the rows, π the law of the emitted token (≤ 0 when every row keeps its bound)."""
    accept, excess = [], -np.inf
    for i in range(0, p.shape[0], chunk):
        pc, qc = p[i:i + chunk], q[i:i + chunk]  # [r, V]
        sol = solve_rows(pc, qc, bound)
        accept.append(sol.accept_prob)
        excess = max(excess, float((kl_rows(pc, sol.pi) - bound).max()))
    return torch.cat(accept), excess


def acceptance_curve(p: torch.Tensor, q: torch.Tensor, bounds: Sequence[float]) -> tuple[np.ndarray, float]:
    """(A [nD, R], the largest KL(p ‖ π) − D over rows and bounds)."""
    curve, excess = zip(*(acceptance_at(p, q, d) for d in bounds))
    return torch.stack(curve).numpy(), max(excess)


def acceptance_table(bounds: Sequence[float], curve: np.ndarray, p: torch.Tensor, q: torch.Tensor,
                     synthetic: np.ndarray) -> list[dict]:
    """One row per bound: mean and 10%/90% quantiles of A over the rows, speculative sampling's mean Σ min(p, q),
    the share of rows with KL(p ‖ q) ≤ D (accepted outright) and the synthetic chart's mean."""
    rate, kl = speculative_rates(p, q), kl_rows(p, q)
    return [{"D": float(d), "mean_accept": float(curve[j].mean()), "q10_accept": float(np.quantile(curve[j], 0.1)),
             "q90_accept": float(np.quantile(curve[j], 0.9)), "speculative_accept_D0": float(rate.mean()),
             "share_rows_accept_all": float((kl <= d).double().mean()), "synthetic_mean_accept": float(synthetic[j]),
             "rows": int(p.shape[0])} for j, d in enumerate(bounds)]


def solver_cost(model: torch.nn.Module, p: torch.Tensor, q: torch.Tensor, context: list[int], bound: float,
                gamma: int, repeats: int) -> list[dict]:
    """Median time of ``solve_rows`` at D = ``bound`` on 1 row and on γ rows in one call (rows the bound does not
    accept outright where there are γ of them), against one target forward over 1 and γ+1 tokens after
    ``context``; interleaved, after one warm-up of each. One row per timed thing."""
    device = model_device(model)
    hard = (kl_rows(p, q) > bound).nonzero().flatten()  # rows that need the binary search
    pick = (hard if hard.numel() >= gamma else torch.arange(p.shape[0]))[:gamma]
    p_dev, q_dev = p[pick].to(device), q[pick].to(device)  # [γ, V] on the target's device, as in the loop
    timer, clock = forward_timer(model, context), Clock(device)

    def timed_solve(rows: int) -> float:
        t0 = clock.now()
        solve_rows(p_dev[:rows], q_dev[:rows], bound)
        return clock.now() - t0

    timed_solve(1), timer(1)  # warm-up
    times = {"solve_1": [], "solve_gamma": [], "forward_1": [], "forward_gamma1": []}
    with untraced():  # timed, after the warm-up above ran the same code under any dependency trace (core/deps.py)
        for _ in range(repeats):
            times["solve_1"].append(timed_solve(1))
            times["solve_gamma"].append(timed_solve(len(pick)))
            times["forward_1"].append(timer(1))
            times["forward_gamma1"].append(timer(gamma + 1))
    med = {k: statistics.median(v) for k, v in times.items()}
    f1, fg = med["forward_1"], med["forward_gamma1"]
    rows = [("solve_rows, 1 row", 1, med["solve_1"]),
            (f"solve_rows, {len(pick)} rows in one call", len(pick), med["solve_gamma"]),
            ("target forward, 1 token (L(1))", None, f1), (f"target forward, {gamma + 1} tokens (L(γ+1))", None, fg)]
    return [{"what": what, "rows": n, "ms": 1e3 * s, "vs_target_forward_1_token": s / f1,
             "vs_target_forward_gamma1_tokens": s / fg} for what, n, s in rows]


# ------------------------------------------------------------------ mentored blog: speed against quality


def quality_table(result: BenchResult, gammas: Sequence[int], bounds: Sequence[float],
                  repeats: int) -> tuple[list[dict], float, float, dict]:
    """(table, run range, reference, lossless runs) of the speed-quality bench. AR sampling and speculative sampling
    at every γ sample the target's own law, so each of their runs' mean ROUGE-L is a draw of one quantity: the
    range of those runs, their mean the reference, and a variant's drop (reference − its ROUGE-L) set beside that
    range. Descriptive only: whether mentored decoding is faster at a quality within noise is decided from a
    paired bootstrap in ``notebooks/mentored_speed_quality.ipynb``, not from the range of a few single runs."""
    rows, runs = rows_of(result), run_means(result.records, "rouge_l")
    spec = {g: speculative_label(g) for g in gammas}
    lossless_runs = {run: v for run, v in runs.items() if run[0] == "ar" or run[0] in spec.values()}
    run_range = max(lossless_runs.values()) - min(lossless_runs.values())
    reference = statistics.mean(lossless_runs.values())
    table = []
    for label, gamma, bound in [("ar", None, None), *[(spec[g], g, 0.0) for g in gammas],
                                *[(mentored_label(g, d), g, d) for g in gammas for d in bounds]]:
        r = rows[label]
        table.append({"variant": label, "gamma": gamma, "kl_bound": bound, "lossless": r["lossless"],
                      "tokens_per_s": r["tokens_per_s"], "speedup": r["speedup"],
                      "speed_over_speculative": None if gamma is None
                      else r["tokens_per_s"] / rows[spec[gamma]]["tokens_per_s"],
                      "tokens_per_call": r["tokens_per_call"], "alpha": r["alpha"], "rouge_l": r["rouge_l"],
                      "rouge_l_runs": " ".join(f"{runs[label, k]:.4f}" for k in range(repeats)),
                      "rouge_l_drop": reference - r["rouge_l"],
                      "drop_within_run_range": reference - r["rouge_l"] <= run_range,
                      "perplexity": r["perplexity"], "prompts": r["n"], "new_tokens": r["new_tokens"]})
    return table, run_range, reference, lossless_runs


def speed_at_largest_bound(table: list[dict], rows: dict[str, dict], gammas: Sequence[int],
                           bounds: Sequence[float], run_range: float) -> list[dict]:
    """Per γ, the largest D whose ROUGE-L drop is no larger than the lossless runs' range, and mentored's tokens/s
    over speculative sampling's there. A measurement, not a verdict (see :func:`quality_table`)."""
    by_variant = {r["variant"]: r for r in table}
    out = []
    for g in gammas:
        ok = [d for d in bounds if by_variant[mentored_label(g, d)]["drop_within_run_range"]]
        best = max(ok) if ok else None
        spec = rows[speculative_label(g)]["tokens_per_s"]
        mine = rows[mentored_label(g, best)]["tokens_per_s"] if best is not None else None
        out.append({"gamma": g, "largest_D_drop_within_run_range": best, "mentored_tokens_per_s": mine,
                    "speculative_tokens_per_s": spec, "mentored_over_speculative": None if mine is None
                    else mine / spec, "rouge_l_run_range": run_range,
                    "verdict_in": "mentored_speed_quality/verdicts.md (mentored.speedup_within_quality_noise)"})
    return out


# ------------------------------------------------------------------ survey blog: Chen et al.'s speedups by task

# Chen et al. 2023, "Accelerating Large Language Model Decoding with Speculative Sampling", Table 1: Chinchilla 70B
# with a 4B draft on TPU v4, batch 1 (the survey blog shows this table as an image; its text names the setting).
CHEN_SETTING = "Chen et al. 2023, Table 1: Chinchilla 70B, 4B draft, TPU v4, batch 1"
CHEN_2023 = {("summarize", "sampling"): ("XSum", "nucleus", 1.92), ("summarize", "greedy"): ("XSum", "greedy", 2.01),
             ("humaneval", "sampling"): ("HumanEval", "nucleus", 2.46)}


def task_speedup_table(results: dict[float, BenchResult], suites: dict[str, Sequence[str]], speculative: str,
                       gamma: int, device: str, bootstrap: Callable | None, resamples: int = 2000) -> list[dict]:
    """One row per (suite, decoding): speculative sampling's speedup over AR on that suite's prompts, the bench's
    estimator (``stats.pooled_ratio``, a caption's ``stats.POOLED_RATIO``), its 95% paired-bootstrap interval over
    prompts and seeds (``bootstrap``: ``stats.paired_bootstrap``; None leaves it empty), α, tokens per target call,
    the bench's c and β(γ+1), the survey blog's E[speedup] from them, and Chen et al.'s number for the same task and
    decoding where Table 1 has one. ``results`` maps a temperature (0: greedy, else sampling) to a bench holding
    every suite's prompts; ``suites`` maps a suite to its prompt ids."""
    table = []
    for suite, ids in suites.items():
        for temperature, result in results.items():
            decoding = "greedy" if temperature == 0 else "sampling"
            x = task_arrays(result.records, ids, (speculative, "ar"))  # [P, S, 2, 2]: the stats layout
            ratio = stats.pooled_ratio(x)
            low, high = bootstrap(x, stats.pooled_ratio, resamples=resamples) if bootstrap else (None, None)
            spec = [r for r in result.records if r["method"] == speculative and r["prompt_id"] in set(ids)]
            prompt_tokens = statistics.mean(r["prompt_tokens"] for r in spec)
            alpha, row = alpha_of(spec), rows_of(result)[speculative]
            c, beta = row["c"], row["beta"]
            predicted = None if None in (alpha, c, beta) else float(expected_speedup(alpha, gamma, c, beta))
            task, paper_decoding, paper = CHEN_2023.get((suite, decoding), (None, None, None))
            table.append({
                "suite": suite, "decoding": decoding, "temperature": float(temperature),
                "gamma": gamma, "prompts": x.shape[0], "seeds": x.shape[1], "mean_prompt_tokens": prompt_tokens,
                "new_tokens": int(x[..., 0, 0].sum()),  # speculative sampling's tokens
                "speedup": ratio, "speedup_low": low, "speedup_high": high, "alpha": alpha,
                "tokens_per_call": tokens_per_call(spec), "c": c, "beta": beta, "predicted_speedup": predicted,
                "paper_task": task, "paper_decoding": paper_decoding, "paper_speedup": paper,
                "paper_setting": CHEN_SETTING if paper is not None else "Table 1 has no such row",
                "why_differs": (f"135M target with a 3-layer draft on {device}, not 70B with a 4B draft on TPU v4: "
                                f"c = {c:.2f} and β(γ+1) = {beta:.2f} measured here (a memory-bound 70B keeps β "
                                f"near 1), α = {alpha:.2f}, E[speedup] from them {predicted:.2f}×; our tokens/s "
                                f"include the prefill of a {prompt_tokens:.0f}-token prompt, which both methods pay"
                                if predicted is not None else f"135M target on {device}; c, β or α not measured"),
            })
    return table


# ------------------------------------------------------------------ survey blog: staged and fused decoding


def staged_table(result: BenchResult, names: dict[str, str], draft_alone: str) -> list[dict]:
    """One row per variant of the staged/fused bench (``names``: label -> name): tokens/s, speed over the draft
    model alone, draft-model and target forwards per generated token (the prefill included), identity with AR."""
    rows = rows_of(result)
    table = []
    for label, name in names.items():
        recs, r = records_of(result, label), rows[label]
        tokens = sum(x["new_tokens"] for x in recs)
        table.append({"variant": label, "method": name, "tokens_per_s": r["tokens_per_s"], "speedup": r["speedup"],
                      "speed_over_draft_alone": r["tokens_per_s"] / rows[draft_alone]["tokens_per_s"],
                      "draft_calls_per_token": sum(x["draft_calls"] for x in recs) / tokens,
                      "target_calls_per_token": sum(x["target_calls"] for x in recs) / tokens,
                      "tokens_per_call": r["tokens_per_call"], "identical_to_ar": r["identical_to_ar"],
                      "lossless": r["lossless"], "prompts": r["n"], "new_tokens": tokens})
    return table


def token_sources(target: LoadedModel, draft: LoadedModel, prompt_ids: list[int], max_new: int, gamma: int,
                  seed: int) -> dict[str, tuple[list[int], list[str]]]:
    """name -> (tokens, source label per token) of one T = 0 generation with a ``StagedDrafter`` (prompt lookup
    inside the draft model) and a ``FusedDrafter`` (prompt lookup or the draft model): the survey blog's picture."""
    eos = eos_ids(target.model, target.tokenizer)
    pictures = {}
    for name, drafter in (("staged", StagedDrafter(draft.model, PromptLookupDrafter())),
                          ("fused", FusedDrafter(draft.model, PromptLookupDrafter()))):
        config = DecodeConfig(method=name, max_new_tokens=max_new, gamma=gamma, sampling=SamplingConfig(temperature=0.0),
                              seed=seed)
        rec = speculative_generate(target.model, drafter, prompt_ids, config, eos,
                                   context_length=target.context_length, method=name)
        sources = list(drafter.committed_sources)
        assert len(sources) == rec.new_tokens, f"{name}: {len(sources)} source labels for {rec.new_tokens} tokens"
        pictures[name] = (rec.token_ids, sources)
    return pictures


def source_table(pictures: dict[str, tuple[list[int], list[str]]], order: Sequence[str], ar_tokens: list[int],
                 prompt_id: str) -> list[dict]:
    """Tokens and share per (drafter, source), sources in ``order``, with the generation's identity to AR."""
    return [{"drafter": name, "source": s, "tokens": src.count(s), "share": src.count(s) / len(src),
             "identical_to_ar": ids == ar_tokens, "prompt_id": prompt_id}
            for name, (ids, src) in pictures.items() for s in order if s in src]


def layout_sources(decode: Callable[[list[int]], str], ids: Sequence[int], sources: Sequence[str],
                   colour: dict[str, str], width: int = 110) -> list[tuple[int, int, str, str]]:
    """[(column, line, text, colour)]: token pieces in a monospace grid wrapped at ``width`` characters, each
    coloured by its source; a newline inside a token is shown as ¶ and starts a new line."""
    pieces, x, line = [], 0, 0
    for token, source in zip(ids, sources):
        for k, part in enumerate(decode([token]).split("\n")):
            if k > 0:
                pieces.append((x, line, "¶", colour[source]))
                x, line = 0, line + 1
            if x + len(part) > width:
                x, line, part = 0, line + 1, part.lstrip()
            pieces.append((x, line, part, colour[source]))
            x += len(part)
    return pieces


# ------------------------------------------------------------------ survey blog: β against batch size


def beta_table(batching, gammas: Sequence[int], alpha: float, c: float) -> list[dict]:
    """Per (B, γ): measured β(B, γ+1) = L(B, γ+1) / L(B, 1), the blog's break-even β and its E[speedup]
    (survey blog *Batch Size*, ``simulations.speculative``) with that β at one α and c."""
    table = []
    for b in batching.batches:
        for g in gammas:
            beta = batching.beta(b, g + 1)
            table.append({"batch_size": b, "gamma": g, "n_verified": g + 1,
                          "latency_1_ms": 1e3 * batching.cell(b, 1).latency.median_s,
                          "latency_n_ms": 1e3 * batching.cell(b, g + 1).latency.median_s, "beta": beta,
                          "compute_bound_limit": g + 1, "blog_break_even_beta": float(max_beta(alpha, g, c)),
                          "alpha": alpha, "c": c, "expected_speedup": float(expected_speedup(alpha, g, c, beta))})
    return table


# ------------------------------------------------------------------ the notebook's profiles: sizes and grids

# Per profile, the sizes of notebooks/survey_mentored_staged_batch.ipynb. bench: prompts per bench (None: all but the
# one-token chart's); rows: held-out prompts of the one-token chart; task_*: the speedup-by-task benches (prompts per
# suite, new tokens, seeds).
SETTINGS = {
    "smoke": dict(bench=1, rows=2, repeats=1, max_new=8, cost_repeats=1, warmup=2, solver_repeats=2, batch_context=16,
                  batch_rounds=1, batch_forwards=1, task_prompts=1, task_max_new=8, task_seeds=1),
    # quick, sized for ~8 minutes on 2 CPU threads: 3 bench prompts x 1 repeat, 16 tokens (a summarize generation
    # costs ~6-10 s whatever its length: prefill and scoring of ~450 tokens; mentored_speed_quality decides the
    # speed-quality question on more prompts and seeds), 8 prompts per suite for the speedup by task (every claim on
    # at least 8 prompts; one on fewer than 8 is undecided whatever its interval)
    "quick": dict(bench=3, rows=2, repeats=1, max_new=16, cost_repeats=3, warmup=8, solver_repeats=5, batch_context=64,
                  batch_rounds=8, batch_forwards=1, task_prompts=8, task_max_new=32, task_seeds=2),
    "full": dict(bench=None, rows=4, repeats=3, max_new=128, cost_repeats=7, warmup=8, solver_repeats=20,
                 batch_context=256, batch_rounds=5, batch_forwards=4, task_prompts=20, task_max_new=128, task_seeds=3),
}
# Per profile, the grids: γ and D of the speed-quality bench, the one-token chart's bounds, β's batch sizes and γ;
# smoke takes two points of each of quick's.
_QUICK_GRID = dict(gammas=(2, 4), bounds=(0.2, 1.0),
                   chart_bounds=(0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0),
                   batches=(1, 4, 16, 64), batch_gammas=(1, 2, 4, 8))
GRIDS = {
    "smoke": {name: (values[0], values[-1]) for name, values in _QUICK_GRID.items()},
    "quick": _QUICK_GRID,
    "full": dict(gammas=(2, 4, 6), bounds=(0.02, 0.05, 0.1, 0.2, 0.5, 1.0),
                 chart_bounds=tuple(np.round(np.linspace(0.0, 2.0, 41) ** 2, 4)),
                 batches=(1, 2, 4, 8, 16, 32, 64), batch_gammas=(1, 2, 3, 4, 5, 6, 7, 8)),
}


def profile_settings(profile: str) -> tuple[dict, dict]:
    """(sizes, grids) of ``profile``, fresh copies: a notebook may change its own without touching the table."""
    return dict(SETTINGS[profile]), dict(GRIDS[profile])
