"""The measuring code of ``notebooks/medusa_trees.ipynb``: Medusa heads on our target against the PPD paper's (seed 002)
Fig. 6 (top-k accuracy by distance), Fig. 8(a) (accept length against tree size), Fig. 8(b/c) (theoretical and
measured speedup against tree size) and Table 1.

Notation: n = tree size (candidate nodes), τ(n) = tokens per tree-verifying call, L_fp(n) = one target forward
over n positions (the device profile), K = heads.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from simulations import ppd as sim_ppd

from ..run.bench_types import BenchPrompt, BenchResult
from ..core.cost import tree_speedup
from ..drafters.medusa import MedusaConfig, MedusaDrafter, MedusaHeads, random_paths, sparse_tree
from ..metrics.profile import Profile
from .common import bench_device, rows_of
from .ppd import PAPER_GPU, PAPER_TABLE1_ROWS, paper_table1
from .trees import tree_tau

CHAIN = ((0,), (0, 0), (0, 0, 0))  # the top-1 chain of depth 3: one candidate per head


def topk_accuracy(record: dict, num_heads: int) -> np.ndarray:
    """Accumulative top-k accuracy [K, k_max] of each head on held-out data, from a heads training record."""
    return np.array([record["held_out_topk_accuracy"][f"head_{d + 1}"] for d in range(num_heads)])


def topk_table(acc: np.ndarray) -> list[dict]:
    """Fig. 6: one row per distance (head), our top-k accuracies beside the paper's printed PPD top-1/top-5."""
    rows = []
    for d in range(acc.shape[0]):
        paper = sim_ppd.PAPER_TOPK_ANCHORS.get(d + 1, {})
        rows.append({"distance": d + 1, **{f"top{k + 1}_ours": float(acc[d, k]) for k in range(acc.shape[1])},
                     "top1_ppd_paper": paper.get(1), "top5_ppd_paper": paper.get(5)})
    return rows


def accept_length_row(model: torch.nn.Module, heads: MedusaHeads, config: MedusaConfig, prompts: Sequence[BenchPrompt],
                      n: int, *, max_new: int, seed: int) -> dict:
    """Fig. 8(a) at tree size n: measured τ of the sparse tree (from the heads' accuracies) and of a random tree
    of the same size, beside the theory 1 + f(T) of the sparse tree (PPD Prop. 4.1). The random tree comes from
    its own generator, seeded with (seed, n), so that a resumed grid draws the same trees."""
    lm_head = model.get_output_embeddings()
    rng = np.random.default_rng([seed, n])
    sparse = MedusaDrafter(heads, config, lm_head, tree_size=n)
    rand = MedusaDrafter(heads, config, lm_head, tree_size=n,
                         paths=random_paths(len(config.rank_probs[0]), config.num_heads, n, rng))
    theory = 1 + sim_ppd.expected_tokens(sparse_tree(config.rank_probs, n, config.num_heads),
                                         np.array(config.rank_probs))
    tau = lambda drafter: tree_tau(model, drafter, prompts, max_new=max_new, gamma=3, seed=seed, method="medusa")
    return {"tree_size": n, "tau_sparse": tau(sparse), "tau_random": tau(rand), "tau_theory_sparse": float(theory)}


def chain_tau(model: torch.nn.Module, heads: MedusaHeads, config: MedusaConfig, prompts: Sequence[BenchPrompt], *,
              max_new: int, seed: int) -> float:
    """Measured τ of the top-1 chain of depth 3 (Fig. 8(a)'s reference line)."""
    chain = MedusaDrafter(heads, config, model.get_output_embeddings(), paths=CHAIN)
    return tree_tau(model, chain, prompts, max_new=max_new, gamma=3, seed=seed, method="medusa")


def theoretical_speedups(fig8a: Sequence[dict], prof: Profile) -> list[dict]:
    """Fig. 8(b): per tree size of the τ grid that the profile measured (n + 1 ≤ n_max), L_fp(n+1) and the speedup
    τ(n)·L_fp(1)/L_fp(n+1) with the theory τ and with the measured τ (``cost.tree_speedup``)."""
    l1, rows = prof.l_fp(1), []
    for r in fig8a:
        n = r["tree_size"]
        if n + 1 <= prof.n_max:
            latency = prof.l_fp(n + 1)
            rows.append({"tree_size": n, "L_fp_ms": 1e3 * latency,
                         "speedup_theory_tau": tree_speedup(r["tau_theory_sparse"], latency, l1),
                         "speedup_measured_tau": tree_speedup(r["tau_sparse"], latency, l1)})
    return rows


def bench_table(result: BenchResult, variants: Sequence[str], prof: Profile | None = None) -> list[dict]:
    """Fig. 8(c): one row per bench variant (plain decoding has no tree size) with its measured speed; given the
    bench's device profile, also ``speedup_vs_L_fp1`` = L_fp(1) x tokens/s, the speed on the theory's baseline (one
    profiled target forward a token, ``trees.profile_baseline_speedups``)."""
    rows = rows_of(result)
    table = [{"variant": v, "tree_size": result.provenance["tree_sizes"][v]["size"] if v != "ar" else None,
             "dtype": rows[v]["dtype"], "tokens_per_s": rows[v]["tokens_per_s"], "speedup": rows[v]["speedup"],
             "speedup_median": rows[v]["speedup_median"], "tokens_per_call": rows[v]["tokens_per_call"],
             "predicted_speedup": rows[v]["predicted_speedup"], "efficiency": rows[v]["efficiency"],
             "identical_to_ar": rows[v]["identical_to_ar"]} for v in variants]
    if prof is not None:
        for r in table:
            r["speedup_vs_L_fp1"] = prof.l_fp(1) * r["tokens_per_s"]
    return table


def table1(result: BenchResult, prof: Profile, heads_record: dict, target: str) -> list[dict]:
    """Table 1: vanilla decoding and Medusa at its hardware-aware size n measured on ``target`` (throughput, τ,
    L_fp, trainable %, tree size, input length n + 1), then every row of the paper's Table 1 as printed."""
    rows, n, where = rows_of(result), result.provenance["tree_sizes"]["medusa"]["size"], bench_device(result)
    table = [
        {"model": target, "method": "vanilla", "throughput_tok_s": rows["ar"]["tokens_per_s"], "tau": 1.0,
         "L_fp_ms": 1e3 * prof.l_fp(1), "trainable_pct": 0.0, "tree_size": 0, "input_length": 1,
         "device": f"{where}, {rows['ar']['dtype']}"},
        {"model": target, "method": "Medusa (3 heads)", "throughput_tok_s": rows["medusa"]["tokens_per_s"],
         "tau": rows["medusa"]["tokens_per_call"], "L_fp_ms": 1e3 * prof.l_fp(n + 1),
         "trainable_pct": 100 * heads_record["trainable_fraction"], "tree_size": n, "input_length": n + 1,
         "device": f"{where}, {rows['medusa']['dtype']}"},
    ]
    for r in table:
        r["setting"] = f"T = 0, batch 1, {r['device']}"
    for model, method, *_ in PAPER_TABLE1_ROWS:  # every row of the paper's Table 1, as printed
        p = paper_table1(model, method)
        table.append({"model": f"{model} (paper)", "method": method, "throughput_tok_s": p["throughput"],
                      "tau": p["tau"], "L_fp_ms": 1e3 * p["L_fp_s"], "trainable_pct": p["trainable_pct"],
                      "tree_size": p["S_tr"], "input_length": p["S_input"], "device": "GPU (paper)",
                      "setting": f"MT-Bench, {p['decoding']}, {PAPER_GPU} (Table 1 as printed)"})
    return table
