"""specrepro.studies.trees, .medusa and .ppd: measured tokens per tree-verifying call, what the tree notebooks read
back from a tree bench, and the Medusa and PPD notebooks' tables over bench and training records."""
from __future__ import annotations

import pytest
import torch

from simulations.ppd import PAPER_TABLE1
from specrepro.bench import BenchPrompt, BenchResult
from specrepro.drafters.medusa import MedusaConfig, MedusaDrafter, MedusaHeads
from specrepro.studies import medusa as medusa_study
from specrepro.studies import ppd, trees
from specrepro.studies.trees import tree_tau

pytestmark = pytest.mark.usefixtures("one_thread")
RANKS = ((0.5, 0.2, 0.1, 0.05), (0.3, 0.15, 0.1, 0.05), (0.2, 0.1, 0.05, 0.05))


def medusa(model, tree_size):
    torch.manual_seed(0)
    heads = MedusaHeads(model.config.hidden_size, 3)
    config = MedusaConfig(hidden_size=model.config.hidden_size, num_heads=3, target="tiny", rank_probs=RANKS)
    return MedusaDrafter(heads.eval().requires_grad_(False), config, model.get_output_embeddings(), tree_size=tree_size)


def test_tree_tau_counts_tree_calls_only(tiny_pair_64):
    target, _ = tiny_pair_64
    prompts = [BenchPrompt("a", [1, 2, 3, 4]), BenchPrompt("b", [9, 8, 7])]
    tau = tree_tau(target, medusa(target, 4), prompts, max_new=8, gamma=3, seed=0, method="medusa")
    assert 1.0 <= tau <= 4.0  # at most the tree's depth (3) plus the target's own token
    with pytest.raises(ValueError):  # one token: the plain first step only, no tree was verified
        tree_tau(target, medusa(target, 4), prompts, max_new=1, gamma=3, seed=0, method="medusa")


def test_throughput_by_suite():
    records = [{"method": m, "prompt_id": pid, "new_tokens": 10, "wall_time_s": s}
               for m, pid, s in (("ar", "a", 1.0), ("ppd", "a", 0.5), ("ar", "b", 2.0), ("ppd", "b", 1.0),
                                 ("medusa", "a", 0.1))]
    table = ppd.throughput_by_suite(records, {"chat": ["a"], "math": ["b"]})
    assert table == [{"suite": "chat", "ar_tok_s": 10.0, "ppd_tok_s": 20.0, "ppd_speedup": 2.0},
                     {"suite": "math", "ar_tok_s": 5.0, "ppd_tok_s": 10.0, "ppd_speedup": 2.0}]


def test_mean_input_length_leaves_the_prefill_out():
    records = [{"method": "ppd", "input_lengths": [30, 4, 6]}, {"method": "ppd", "input_lengths": [20, 8]},
               {"method": "ar", "input_lengths": [25]}]
    assert ppd.mean_input_length(records, "ppd") == 6.0 and ppd.mean_input_length(records, "ar") == 1.0


def test_distance_accuracy_picks_the_printed_cells():
    record = {"held_out_topk_accuracy": {"distance_1": [0.4, 0.5, 0.6, 0.7, 0.8], "distance_2": [0.1, 0.2, 0.3, 0.35, 0.4]}}
    assert ppd.distance_accuracy(record) == {"@1 top-1": 0.4, "@1 top-5": 0.8, "@2 top-1": 0.1, "@2 top-5": 0.4}


# ------------------------------------------------------------------ the Medusa notebook and the tree benches

class LinearProfile:
    """A device profile stand-in: L_fp(n) = n ms, measured up to n_max."""
    n_max = 8

    def l_fp(self, n):
        assert 1 <= n <= self.n_max
        return 1e-3 * n


def tree_bench():
    summary = [{"method": v, "dtype": "fp32", "tokens_per_s": 10.0 * (i + 1), "speedup": 1.0 + i,
                "speedup_median": 1.0 + i, "tokens_per_call": 1.0 + i / 2, "predicted_speedup": 1.5,
                "efficiency": 0.9, "identical_to_ar": 1} for i, v in enumerate(("ar", "medusa", "medusa:t4"))]
    provenance = {"tree_sizes": {"medusa": {"size": 6, "reason": "best"}, "medusa:t4": {"size": 4}},
                  "sessions": [{"costs": {}}, {"profiles": {"fp32": {"n": 8}, "bf16": {"n": 4}}}]}
    return BenchResult(out=None, records=[], summary=summary, provenance=provenance)


def test_bench_profile_reads_the_first_profiled_session(monkeypatch):
    monkeypatch.setattr(trees.Profile, "from_dict", staticmethod(lambda d: d))
    assert trees.bench_profile(tree_bench(), "bf16") == {"n": 4}


def test_measured_speedups_by_tree_size():
    assert trees.measured_speedups(tree_bench(), ["medusa:t4", "medusa"]) == [(4, 3.0, 2.0), (6, 2.0, 1.5)]


def test_medusa_accept_length_row_and_chain(tiny_pair_64):
    target, _ = tiny_pair_64
    drafter = medusa(target, 4)
    prompts = [BenchPrompt("a", [1, 2, 3, 4])]
    row = medusa_study.accept_length_row(target, drafter.heads, drafter.config, prompts, 4, max_new=6, seed=0)
    assert set(row) == {"tree_size", "tau_sparse", "tau_random", "tau_theory_sparse"} and row["tree_size"] == 4
    assert 1.0 <= row["tau_sparse"] <= 4.0 and 1.0 <= row["tau_random"] <= 4.0
    assert row == medusa_study.accept_length_row(target, drafter.heads, drafter.config, prompts, 4, max_new=6, seed=0)
    assert 1.0 <= row["tau_theory_sparse"] <= 4.0  # 1 + f(T) of a depth-3 tree
    assert 1.0 <= medusa_study.chain_tau(target, drafter.heads, drafter.config, prompts, max_new=6, seed=0) <= 4.0


def test_medusa_topk_table():
    record = {"held_out_topk_accuracy": {"head_1": [0.5, 0.6, 0.7], "head_2": [0.2, 0.3, 0.4], "head_3": [0.1] * 3}}
    acc = medusa_study.topk_accuracy(record, 3)
    table = medusa_study.topk_table(acc)
    assert acc.shape == (3, 3) and [r["distance"] for r in table] == [1, 2, 3]
    assert table[0]["top2_ours"] == 0.6 and table[0]["top1_ppd_paper"] == 0.485 and table[2]["top5_ppd_paper"] is None


def test_medusa_theoretical_speedups_stop_at_the_profile():
    fig8a = [{"tree_size": n, "tau_sparse": 1.5, "tau_theory_sparse": 2.0} for n in (1, 3, 7, 8)]
    rows = medusa_study.theoretical_speedups(fig8a, LinearProfile())
    assert [r["tree_size"] for r in rows] == [1, 3, 7]  # n = 8 needs L_fp(9)
    assert rows[1] == {"tree_size": 3, "L_fp_ms": 4.0, "speedup_theory_tau": pytest.approx(2.0 / 4),
                       "speedup_measured_tau": pytest.approx(1.5 / 4)}


def test_medusa_bench_table_and_table1():
    result = tree_bench()
    table = medusa_study.bench_table(result, ("ar", "medusa", "medusa:t4"))
    assert [r["tree_size"] for r in table] == [None, 6, 4] and table[2]["speedup"] == 3.0
    t1 = medusa_study.table1(result, LinearProfile(), {"trainable_fraction": 0.01}, "tiny", "cpu")
    vanilla, heads = t1[0], t1[1]
    assert vanilla["L_fp_ms"] == 1.0 and vanilla["throughput_tok_s"] == 10.0 and vanilla["device"] == "CPU cpu, fp32"
    assert heads["tree_size"] == 6 and heads["input_length"] == 7 and heads["L_fp_ms"] == 7.0
    assert heads["trainable_pct"] == 1.0 and heads["tau"] == 1.5
    assert [r["model"] for r in t1[2:]] == [f"{name} (paper)" for name in PAPER_TABLE1]
