"""specrepro.studies.trees, .medusa and .ppd: measured tokens per tree-verifying call, what the tree notebooks read
back from a tree bench, and the Medusa and PPD notebooks' tables over bench and training records."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from simulations.ppd import PAPER_TABLE1
from specrepro.run.bench_types import BenchPrompt, BenchResult
from specrepro.drafters.medusa import MedusaConfig, MedusaDrafter, MedusaHeads
from specrepro.drafters.ppd import PPDConfig, PromptTokens
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
    """A device profile stand-in: L_fp(n) = n ms, measured up to n_max, over a 0.4 ms memory floor."""
    n_max = 8
    decode_s, floor_s, held_floor_s = 1e-3, 4e-4, None

    def l_fp(self, n):
        assert 1 <= n <= self.n_max
        return 1e-3 * n

    def beta(self, n):
        return self.l_fp(n) / self.l_fp(1)


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
    t1 = medusa_study.table1(result, LinearProfile(), {"trainable_fraction": 0.01}, "tiny")
    vanilla, heads = t1[0], t1[1]
    assert vanilla["L_fp_ms"] == 1.0 and vanilla["throughput_tok_s"] == 10.0 and vanilla["device"] == "CPU, fp32"
    assert heads["tree_size"] == 6 and heads["input_length"] == 7 and heads["L_fp_ms"] == 7.0
    assert heads["trainable_pct"] == 1.0 and heads["tau"] == 1.5
    assert [r["model"] for r in t1[2:]] == [f"{m} (paper)" for m, *_ in ppd.PAPER_TABLE1_ROWS]
    assert {r["model"].removesuffix(" (paper)") for r in t1[2:]} == set(PAPER_TABLE1)
    assert list(t1[0]) == list(t1[-1])  # one set of columns
    with_profile = medusa_study.bench_table(result, ("ar", "medusa"), LinearProfile())
    assert with_profile[1]["speedup_vs_L_fp1"] == pytest.approx(1e-3 * 20.0)


# ------------------------------------------------------------------ the PPD notebook

PPD_RANKS = ((0.4, 0.2, 0.1, 0.05), (0.25, 0.15, 0.1, 0.05), (0.15, 0.1, 0.05, 0.05))


def ppd_parts(model):
    hidden = model.config.hidden_size
    g = torch.Generator().manual_seed(0)
    config = PPDConfig(hidden_size=hidden, prompt_tokens=3, epts=1, target="tiny", rank_probs=PPD_RANKS)
    return PromptTokens(hidden, 3, 1, init=torch.randn(3, hidden, generator=g)), config


def test_ppd_accept_length_row_measures_three_trees(tiny_pair_64):
    target, _ = tiny_pair_64
    tokens, config = ppd_parts(target)
    prompts = [BenchPrompt("a", [1, 2, 3, 4])]
    row = ppd.accept_length_row(target, tokens, config, prompts, 8, max_new=6, seed=0)
    assert list(row) == ["tree_size", "tau_dynamic", "tau_theory_dynamic", "tau_static", "tau_theory_static",
                         "tau_random", "tau_theory_random"]
    assert all(1.0 <= row[k] <= 4.0 for k in row if k.startswith("tau"))
    assert row == ppd.accept_length_row(target, tokens, config, prompts, 8, max_new=6, seed=0)  # same random tree


def test_ppd_theoretical_speedups_keep_the_trees_the_profile_measured():
    config = PPDConfig(hidden_size=8, rank_probs=PPD_RANKS)
    fig8a = [{"tree_size": n, "tau_dynamic": 1.5} for n in (4, 8, 40)]
    rows = ppd.theoretical_speedups(fig8a, config, LinearProfile())
    assert [r["tree_size"] for r in rows] == [4]  # a size-8 tree feeds more than 8 positions in some state
    assert rows[0]["speedup_measured_tau"] == pytest.approx(1.5 * 1.0 / rows[0]["mean_L_fp_ms"])
    assert rows[0]["speedup_theory_tau"] > 0


def test_topk_tables_and_loss_summary():
    ppd_record = {"held_out_topk_accuracy": {f"distance_{d}": [0.1 * d + 0.01 * k for k in range(10)] for d in (1, 2, 3)},
                  "train": {"losses": [3.0] + [1.0] * 60, "val_losses": [[10, 2.0], [60, 1.5]]}}
    medusa_record = {"held_out_topk_accuracy": {f"head_{d}": [0.2 * d] * 10 for d in (1, 2, 3)}}
    ablations = {"ept2": {"table": "Table 2", "config": {"epts": 2},
                          "held_out_topk_accuracy": {"distance_1": [0.5] * 10, "distance_2": [0.3] * 10,
                                                     "distance_3": [0.1] * 10}},
                 "kd": {"table": "Table 3", "config": {"epts": 1}, "held_out_topk_accuracy": {}}}
    acc_ppd, acc_medusa, acc_ept = ppd.topk_accuracies(ppd_record, medusa_record, ablations, 3)
    assert acc_ppd.shape == acc_medusa.shape == (3, 10) and list(acc_ept) == [2]
    rows = ppd.topk_table(acc_ppd, acc_medusa, acc_ept)
    assert [(r["distance"], r["k"]) for r in rows[:4]] == [(1, 1), (1, 3), (1, 5), (1, 10)] and len(rows) == 12
    assert rows[1]["ppd_zoo"] == pytest.approx(0.12) and rows[4]["ppd_2ept_ablation"] == 0.3
    assert rows[0]["ppd_paper_vicuna7b"] == 0.485 and rows[1]["ppd_paper_vicuna7b"] is None
    assert ppd.loss_summary("zoo", ppd_record) == {"run": "zoo", "steps": 61, "first_loss": 3.0, "last_50_mean": 1.0,
                                                   "final_val_loss": 1.5}
    assert ppd.smooth([1.0, 2.0, 3.0], 2).tolist() == [1.5, 2.5] and ppd.smooth([1.0], 2).tolist() == [1.0]


def test_ablation_table_puts_the_baselines_first_then_the_paper():
    acc = {"distance_1": [0.4, 0.5, 0.6, 0.7, 0.8], "distance_2": [0.1, 0.2, 0.3, 0.35, 0.4]}
    recipe = dict(epts=1, kd=False, steps=10, mask="ensemble", aggregation="average", exits=1, prefix=False, head=False)
    ablations = {name: {"table": table, "config": dict(recipe), "held_out_topk_accuracy": acc,
                        "prompt_tokens": {"trainable_parameters": 96}}
                 for name, table in (("ept1", "Table 2"), ("kd", "Table 3"))}
    rows = ppd.ablation_table(ablations, "Table 3")
    assert [r["row"] for r in rows[:2]] == ["ept1", "kd"] and rows[0]["batch"] == 1 and rows[0]["@1 top-5"] == 0.8
    paper = rows[2:]
    assert len(paper) == len(ppd.PAPER_ABLATIONS["Table 3"]) and paper[0]["row"] == "paper: 100 EPT, KD, 12 epochs"
    assert [r["batch"] for r in paper][-2:] == [1, 1] and paper[0]["batch"] == 4 and paper[0]["epts"] is None
    assert list(rows[0]) == list(paper[0])  # one set of columns
    assert ppd.ablation_names(ablations, "Table 4") == ["ept1"]


def ppd_bench():
    labels = ("ar", "ppd", "ppd:t8", "medusa", "speculative:g2", "prompt-lookup")
    summary = [{"method": v, "dtype": "fp32", "tokens_per_s": 10.0 + i, "speedup": 1.0 + i / 10,
                "speedup_median": 1.0, "tokens_per_call": 1.5, "identical_to_ar": 1, "predicted_speedup": 0.5 + i / 10}
               for i, v in enumerate(labels)]
    timing = {("ppd", "a"): 1.0, ("ppd", "b"): 2.0, ("medusa", "a"): 2.0, ("medusa", "b"): 2.0}  # 20 tokens each
    records = [{"method": m, "prompt_id": p, "repeat": 0, "new_tokens": 20, "wall_time_s": s,
                "input_lengths": [30, 4, 6] if m == "ppd" else [30, 3]} for (m, p), s in timing.items()]
    provenance = {"tree_sizes": {"ppd": {"size": 4}, "ppd:t8": {"size": 8}, "medusa": {"size": 2}},
                  "sessions": [{"profiles": {"fp32": {}}}]}
    return BenchResult(out=None, records=records, summary=summary, provenance=provenance), labels


def test_ppd_table1_methods_and_memory(monkeypatch):
    monkeypatch.setattr(ppd, "bench_profile", lambda result, dtype: LinearProfile())
    result, labels = ppd_bench()
    config = PPDConfig(hidden_size=8, rank_probs=PPD_RANKS)
    records = {"ppd": {"prompt_tokens": {"trainable_fraction": 0.001, "trainable_parameters": 96},
                       "times_s": {"train_s": 60.0}},
               "medusa": {"heads": {"trainable_fraction": 0.01, "trainable_parameters": 960},
                          "times_s": {"train_s": 120.0, "hidden_s": 60.0}},
               "draft": {"times_s": {"train_s": 600.0}}}
    t1 = ppd.table1(result, config, records["ppd"], records["medusa"], "tiny")
    assert [r["method"] for r in t1[:3]] == ["vanilla", "Medusa (3 heads)", "PPD (3 prompt tokens, 1 EPT)"]
    assert t1[0]["L_fp_ms"] == 1.0 and t1[1]["L_fp_ms"] == 3.0 and t1[2]["L_fp_ms"] == 5.0  # mean step inputs 3, 5
    assert t1[1]["S_input"] == "2" and t1[1]["positions_per_step"] == "3" and t1[2]["trainable_pct"] == 0.1
    assert len(t1) == 3 + len(ppd.PAPER_TABLE1_ROWS) and list(t1[0]) == list(t1[-1])
    paper_7b = [r for r in t1 if r["model"] == "Vicuna-7B (paper)"]
    assert [r["method"] for r in paper_7b] == ["vanilla", "Medusa", "PPD"] and paper_7b[1]["throughput_tok_s"] == 82.0
    assert ppd.paper_speedup("Vicuna-7B", "PPD") == pytest.approx(88.0 / 39.2)
    methods = ppd.methods_table(result, labels)
    assert [r["method"] for r in methods] == ["ppd", "medusa", "speculative:g2", "prompt-lookup"]
    assert methods[0]["predicted_speedup"] == pytest.approx(0.6)  # the bench's prediction beside the measurement
    assert methods[0]["step_ms"] == pytest.approx(1.0) and methods[0]["floor_ms"] == pytest.approx(0.4)
    assert methods[0]["beta5"] == pytest.approx(5.0)  # the step's regime, for the report's rule
    target = torch.nn.Linear(4, 4)  # 20 parameters
    target.config = SimpleNamespace(num_hidden_layers=2, num_key_value_heads=1, hidden_size=8, num_attention_heads=2)
    assert ppd.kv_bytes_per_position(target.config, 4) == 2 * 2 * 1 * 4 * 4
    fig7 = ppd.memory_table(result, target, 40, records["ppd"], records["medusa"], records["draft"])
    assert [r["step_kv_positions"] for r in fig7] == [4.0, 2.0, 2]
    assert [r["train_cpu_min"] for r in fig7] == [1.0, 3.0, 10.0]
    assert fig7[2]["extra_pct_of_target"] == 200.0 and fig7[0]["extra_weight_MB"] == 96 * 4 / 2**20
    assert fig7[0]["step_kv_MB"] == 4.0 * 64 / 2**20
    assert [r["bench_dtype"] for r in fig7] == ["fp32"] * 3 and fig7[2]["train_dtype"].endswith("stored bf16")
    assert fig7[0]["over_medusa"] == pytest.approx((40 / 3) / (40 / 4))  # pooled tokens/s, the same prompts
    assert fig7[0]["over_medusa_low95"] <= fig7[0]["over_medusa"] <= fig7[0]["over_medusa_high95"]
    assert fig7[1]["over_medusa"] is None and fig7[0]["prompts"] == 2


def test_profile_baseline_speedups_rescale_by_the_plain_step():
    result = tree_bench()  # ar 10 tokens/s: 0.1 s a token; LinearProfile: L_fp(1) = 1 ms
    assert trees.plain_step_ratio(result, LinearProfile()) == pytest.approx(0.01)
    rows = trees.profile_baseline_speedups(result, ["medusa:t4", "medusa"], LinearProfile())
    assert [r["tree_size"] for r in rows] == [4, 6] and rows[0]["speedup_vs_plain"] == 3.0
    assert rows[0]["speedup_vs_L_fp1"] == pytest.approx(3.0 * 0.01)  # = L_fp(1) x 30 tokens/s
