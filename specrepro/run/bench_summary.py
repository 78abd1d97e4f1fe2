"""The benchmark's summary: one row per method variant, with the cost model's prediction beside the measurement.

The prediction charges every step what it really cost on this device: a step that proposed g drafts yields
τ(α, g) = (1 − α^{g+1}) / (1 − α) tokens in expectation and costs g·c·L_fp(1) + L_fp(g+1) seconds, with
L_fp from the device profile measured in the same session (``specrepro.metrics.profile``) and α pooled over
the variant's records; plain steps (nothing proposed) yield one token for L_fp(1). The predicted speedup is
the autoregressive baseline's L_fp(1) per token over that. With every step at γ this is the survey blog's
(*Batch Size*) E[speedup] = (1 − α^{γ+1}) / ((1 − α)(γc + β)); with proposals shorter than γ (prompt lookup,
the end of the budget, ``--gamma auto``) it is what the closed form at γ would mispredict. A token tree's steps are
charged their measured inputs and the drafting its plan measured (``predicted_for_trees``), and its ``c`` is that
drafting over L_fp(1): an EAGLE draft forward, Medusa's heads for a step; 0 only for PPD, which drafts inside the
target's forward.

At ``--batch-size B`` > 1 the profile is the batched step's (L_fp(n) over B rows, ``ProfileKey.batch``), so the same
formula gives the survey's prediction from β(B, γ+1) and the batched draft's c; tokens/s is throughput (a batch's wall
time counted once, ``run_wall``) and ``latency_per_token_s`` each row's latency per token.
"""
from __future__ import annotations

import csv
import dataclasses
import math
import os
import statistics
from pathlib import Path

from ..core import record, stats
from ..core.cost import expected_speedup, step_seconds, tau
from ..methods import Cost, Loop, Method
from ..metrics.profile import Latency, Profile

SUMMARY_COLUMNS = ("method", "base_method", "dtype", "gamma", "batch_size", "n", "new_tokens", "wall_time_s",
                   "tokens_per_s", "latency_per_token_s", "speedup", "speedup_median", "alpha", "tokens_per_call",
                   "mean_proposed", "c", "beta", "predicted_speedup", "predicted_with_host", "step_target_ms",
                   "step_draft_ms", "step_host_ms", "draft_over_target",
                   "efficiency", "identical_to_ar", "identical_to_counterpart", "lossless", "perplexity", "rouge_l",
                   "joules_per_token", "error")
SPEEDUP_CAPTION = (f"speedup: {stats.POOLED_RATIO} over the baseline (Σ tokens / Σ seconds on the same prompts); "
                   f"speedup_median: {stats.MEDIAN_OF_RATIOS} (per prompt and repeat)")


def run_wall(records: list[dict]) -> float:
    """Seconds the runs of ``records`` took: each record's wall time, but a batch's once (its rows ran together; a
    row's own ``wall_time_s`` is its latency within the batch, ``provenance.batch.wall_time_s`` the batch's)."""
    walls: dict[tuple, float] = {}
    for r in records:
        if r.get("batch_size", 1) > 1:
            walls["batch", r["batch"], r["repeat"]] = r["provenance"]["batch"]["wall_time_s"]
        else:
            walls["record", r["prompt_id"], r["repeat"]] = r["wall_time_s"]
    return sum(walls.values())


def step_split(records: list[dict]) -> dict:
    """A steady step's wall time in three parts (``decoding.StepSplit``), in ms per target call after each run's
    first (which holds the prompt's prefill): ``step_target_ms`` the target's forwards, ``step_draft_ms`` the
    draft's, ``step_host_ms`` the host's work around them; ``draft_over_target`` the draft's forwards over the
    target's in a step (what every drafter's drafting costs, measured: γ·c for a chain draft, 0 for one that runs no
    model). None where a run was not split (CUDA, peers, batched rows) or made one call only."""
    parts = [(r.get("time_split"), r["wall_time_s"], r["target_calls"]) for r in records]
    empty = dict.fromkeys(("step_target_ms", "step_draft_ms", "step_host_ms", "draft_over_target"))
    if not parts or any(split is None or split.get("first_step") is None for split, _, _ in parts):
        return empty
    steps = sum(calls - 1 for _, _, calls in parts)
    if steps <= 0:
        return empty

    def steady(key: str) -> float:
        return 1e3 * sum(split[f"{key}_forward_s"] - split["first_step"][f"{key}_forward_s"]
                         for split, _, _ in parts) / steps
    target, draft = steady("target"), steady("draft")
    wall = 1e3 * sum(wall - split["first_step"]["wall_s"] for split, wall, _ in parts) / steps
    return {"step_target_ms": target, "step_draft_ms": draft, "step_host_ms": wall - target - draft,
            "draft_over_target": draft / target if target > 0 else None}


def predicted_speedup(alpha: float | None, gamma: int, c: float, beta: float) -> float | None:
    """Survey blog (seed 004), *Batch Size*: E(speedup) = (1 − α^{γ+1}) / ((1 − α)(γc + β))."""
    if alpha is None or beta is None or c is None:
        return None
    return float(expected_speedup(alpha, gamma, c, beta))


def predicted_from_steps(alpha: float | None, proposed: list[int], plain_steps: int, c: float,
                         profile: Profile, baseline_decode_s: float, host: bool = False) -> float | None:
    """Predicted speedup over a baseline decoding at ``baseline_decode_s`` per token, from the real steps:
    Σ τ(α, g_s) tokens for Σ (g_s·c·L_fp(1) + L_fp(g_s+1)) seconds (module docstring); with ``host``, each step
    also costs the host's work the profile measured (``Profile.host_s``), and so should the baseline's."""
    if not proposed and not plain_steps:
        return None
    if proposed and alpha is None:
        return None
    tokens = plain_steps + sum(tau(alpha, g) for g in proposed)
    seconds = plain_steps * profile.decode_s + sum(step_seconds(g, c, profile.l_fp) for g in proposed)
    if host:
        seconds += plain_steps * profile.host_s(0) + len(proposed) * profile.host_s(1)
    return tokens * baseline_decode_s / seconds


def draft_step_s(records: list[dict]) -> float | None:
    """A tree drafter's measured drafting (``Plan.draft_step_s``: seconds of an EAGLE draft forward, of Medusa's
    heads for one step), the median over the records' plans; None where the drafter does no work of its own."""
    found = [r["provenance"]["draft_step_s"] for r in records
             if r.get("provenance", {}).get("draft_step_s") is not None]
    return statistics.median(found) if found else None


def drafting_seconds(records: list[dict], step_s: float | None) -> float:
    """The drafting the loop ran around the target's forwards: ``step_s`` for each draft forward (``draft_calls``:
    EAGLE's), and at least one per tree step (Medusa's heads, which count no draft forward)."""
    if not step_s:
        return 0.0
    return step_s * sum(max(r.get("draft_calls", 0), len(r.get("tree_sizes", []))) for r in records)


def predicted_for_trees(records: list[dict], profile: Profile, baseline_decode_s: float,
                        host: bool = False) -> float | None:
    """Token trees (Medusa, PPD, EAGLE): α along a chain does not describe a tree, so the prediction takes the
    measured tokens per target call τ and charges every step the measured L_fp of its real input (the root, its n
    nodes and any prompt nodes, ``input_lengths``; a plain step L_fp(1)), and the drafting the plan measured
    (:func:`drafting_seconds`; none for PPD, whose prompt tokens ride in the target's forward): speedup = tokens ·
    L_fp,baseline(1) / (Σ_steps L_fp(input_s) + drafting). Efficiency then measures what the loop spends outside
    the forwards (tree bookkeeping, sampling), unless ``host`` charges each step the host's work the profile
    measured (``Profile.host_s``: a plain step's for a one-token input, a speculative step's otherwise)."""
    tokens = sum(r["new_tokens"] for r in records)
    drafting = drafting_seconds(records, draft_step_s(records))
    if all("input_lengths" in r for r in records):
        lengths = [n for r in records for n in r["input_lengths"]]
        if not tokens or max(lengths, default=1) > profile.n_max:
            return None
        return tokens * baseline_decode_s / (drafting + sum(
            profile.l_fp(n) + (profile.host_s(1 if n > 1 else 0) if host else 0.0) for n in lengths))
    sizes = [n for r in records for n in r.get("tree_sizes", [])]  # (records written before input_lengths)
    plain = sum(r["target_calls"] - len(r.get("tree_sizes", [])) for r in records)
    if not tokens or any(n + 1 > profile.n_max for n in sizes):
        return None
    seconds = drafting + plain * profile.decode_s + sum(profile.l_fp(n + 1) for n in sizes)
    if host:
        seconds += plain * profile.host_s(0) + len(sizes) * profile.host_s(1)
    return tokens * baseline_decode_s / seconds


def tree_c(records: list[dict], profile: Profile | None) -> float | None:
    """A tree drafter's c: its measured drafting (a draft forward, or a step's heads) over the target's one-token
    step L_fp(1); 0 for one that does no work of its own (PPD); None without a profile."""
    step_s = draft_step_s(records)
    if not step_s:
        return 0.0
    return step_s / profile.decode_s if profile is not None else None


def pooled_profile(profiles: list[Profile]) -> Profile:
    """One profile from several sessions' (a resumed run): the median of each median, spreads widened."""
    if len(profiles) == 1:
        return profiles[0]
    def pool(lats: list[Latency]) -> Latency:
        return Latency(statistics.median(l.median_s for l in lats), min(l.p25_s for l in lats),
                       max(l.p75_s for l in lats))
    ns = sorted(set.intersection(*({n for n, _ in p.forward} for p in profiles)))
    forward = tuple((n, pool([dict(p.forward)[n] for p in profiles])) for n in ns)
    drafts = [p.draft_decode for p in profiles if p.draft_decode is not None]
    first = profiles[0]
    hosts = [p.host for p in profiles if p.host is not None]
    host = None if not hosts else dataclasses.replace(
        hosts[0], ar_step_s=statistics.median(h.ar_step_s for h in hosts),
        spec_step_s=statistics.median(h.spec_step_s for h in hosts))
    return Profile(key=first.key, context_tokens=first.context_tokens, repeats=sum(p.repeats for p in profiles),
                   forward=forward, draft_decode=pool(drafts) if drafts else None,
                   machine={"pooled_sessions": len(profiles), **first.machine}, host=host)


def _identical(records: list[dict], by_key: dict, other: str | None) -> float | None:
    if other is None:
        return None
    pairs = [(r, by_key.get((other, r["prompt_id"], r["repeat"]))) for r in records]
    pairs = [(r, o) for r, o in pairs if o is not None]
    return sum(r["token_ids"] == o["token_ids"] for r, o in pairs) / len(pairs) if pairs else None


def reference_label(variant, variants, base: str) -> str | None:
    """The variant of method ``base`` that ``variant`` should match token for token at T = 0: same dtype
    (tokens of two dtypes may differ at near-ties, which says nothing about exactness) and, for a
    counterpart, the same γ."""
    for v in variants:
        if v.method.name == base and v.dtype == variant.dtype and (base == "ar" or v.gamma == variant.gamma):
            return v.label
    return None


def summarize(records: list[dict], variants: list, greedy: bool, profiles: dict[str, Profile],
              baseline: str | None, failed: dict[str, dict] | None = None) -> list[dict]:
    """One row per variant (``SUMMARY_COLUMNS``); totals pooled over prompts and repeats: ``speedup`` is the
    ``stats.POOLED_RATIO`` over the baseline, ``speedup_median`` the ``stats.MEDIAN_OF_RATIOS``. ``variants`` are
    resolved (each has a concrete dtype); ``profiles`` maps dtype -> that dtype's session profile;
    ``baseline`` is the label of the autoregressive variant speedups are measured against; ``failed`` maps the
    label of a variant that raised to its error ({"error": type, "message", "where"}), shown in its row."""
    failed = failed or {}
    by_key = {(r["method"], r["prompt_id"], r["repeat"]): r for r in records}
    by_label = {v.label: v for v in variants}
    rows = []
    for v in variants:
        rs = [r for r in records if r["method"] == v.label]
        tokens = sum(r["new_tokens"] for r in rs)
        wall, latency = run_wall(rs), sum(r["wall_time_s"] for r in rs)
        calls = [r["target_calls"] for r in rs]
        spec = v.method
        kind, ours = spec.cost, not spec.loop.baseline
        profile = profiles.get(v.dtype)
        # Token trees (Medusa, PPD, multi-draft): α and β(γ+1) are chain quantities, so their cells stay empty.
        tree = ours and (spec.token_tree or any(r.get("tree_sizes", r["proposed_lengths"])
                                                         != r["proposed_lengths"] for r in rs))
        alpha = None if tree else record.alpha_of(rs)
        c = None if kind is Cost.PLAIN else ((profile.c if profile else None) if kind.draft_cost
                                             else tree_c(rs, profile) if tree else 0.0)
        proposed = [g for r in rs for g in r.get("proposed_lengths", [])]
        gamma_nominal = v.gamma if v.gamma != "auto" else (round(statistics.mean(proposed)) if proposed else None)
        base_profile = profiles.get(by_label[baseline].dtype) if baseline is not None else None
        predicted, with_host = predictions(v, rs, tree, alpha, proposed, c, profile, base_profile)
        rows.append({
            "method": v.label, "base_method": spec.name, "dtype": v.dtype, "gamma": v.gamma,
            "batch_size": max((r.get("batch_size", 1) for r in rs), default=1), "n": len(rs),
            "new_tokens": tokens, "wall_time_s": wall, "tokens_per_s": tokens / wall if wall > 0 else None,
            "latency_per_token_s": latency / tokens if tokens else None,
            "speedup": None, "alpha": alpha,
            "tokens_per_call": record.tokens_per_call(rs),
            "mean_proposed": (sum(proposed) / sum(calls) if rs and ours and kind is not Cost.PLAIN and all(calls)
                              else None),
            "c": c, "beta": (profile.beta(gamma_nominal + 1) if profile and kind is not Cost.PLAIN and gamma_nominal
                             and not tree and gamma_nominal + 1 <= profile.n_max else None),
            "predicted_speedup": predicted, "predicted_with_host": with_host, **step_split(rs), "efficiency": None,
            "identical_to_ar": (_identical(rs, by_key, reference_label(v, variants, "ar"))
                                if greedy and spec.name != "ar" else None),
            "identical_to_counterpart": (_identical(rs, by_key, reference_label(v, variants, spec.counterpart))
                                         if greedy and spec.counterpart else None),
            "lossless": lossless(spec, rs), **quality_and_energy(rs),
            "error": (f"{failed[v.label]['error']}: {failed[v.label]['message']}" if v.label in failed else None),
        })
    base = next((r for r in rows if r["method"] == baseline), None)
    for row in rows:
        row["speedup_median"] = record.median_speedup([r for r in records if r["method"] == row["method"]],
                                                      [r for r in records if r["method"] == baseline])
        if base and base["tokens_per_s"] and row["tokens_per_s"]:
            # the totals, not the runs: a batch's rows share one wall time, counted once (run_wall)
            row["speedup"] = stats.pooled_ratio([[row["new_tokens"], row["wall_time_s"]],
                                                 [base["new_tokens"], base["wall_time_s"]]])
            if row["predicted_speedup"]:
                row["efficiency"] = row["speedup"] / row["predicted_speedup"]
    return rows


def predictions(variant, records: list[dict], tree: bool, alpha: float | None, proposed: list[int],
                c: float | None, profile: Profile | None, base: Profile | None) -> tuple[float | None, float | None]:
    """A variant's predicted speedup over the baseline (profile ``base``) from its forwards alone, and with the host's
    work per step where both profiles measured it (``Profile.host``; else None): chains by their steps, trees by
    their inputs, plain decoding by its dtype's step; none for MJGD (a beam search: no chain or tree model)."""
    spec = variant.method
    if profile is None or base is None or spec.loop is Loop.MJGD:
        return None, None
    hosts = profile.host is not None and base.host is not None
    base_s, base_host_s = base.decode_s, base.decode_s + base.host_s(0)
    if spec.cost is Cost.PLAIN:  # no drafting: only the dtype differs
        return base_s / profile.decode_s, (base_host_s / (profile.decode_s + profile.host_s(0)) if hosts else None)
    if tree:
        return (predicted_for_trees(records, profile, base_s),
                predicted_for_trees(records, profile, base_host_s, host=True) if hosts else None)
    if spec.loop.baseline or c is None:
        return None, None
    plain = sum(r["target_calls"] - len(r["proposed_lengths"]) for r in records)
    return (predicted_from_steps(alpha, proposed, plain, c, profile, base_s),
            predicted_from_steps(alpha, proposed, plain, c, profile, base_host_s, host=True) if hosts else None)


def lossless(method: Method, records: list[dict]) -> bool | None:
    """Whether the variant's tokens are distributed as the target's p: its acceptance rule's flag (records'
    provenance), True for plain decoding and transformers' decoders, False for MJGD (a search, not a sample), None for
    llama.cpp's (exact for its own p, computed in the GGUF's quantised types: not the target's p as we compute it)."""
    flags = {r.get("provenance", {}).get("acceptance", {}).get("lossless") for r in records} - {None}
    if flags:
        return all(flags)
    if method.loop is Loop.SPECULATIVE or not method.loop.own_weights:
        return None
    return method.loop is not Loop.MJGD


def quality_and_energy(records: list[dict]) -> dict:
    """Pooled over the variant's records: perplexity exp(Σ NLL / Σ tokens) (MJSD Eq. 1 over all its generated
    tokens), the mean ROUGE-L of the records that have a reference, and joules per token (empty unless every
    record has an energy)."""
    scored = [r for r in records if r.get("nll_tokens")]
    nll, n = sum(r["nll_sum"] for r in scored), sum(r["nll_tokens"] for r in scored)
    rouge = [r["rouge_l"] for r in records if r.get("rouge_l") is not None]
    energy = [r.get("energy_j") for r in records]
    tokens = sum(r["new_tokens"] for r in records)
    return {"perplexity": math.exp(nll / n) if n else None,
            "rouge_l": statistics.mean(rouge) if rouge else None,
            "joules_per_token": (sum(energy) / tokens if records and tokens and None not in energy else None)}


def mismatches(records: list[dict], variants: list, greedy: bool) -> list[str]:
    """At T = 0, every record whose tokens differ from its reference (ar, and the HF counterpart)."""
    if not greedy:
        return []
    by_key, lines = {(r["method"], r["prompt_id"], r["repeat"]): r for r in records}, []
    by_label = {v.label: v for v in variants}
    for r in records:
        v = by_label.get(r["method"])
        if v is None or lossless(v.method, [r]) is False:  # a lossy method differs from AR by design
            continue
        refs = {reference_label(v, variants, "ar"), reference_label(v, variants, v.method.counterpart or "ar")}
        for other in refs - {None, v.label}:
            o = by_key.get((other, r["prompt_id"], r["repeat"]))
            if o is not None and o["token_ids"] != r["token_ids"]:
                a, b = r["token_ids"], o["token_ids"]
                first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                lines.append(f"{r['method']} vs {other} on {r['prompt_id']} (repeat {r['repeat']}): "
                             f"first difference at generated token {first} ({len(a)} vs {len(b)} tokens)")
    return lines


def write_summary(out: Path, rows: list[dict]) -> Path:
    path = Path(out) / "summary.csv"
    tmp = path.with_name(".summary.csv.tmp")
    with open(tmp, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=SUMMARY_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if row[k] is None else row[k]) for k in SUMMARY_COLUMNS})
    os.replace(tmp, path)
    return path


def read_summary(out: Path) -> list[dict]:
    """summary.csv back as dicts, numbers as floats and empty cells as None."""
    def cell(v: str):
        if v == "":
            return None
        try:
            return float(v)
        except ValueError:
            return v
    with open(Path(out) / "summary.csv", newline="") as handle:
        return [{k: cell(v) for k, v in row.items()} for row in csv.DictReader(handle)]


def format_summary(rows: list[dict]) -> str:
    """A plain-text table of a summary for the terminal, with a caption that says which speedup is which."""
    def fmt(v) -> str:
        if v is None:
            return "-"
        return f"{v:.3f}" if isinstance(v, float) and not math.isnan(v) else str(v)
    cols = ("method", "dtype", "n", "tokens_per_s", "speedup", "speedup_median", "alpha", "tokens_per_call",
            "mean_proposed", "c", "beta", "predicted_speedup", "predicted_with_host", "efficiency", "step_target_ms",
            "step_draft_ms",
            "step_host_ms", "draft_over_target", "identical_to_ar", "identical_to_counterpart", "lossless",
            "perplexity", "rouge_l", "joules_per_token")
    cells = [[fmt(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    lines.append(SPEEDUP_CAPTION)
    return "\n".join(lines)
