"""The measuring code of ``notebooks/eagle_feature_draft.ipynb`` (issue 23, item 5): the EAGLE draft of
``drafters.eagle`` on our target, by draft position across its trained variants, by tree shape and size, against the
other lossless methods in one interleaved bench, and in the PPD paper's (seed 002) Fig. 7 memory comparison.

Notation: d = draft position (tree depth), a_d = the held-out top-1 acceptance at position d given that the d − 1
tokens before it were right, n = tree size (candidate nodes), τ(n) = tokens per tree-verifying target call.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from simulations import ppd as sim_ppd

from ..run.bench_types import BenchPrompt, BenchResult
from ..drafters.eagle import EagleConfig, EagleDraft, EagleDrafter
from ..drafters.medusa import random_paths, sparse_tree
from .common import rows_of
from .ppd import PAPER_RUNTIME_MEMORY_PCT, paper_table1
from .trees import tree_tau

# ------------------------------------------------------------------ the anchors' numbers (another model and hardware)

SPEC_BENCH = "Spec-Bench: Vicuna-7B, RTX 3090, greedy, batch 1"
SGLANG = "SGLang: H100 (its own model and batch, not ours)"
# (the bench label it stands beside, the method as its source names it, speedup over plain decoding, setting, source).
# None is in a founding document: each is a public benchmark's number, named with where it is printed.
SPEC_BENCH_SOURCE = ("Spec-Bench leaderboard (Xia et al. 2024; github.com/hemingkx/Spec-Bench, Leaderboard.md, "
                     "'Leaderboard on 3090', PyTorch 2.5.1: Vicuna-7B-v1.3, greedy, FP16, batch 1, column Overall)")
SGLANG_SOURCE = ("SGLang's documentation, Speculative Decoding, 'Performance Highlights' (Llama-3.1-8B-Instruct on "
                 "MT-Bench, 1x H100: 373.25 tokens/s with EAGLE-3 against 158.34 without; the EAGLE-3 paper, Li et al. "
                 "2025, arXiv:2503.01840, is cited there)")
ANCHORS = (
    ("eagle", "EAGLE-2", 2.19, SPEC_BENCH, SPEC_BENCH_SOURCE),
    ("speculative:gauto", "separate draft model (SpS)", 1.79, SPEC_BENCH, SPEC_BENCH_SOURCE),
    ("medusa", "Medusa", 1.44, SPEC_BENCH, SPEC_BENCH_SOURCE),
    ("eagle", "EAGLE-3", 2.36, SGLANG, SGLANG_SOURCE),
)
# The PPD paper's own speedups of Table 1 (Vicuna-7B, MT-Bench, non-greedy): the founding document's numbers.
PAPER_TABLE1_SETTING = "PPD paper Table 1: Vicuna-7B, MT-Bench, non-greedy, A100-40GB or RTX 4090, fp16, batch 1"
# PPD paper §5.3 (Fig. 7's text): "The memory overhead of PPD is just 0.004% of Medusa's and 0.007% of Eagle's."
PAPER_FIG7_PPD_PCT_OF = {"Medusa": 0.004, "EAGLE": 0.007}
# Issue 23's goals for eagle, measured by bench on held-out suite prompts (one interleaved run).
GOALS = {"speedup_t0_bf16_units": 1.5, "speedup_t0_avx2": 1.3, "speedup_t1": 1.3, "tau_t0": 2.5, "efficiency": 0.9}


# ------------------------------------------------------------------ Fig. 1: the ablations by draft position


def read_ablations(path: str | Path) -> dict:
    """``ablations.json`` of ``python -m specrepro.training.eagle_ablations``: {"variants": [...], "shipped": name},
    checked to hold what the figure reads (one clear error otherwise)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no EAGLE ablation file (make it with python -m "
                                "specrepro.training.eagle_ablations)")
    data = json.loads(path.read_text())
    need = ("name", "features", "ttt", "draft_vocab", "accept_by_position", "accept_by_position_full_head")
    for v in data["variants"]:
        missing = [k for k in need if k not in v]
        if missing:
            raise ValueError(f"{path}: variant {v.get('name')!r} lacks {', '.join(missing)}")
    if data["shipped"] not in [v["name"] for v in data["variants"]]:
        raise ValueError(f"{path}: the shipped variant {data['shipped']!r} is not among the variants")
    return data


def chain_tau(accept: Sequence[float]) -> float:
    """1 + Σ_d Π_{i≤d} a_i: the expected tokens per step of the top-1 chain whose position d is accepted with
    probability a_d given the ones before it (PPD paper Prop. 4.1 on a chain)."""
    return 1.0 + float(np.cumprod(np.asarray(accept, dtype=float)).sum())


def describe(variant: dict) -> str:
    """A variant in words: "fused features, TTT 2, 8192-row head, 600 steps", and its data and held-out split where
    the file says (variants trained on different data are measured on their own held-out conversations)."""
    head = f"{variant['draft_vocab']}-row head" if variant["draft_vocab"] else "full head"
    steps = f", {variant['steps']} steps" if variant.get("steps") else ""
    data = f"; {variant['data']}" if variant.get("data") else ""
    return f"{variant['features']} features, TTT {variant['ttt']}, {head}{steps}{data}"


def accept_rows(ablations: dict) -> list[dict]:
    """Fig. 1's table: one row per (variant, draft position) with the acceptance through the draft's head and
    through the full LM head, and the held-out positions it rests on."""
    rows = []
    for v in ablations["variants"]:
        counts = v.get("positions_by_depth") or [None] * len(v["accept_by_position"])
        for d, (a, full, n) in enumerate(zip(v["accept_by_position"], v["accept_by_position_full_head"], counts)):
            rows.append({"variant": v["name"], "shipped": v["name"] == ablations["shipped"], "features": v["features"],
                         "ttt": v["ttt"], "draft_vocab": v["draft_vocab"], "position": d + 1,
                         "accept_draft_head": a, "accept_full_head": full, "positions_measured": n})
    return rows


def variant_rows(ablations: dict) -> list[dict]:
    """One row per variant: what it is, its training time and the chain τ its acceptances predict (both heads)."""
    return [{"variant": v["name"], "shipped": v["name"] == ablations["shipped"], "what": describe(v),
             "steps": v.get("steps"), "train_minutes": v["train_seconds"] / 60 if "train_seconds" in v else None,
             "held_out_tokens_in_draft_vocab": v.get("held_out_tokens_in_draft_vocab"),
             "chain_tau_draft_head": chain_tau(v["accept_by_position"]),
             "chain_tau_full_head": chain_tau(v["accept_by_position_full_head"])} for v in ablations["variants"]]


# ------------------------------------------------------------------ Fig. 2: τ against tree size, by tree shape


def dynamic_capacity(top_k: int, depth: int) -> int:
    """Candidates the dynamic tree ranks: k at depth 1, then k children of each of the k best nodes per depth."""
    return top_k + (depth - 1) * top_k * top_k


def static_theory(rank_probs, n: int, depth: int) -> float:
    """τ = 1 + f(T) (PPD paper Prop. 4.1) of the static tree of the n most probable rank paths, under the draft's
    held-out rank probabilities; it assumes the guesses at different depths are independent."""
    probs = np.asarray(rank_probs, dtype=float)[:depth]
    return 1.0 + sim_ppd.expected_tokens(sparse_tree(rank_probs, n, depth), probs)


def tau_row(model: torch.nn.Module, draft: EagleDraft, config: EagleConfig, prompts: Sequence[BenchPrompt], n: int, *,
            depth: int, max_new: int, seed: int) -> dict:
    """Fig. 2 at tree size n: measured τ (T = 0) of the dynamic tree (EAGLE-2; at most ``dynamic_capacity`` nodes),
    the static tree of the held-out rank probabilities and a random prefix-closed tree of n nodes (its own generator
    seeded with (seed, n), so that a resumed grid draws the same tree), beside the static tree's theory τ."""
    rng = np.random.default_rng([seed, n])
    nodes = min(n, dynamic_capacity(config.top_k, depth))
    paths = random_paths(len(config.rank_probs[0]), depth, n, rng)
    trees = {"dynamic": EagleDrafter(draft, config, nodes, "dynamic"),
             "static": EagleDrafter(draft, config, n, "static"),
             "random": EagleDrafter(draft, config, n, "static", paths=paths)}
    tau = {name: tree_tau(model, d, prompts, max_new=max_new, gamma=depth, seed=seed, method="eagle")
           for name, d in trees.items()}
    return {"tree_size": n, "dynamic_nodes": nodes, "tau_dynamic": tau["dynamic"], "tau_static": tau["static"],
            "tau_random": tau["random"], "tau_theory_static": static_theory(config.rank_probs, n, depth)}


def chain_row(model: torch.nn.Module, draft: EagleDraft, config: EagleConfig, prompts: Sequence[BenchPrompt], *,
              depth: int, max_new: int, seed: int) -> dict:
    """The top-1 chain of ``depth`` tokens: measured τ and its theory 1 + Σ_d Π_{i≤d} P(rank 0 at depth i)."""
    drafter = EagleDrafter(draft, config, depth, "chain")
    tau = tree_tau(model, drafter, prompts, max_new=max_new, gamma=depth, seed=seed, method="eagle")
    return {"depth": depth, "tau_chain": tau,
            "tau_theory_chain": chain_tau([row[0] for row in config.rank_probs[:depth]])}


# ------------------------------------------------------------------ Fig. 3: speedup against the lossless methods


def speed_rows(results: Mapping[float, BenchResult], variants: Sequence[str]) -> list[dict]:
    """Fig. 3's measured rows: per temperature (one interleaved bench each) and variant, its speed over the same
    run's plain decoding, τ, the tree size it ran at and whether it reproduced ``ar`` token for token (T = 0)."""
    table = []
    for temperature, result in results.items():
        rows, sizes = rows_of(result), result.provenance.get("tree_sizes", {})
        for v in variants:
            r = rows[v]
            table.append({"source": "measured (this run)", "setting": f"T = {temperature:g}",
                          "temperature": temperature, "variant": v, "dtype": r["dtype"],
                          "tree_size": sizes.get(v, {}).get("size"), "tokens_per_s": r["tokens_per_s"],
                          "speedup": r["speedup"],
                          "speedup_median": r["speedup_median"], "tokens_per_call": r["tokens_per_call"],
                          "efficiency": r["efficiency"], "identical_to_ar": r["identical_to_ar"],
                          "lossless": r["lossless"], "error": r.get("error")})
    return table


def paper_speedups() -> dict[str, tuple[str, float, float]]:
    """The PPD paper's Table 1 (Vicuna-7B, non-greedy) by our bench label: (its method, speedup over its vanilla
    decoding from the throughputs, its τ)."""
    base = paper_table1("Vicuna-7B", "vanilla")["throughput"]
    rows = {label: paper_table1("Vicuna-7B", method) for method, label in (("Medusa", "medusa"), ("PPD", "ppd"))}
    return {label: (method, rows[label]["throughput"] / base, rows[label]["tau"])
            for method, label in (("Medusa", "medusa"), ("PPD", "ppd"))}


def anchor_rows() -> list[dict]:
    """The anchors' speedups (Spec-Bench, SGLang) and the PPD paper's Table 1 ones, in ``speed_rows``' columns."""
    empty = dict(dtype=None, tree_size=None, tokens_per_s=None, speedup_median=None, tokens_per_call=None,
                 efficiency=None, identical_to_ar=None, lossless=True, error=None)
    rows = [{"source": source, "setting": setting, "temperature": 0.0, "variant": f"{name} (beside {label})",
             "speedup": value, **empty} for label, name, value, setting, source in ANCHORS]
    rows += [{"source": "PPD paper (seed 002), Table 1", "setting": PAPER_TABLE1_SETTING, "temperature": 1.0,
              "variant": f"{method} (beside {label})", **empty, "speedup": speedup, "tokens_per_call": tau}
             for label, (method, speedup, tau) in paper_speedups().items()]
    return rows


def goal_rows(results: Mapping[float, BenchResult], bf16_units: bool, label: str = "eagle") -> list[dict]:
    """Issue 23's goals for ``label`` against one bench at T = 0 and one at T = 1 (their keys)."""
    t0, t1 = rows_of(results[0.0])[label], rows_of(results[1.0])[label]
    others = [r for r in results[0.0].summary if r["method"] != label and r["base_method"] not in ("ar", label)
              and r["lossless"] and r["speedup"] is not None]
    best = max(others, key=lambda r: r["speedup"], default=None)
    t0_goal = GOALS["speedup_t0_bf16_units" if bf16_units else "speedup_t0_avx2"]
    cpu = "a CPU with bf16 units" if bf16_units else "an AVX2-only CPU"
    goals = [(f"{label} over AR at T = 0 ({cpu})", t0_goal, t0["speedup"]),
             (f"{label} over AR at T = 1 (exact)", GOALS["speedup_t1"], t1["speedup"]),
             ("τ at T = 0 (tokens per target call)", GOALS["tau_t0"], t0["tokens_per_call"]),
             ("efficiency at T = 0 (measured / predicted speedup)", GOALS["efficiency"], t0["efficiency"])]
    rows = [{"goal": g, "target": f">= {x:g}", "measured": m, "met": m is not None and m >= x} for g, x, m in goals]
    rows.append({"goal": f"{label} ahead of every other lossless method at T = 0",
                 "target": f"> {best['method']} ({best['speedup']:.3g})" if best else "no other method",
                 "measured": t0["speedup"], "met": best is None or (t0["speedup"] or 0) > best["speedup"]})
    return rows


# ------------------------------------------------------------------ Fig. 4: the PPD paper's Fig. 7, memory


ID_TENSORS = ("vocab", "kept_ids")  # token ids of a reduced vocabulary (``save_folder`` stores them as fp32)


def weights_footprint(path: str | Path) -> dict:
    """What a safetensors file adds: parameters, token ids (``ID_TENSORS``: a reduced head's or vocabulary's ids),
    the bytes as stored and the stored dtypes of the parameters."""
    from safetensors import safe_open
    params = ids = stored = 0
    dtypes = set()
    with safe_open(str(path), "pt") as handle:
        for name in handle.keys():
            t = handle.get_tensor(name)
            stored += t.numel() * t.element_size()
            if name in ID_TENSORS or not t.is_floating_point():
                ids += t.numel()
            else:
                params += t.numel()
                dtypes.add(str(t.dtype).removeprefix("torch."))
    return {"params": params, "ids": ids, "stored_bytes": stored, "stored_dtypes": sorted(dtypes)}


def kv_bytes_per_position(layers: int, kv_heads: int, head_dim: int, bytes_per: int) -> int:
    """Bytes of KV cache one position adds to a cache of ``layers`` layers: keys and values of each KV head."""
    return 2 * layers * kv_heads * head_dim * bytes_per


BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}  # bytes per parameter in each run dtype


def memory_rows(target: torch.nn.Module, drafts: Sequence[tuple[str, str | Path, int, str]]) -> list[dict]:
    """Fig. 7: per (method, weights file, layers of its own KV cache, the dtype it ran in) the extra parameters over
    the target's, as % of the target's parameters, the extra MB in that dtype (token ids: 8 bytes, int64 in memory)
    and the KV cache its own layers add per context position (the target's KV heads and head size)."""
    c = target.config
    target_params = sum(p.numel() for p in target.parameters())
    head_dim = c.hidden_size // c.num_attention_heads
    rows = []
    for method, path, kv_layers, dtype in drafts:
        w, per = weights_footprint(path), BYTES[dtype]
        rows.append({"method": method, "weights": Path(path).parent.name + "/" + Path(path).name,
                     "extra_params": w["params"], "extra_pct_of_target": 100 * w["params"] / target_params,
                     "run_dtype": dtype, "extra_MB_at_run_dtype": (w["params"] * per + 8 * w["ids"]) / 2**20,
                     "stored_MB": w["stored_bytes"] / 2**20, "stored_dtype": "+".join(w["stored_dtypes"]),
                     "own_kv_layers": kv_layers,
                     "own_kv_kB_per_position": kv_bytes_per_position(kv_layers, c.num_key_value_heads, head_dim,
                                                                     per) / 2**10,
                     "target_params": target_params})
    return rows


def ppd_share_rows(memory: Sequence[dict]) -> list[dict]:
    """The ratios Fig. 7's text prints: PPD's extra parameters as % of Medusa's and of EAGLE's, ours beside the
    paper's (0.004 % and 0.007 %, Vicuna-7B)."""
    by = {r["method"]: r for r in memory}
    ppd = by["PPD"]["extra_params"]
    return [{"ratio": f"PPD's extra memory as % of {m}'s", "ours_pct": 100 * ppd / by[m]["extra_params"],
             "paper_pct": pct, "paper_setting": "PPD paper §5.3 (Fig. 7), Vicuna-7B"}
            for m, pct in PAPER_FIG7_PPD_PCT_OF.items() if m in by]


def paper_memory_points() -> dict[str, float]:
    """The PPD paper's printed overheads as % of the model (Vicuna-7B): the trainable parameters of Table 1
    (PPD, Medusa) and PPD's runtime memory overhead (abstract, model not named)."""
    return {"PPD (Table 1)": paper_table1("Vicuna-7B", "PPD")["trainable_pct"],
            "Medusa (Table 1)": paper_table1("Vicuna-7B", "Medusa")["trainable_pct"],
            "PPD runtime (abstract)": PAPER_RUNTIME_MEMORY_PCT}


# ------------------------------------------------------------------ the learning curve (issue 40, item 4)

HELD_OUT_1664 = 84  # every 20th of the 1,664 target-written conversations: the split every row below is measured on
# The other-model anchors at depth 1 (top-1 against the target's argmax), as (method, value, source).
LEARNING_ANCHORS = (
    ("PPD", 0.485, "PPD paper (002) Table 3, 1 EPT, 12 epochs, Vicuna-7B"),
    ("EAGLE", 0.8, "about, EAGLE paper (Li et al. 2024; not a seed), 7B-13B"),
)
# The conversations each EAGLE ablation run's data held (its label in ablations.json's same_split starts with it):
# the runs of the shipped recipe (final-norm features, no training-time test), whose points make the learning curve.
# The feature ablations on the same data (fused features, with and without the training-time test) are Fig. 1's.
EAGLE_DATA = {"last": 576, "eagle-1536": 1664, "eagle-1536-2700": 1664}


def _curve_row(method: str, run: str, written: int, steps: int, seen: int | None, depth: int, top1: float) -> dict:
    return {"method": method, "run": run, "conversations_written": written, "steps": steps,
            "conversations_seen": seen, "depth": depth, "top1": round(float(top1), 4),
            "held_out_conversations": HELD_OUT_1664}


def learning_curve_rows(eagle_ablations: dict, medusa_record: dict, ppd_record: dict, ppd_same_split: dict,
                        depths: int = 3) -> list[dict]:
    """Held-out top-1 acceptance at depths 1..``depths`` of every trained proposer, all on the same 84 held-out
    conversations, against the data it was trained on: the EAGLE runs of ``eagle_ablations["same_split"]``, the
    shipped Medusa heads (``medusa_record``), the shipped PPD prompt tokens (``ppd_record``, with its curve during
    training: ``conversations_seen`` = steps × conversations per step) and the PPD tokens shipped before, measured
    again on this split (``ppd_same_split``). EAGLE's depth d is its top-1 chain's acceptance given d − 1 right;
    Medusa's head d and PPD's prompt token d guess the token d + 1 ahead of the target's."""
    rows = []
    for label, entry in eagle_ablations["same_split"].items():
        if label == "held_out":
            continue
        name, steps = label.split(" ")[0], int(re.findall(r"([\d,]+) steps", label)[-1].replace(",", ""))
        if name not in EAGLE_DATA:  # a feature ablation, not a point of the recipe's curve
            continue
        rows += [_curve_row("EAGLE", name, EAGLE_DATA[name], steps, None, d + 1, a)
                 for d, a in enumerate(entry["accept_by_depth"][:depths])]
    acc = medusa_record["held_out_topk_accuracy"]
    rows += [_curve_row("Medusa", "shipped", medusa_record["data"]["conversations"], medusa_record["config"]["steps"],
                        None, d, acc[f"head_{d}"][0]) for d in range(1, depths + 1) if f"head_{d}" in acc]
    for run in ppd_same_split["runs"]:
        rows += [_curve_row("PPD", run["name"], run["conversations"], run["steps"], None, d, row[0])
                 for d, row in enumerate(run["topk_accuracy"].values(), 1) if d <= depths]
    written, steps = ppd_record["data"]["conversations"], ppd_record["config"]["steps"]
    rows += [_curve_row("PPD", "shipped", written, steps, None, d, row[0])
             for d, row in enumerate(ppd_record["held_out_topk_accuracy"].values(), 1) if d <= depths]
    rows += [_curve_row("PPD", "shipped, during training", written, p["step"], p["conversations_seen"], d, row[0])
             for p in ppd_record.get("learning_curve", []) for d, row in enumerate(p["topk_accuracy"].values(), 1)
             if d <= depths]
    return rows
