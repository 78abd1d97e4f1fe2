"""The measuring code of ``notebooks/ppd_parallel_prompt_decoding.ipynb`` (PPD paper, seed 002): its tables and
figures from the zoo's training records, the ablation records, a τ grid over tree sizes and one interleaved bench.

Notation: m = prompt tokens, e = EPTs per prompt token, n = tree size (candidates and their prompt tokens),
τ(n) = tokens per tree-verifying call, L_fp(n) = one target forward over n positions (the device profile).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from simulations import ppd as sim_ppd

from ..run.bench_types import BenchPrompt, BenchResult
from ..core.cost import tree_speedup
from ..drafters.ppd import PPDConfig, PPDDrafter, PromptTokens, dynamic_tree, input_lengths, tree_speed
from ..metrics.profile import Profile
from ..core import stats
from .common import bench_device, rows_of, task_arrays
from .trees import bench_profile, step_regime, tree_tau

ACCURACY_CELLS = ("@1 top-1", "@1 top-5", "@2 top-1", "@2 top-5")  # the ablation tables' four columns
PAPER_ABLATIONS = {  # the paper's printed rows of Tables 2-8: ACCURACY_CELLS in order
    "Table 2": {"100 EPT": (0.506, 0.794, 0.276, 0.602), "10 EPT": (0.494, 0.786, 0.273, 0.600),
                "5 EPT": (0.499, 0.787, 0.265, 0.596), "2 EPT": (0.486, 0.777, 0.259, 0.583),
                "1 EPT": (0.472, 0.771, 0.248, 0.576)},
    "Table 3": {"100 EPT, KD, 12 epochs": (0.525, 0.805, 0.308, 0.625), "100 EPT, no KD": (0.506, 0.794, 0.276, 0.602),
                "1 EPT, KD, 12 epochs": (0.485, 0.779, 0.261, 0.586), "1 EPT, KD, 2 epochs": (0.474, 0.773, 0.247, 0.574),
                "1 EPT, no KD": (0.472, 0.771, 0.248, 0.576), "100 EPT, KD, 12 epochs, batch 1": (0.530, 0.809, 0.309, 0.626),
                "1 EPT, KD, 12 epochs, batch 1": (0.484, 0.775, 0.259, 0.581)},
    "Table 4": {"no prefix tuning": (0.485, 0.779, 0.261, 0.586), "prefix tuning": (0.412, 0.738, 0.204, 0.541)},
    "Table 5": {"no custom head": (0.485, 0.779, 0.261, 0.586), "custom head, 1-stage": (0.385, 0.614, 0.229, 0.482),
                "custom head, 2-stage": (0.506, 0.795, 0.276, 0.602)},
    "Table 6": {"ensemble mask": (0.506, 0.794, 0.276, 0.602), "decoder mask": (0.465, 0.755, 0.262, 0.572),
                "encoder mask": (0.473, 0.765, 0.256, 0.573)},
    "Table 7": {"average": (0.506, 0.794, 0.276, 0.602), "learned weight": (0.503, 0.779, 0.250, 0.576)},
    "Table 8": {"no multi-exit": (0.485, 0.779, 0.261, 0.586), "3 exits": (0.422, 0.723, 0.214, 0.517),
                "2 exits": (0.420, 0.723, 0.213, 0.518)},
}
BASELINE = {"Table 2": [], "Table 3": ["ept1", "ept2"], "Table 4": ["ept1"], "Table 5": ["ept1"], "Table 6": ["ept2"],
            "Table 7": ["ept2"], "Table 8": ["ept1"]}  # the default-recipe rows each table compares against
ABLATION_COLUMNS = ("epts", "kd", "steps", "batch", "mask", "aggregation", "exits", "prefix", "head")
# The paper's own numbers that our figures set beside ours. Its inference runs: one NVIDIA A100-40GB or one GeForce
# RTX 4090, batch 1, FP16 (§5 "Models and testbeds"); its Table 1 does not say which of the two GPUs each row used.
PAPER_GPU = "A100-40GB or RTX 4090, fp16, batch 1"
# Table 1 as printed: model, method, throughput T (tokens/s), τ, L_fp (s), MT-Bench quality, P_tr (%), S_tr, S_input.
# MobileLLaMA rows: greedy; Vicuna rows: non-greedy (MT-Bench's default temperature); all on MT-Bench.
PAPER_TABLE1_ROWS = (
    ("MobileLLaMA", "vanilla", 50.2, 1.00, 0.020, None, None, "NA", "1", "greedy"),
    ("MobileLLaMA", "PPD", 108.7, 2.43, 0.022, "Same", 4.50e-4, "(10, 84, 89)", "(40, 285, 285)", "greedy"),
    ("Vicuna-7B", "vanilla", 39.2, 1.00, 0.026, 5.99, None, "NA", "1", "non-greedy"),
    ("Vicuna-7B", "Medusa", 82.0, 2.51, 0.0307, 5.98, 8.07, "63", "63", "non-greedy"),
    ("Vicuna-7B", "PPD", 88.0, 2.54, 0.029, 5.93, 1.82e-4, "(10, 33, 34)", "(40, 105, 105)", "non-greedy"),
    ("Vicuna-13B", "vanilla", 30.4, 1.00, 0.0330, 6.38, None, "NA", "1", "non-greedy"),
    ("Vicuna-13B", "Medusa", 63.4, 2.59, 0.0408, None, 5.52, "63", "63", "non-greedy"),
    ("Vicuna-13B", "PPD", 66.1, 2.44, 0.0379, 6.32, 7.87e-5, "(10, 20, 20)", "(40, 60, 60)", "non-greedy"),
)


def paper_table1(model: str, method: str) -> dict:
    """One printed row of Table 1 as {throughput, tau, L_fp_s, quality, trainable_pct, S_tr, S_input, decoding}."""
    keys = ("throughput", "tau", "L_fp_s", "quality", "trainable_pct", "S_tr", "S_input", "decoding")
    row = next(r for r in PAPER_TABLE1_ROWS if r[:2] == (model, method))
    return dict(zip(keys, row[2:]))


def paper_speedup(model: str, method: str) -> float:
    """Speedup over vanilla decoding derived from Table 1's throughputs (same model, MT-Bench): T / T_vanilla."""
    return paper_table1(model, method)["throughput"] / paper_table1(model, "vanilla")["throughput"]


# Fig. 5's text (§5.1): PPD's walltime speedup at T = 0 on MT-Bench, HumanEval and GSM8K over MobileLLaMA, Vicuna-7B
# and Vicuna-13B on both GPUs is 2.12x to 2.49x; on the code and math tasks 2.21x to 2.49x.
PAPER_FIG5_RANGE = (2.12, 2.49)
PAPER_FIG5_CODE_MATH = (2.21, 2.49)
# Memory (abstract, §1 and §5.3): PPD's runtime memory overhead 0.0004 % (model not named); 0.004 % of Medusa's.
PAPER_RUNTIME_MEMORY_PCT = 0.0004
# Training cost (abstract, §1): prompt tokens in 16 h on one A100-40GB (8 h on four RTX 3090); Eagle 1-2 days on
# four A100s. Medusa's training time is not printed.
PAPER_TRAIN_HOURS = 16.0
# Fig. 9's text (Appendix A; 3 prompt tokens, ShareGPT, 12 epochs; the model is not named): 1 EPT starts above 5 and
# falls below 2 within the first epoch, then oscillates slightly below 2; 100 EPTs start below 3 and reach about 2.5
# after the first epoch, then keep falling.
PAPER_FIG9 = {  # EPTs -> (level, as the text says it) at the start and after the first epoch
    1: {"start": (5.0, "first loss above 5"), "later": (2.0, "below 2 within epoch 1, then slightly below 2")},
    100: {"start": (3.0, "first loss below 3"), "later": (2.5, "about 2.5 after epoch 1, then falling")},
}
# How each method's weights were trained and are stored (the zoo's training records and files); the bench's dtype
# is the one each runs in.
TRAIN_DTYPE = {"PPD": "trained fp32, stored fp32",
               "Medusa": "trained fp32 on bf16-cached target states, stored fp32",
               "speculative (distilled draft)": "trained fp32, stored bf16"}


# ------------------------------------------------------------------ training and ablation records


def topk_accuracies(ppd_record: dict, medusa_record: dict, ablations: dict,
                    m: int) -> tuple[np.ndarray, np.ndarray, dict[int, np.ndarray]]:
    """Fig. 6's accumulative top-k accuracies on held-out data: PPD's [m, k] and Medusa's 3 heads' [3, k] from the
    zoo's training records, and {EPTs: [distance, k]} of the Table 2 ablation rows."""
    acc_ppd = np.array([ppd_record["held_out_topk_accuracy"][f"distance_{d + 1}"] for d in range(m)])
    acc_medusa = np.array([medusa_record["held_out_topk_accuracy"][f"head_{d + 1}"] for d in range(3)])
    acc_ept = {r["config"]["epts"]: np.array(list(r["held_out_topk_accuracy"].values()))
               for r in ablations.values() if r["table"] == "Table 2"}
    return acc_ppd, acc_medusa, acc_ept


def topk_table(acc_ppd: np.ndarray, acc_medusa: np.ndarray, acc_ept: dict[int, np.ndarray]) -> list[dict]:
    """Fig. 6: per distance 1..3 and k in (1, 3, 5, 10), PPD, Medusa and each EPT count beside the paper's printed
    PPD anchor (Vicuna-7B)."""
    rows = []
    for d in range(3):
        paper = sim_ppd.PAPER_TOPK_ANCHORS.get(d + 1, {})
        for k in (1, 3, 5, 10):
            rows.append({"distance": d + 1, "k": k, "ppd_zoo": acc_ppd[d, k - 1], "medusa_zoo": acc_medusa[d, k - 1],
                         **{f"ppd_{e}ept_ablation": a[d, k - 1] for e, a in sorted(acc_ept.items())},
                         "ppd_paper_vicuna7b": paper.get(k)})
    return rows


def smooth(x, w: int = 25) -> np.ndarray:
    """Moving average over ``w`` steps ("valid" part); ``x`` itself when shorter than ``w``."""
    x = np.asarray(x, dtype=float)
    return np.convolve(x, np.ones(w) / w, mode="valid") if x.size >= w else x


def loss_summary(label: str, record: dict) -> dict:
    """Fig. 9's table row of one training run: steps, first loss, mean of the last 50, final held-out loss."""
    losses, val = record["train"]["losses"], record["train"]["val_losses"]
    return {"run": label, "steps": len(losses), "first_loss": losses[0], "last_50_mean": float(np.mean(losses[-50:])),
            "final_val_loss": val[-1][1] if val else None}


def distance_accuracy(record: dict) -> dict[str, float]:
    """The four numbers the paper's ablation tables print: top-1 and top-5 accuracy at distances 1 and 2, from a
    training record's ``held_out_topk_accuracy`` (distance -> accumulative top-k list)."""
    a = np.array(list(record["held_out_topk_accuracy"].values()))  # [distance, k]
    return {"@1 top-1": a[0, 0], "@1 top-5": a[0, 4], "@2 top-1": a[1, 0], "@2 top-5": a[1, 4]}


def ablation_names(ablations: dict, table: str) -> list[str]:
    """Our trained rows of ``table`` (Tables 2-8) after the default-recipe rows it compares against, those trained."""
    return [n for n in BASELINE[table] + [n for n, r in ablations.items() if r["table"] == table] if n in ablations]


def ablation_table(ablations: dict, table: str) -> list[dict]:
    """One of Tables 2-8: our rows (their recipe, the four accuracies, trainable parameters), then the paper's."""
    rows = []
    for name in ablation_names(ablations, table):
        c = ablations[name]["config"]
        rows.append({"row": name, **{k: c.get(k, 1) if k == "batch" else c[k] for k in ABLATION_COLUMNS},
                     **distance_accuracy(ablations[name]),
                     "trainable_params": ablations[name]["prompt_tokens"]["trainable_parameters"]})
    for label, values in PAPER_ABLATIONS[table].items():
        rows.append({"row": f"paper: {label}", **dict.fromkeys(ABLATION_COLUMNS),
                     "batch": 1 if "batch 1" in label else (4 if table == "Table 3" else None),
                     **dict(zip(ACCURACY_CELLS, values)), "trainable_params": None})
    return rows


# ------------------------------------------------------------------ accept length and speed against tree size


def accept_length_row(model: torch.nn.Module, tokens: PromptTokens, config: PPDConfig, prompts: Sequence[BenchPrompt],
                      n: int, *, max_new: int, seed: int) -> dict:
    """Fig. 8(a) at tree size n: measured τ of the dynamic, static and random trees beside each one's theory
    τ = 1 + R(T) (Prop. 4.4). The random tree comes from its own generator, seeded with (seed, n), so that a
    resumed grid draws the same trees."""
    rank_probs, m = np.array(config.rank_probs), config.prompt_tokens
    trees = {"dynamic": sim_ppd.optimal_tree(rank_probs, n, m), "static": sim_ppd.static_tree(rank_probs, n, m),
             "random": sim_ppd.random_tree(rank_probs, n, m, np.random.default_rng([seed, n]))}
    lm_head = model.get_output_embeddings()
    row = {"tree_size": n}
    for kind, t in trees.items():
        drafter = PPDDrafter(tokens, config, lm_head, tree_size=n, tree=t)
        row[f"tau_{kind}"] = tree_tau(model, drafter, prompts, max_new=max_new, gamma=m, seed=seed, method="ppd")
        row[f"tau_theory_{kind}"] = float(sim_ppd.accept_length(t, rank_probs))
    return row


def theoretical_speedups(fig8a: Sequence[dict], config: PPDConfig, prof: Profile) -> list[dict]:
    """Fig. 8(b): per tree size of the τ grid whose every state's input the profile measured, the steady-state
    mean L_fp per call and the speedup with the theory τ (``drafters.ppd.tree_speed``) and with the measured τ
    (``cost.tree_speedup``)."""
    rank_probs, m, l1, rows = np.array(config.rank_probs), config.prompt_tokens, prof.l_fp(1), []
    for r in fig8a:
        n = r["tree_size"]
        if int(input_lengths(dynamic_tree(rank_probs, n, m), config.epts).max()) <= prof.n_max:
            _, latency, speedup = tree_speed(rank_probs, n, m, config.epts, prof.l_fp)
            rows.append({"tree_size": n, "mean_L_fp_ms": 1e3 * latency, "speedup_theory_tau": speedup,
                         "speedup_measured_tau": tree_speedup(r["tau_dynamic"], latency, l1)})
    return rows


# ------------------------------------------------------------------ the interleaved bench


def mean_input_length(records: Sequence[dict], label: str) -> float:
    """Mean number of positions a tree step of ``label`` feeds the target (the prefill left out; 1 without any)."""
    return float(np.mean([n for r in records if r["method"] == label for n in r["input_lengths"][1:]] or [1]))


def table1(result: BenchResult, config: PPDConfig, ppd_record: dict, medusa_record: dict, target: str) -> list[dict]:
    """Table 1: vanilla decoding, Medusa and PPD at their hardware-aware sizes measured on ``target`` (throughput, τ,
    L_fp of each one's mean step input, trainable %, candidates and input length per state, positions per step),
    then every row of the paper's Table 1 as printed (throughput, MT-Bench quality and setting included)."""
    rows, sizes, where = rows_of(result), result.provenance["tree_sizes"], bench_device(result)
    prof = bench_profile(result, rows["ppd"]["dtype"])
    n_ppd, n_medusa = sizes["ppd"]["size"], sizes["medusa"]["size"]
    tree = dynamic_tree(np.array(config.rank_probs), n_ppd, config.prompt_tokens)
    l_step = lambda label: 1e3 * prof.l_fp(round(mean_input_length(result.records, label)))
    table = [
        {"model": target, "method": "vanilla", "throughput_tok_s": rows["ar"]["tokens_per_s"], "tau": 1.0,
         "L_fp_ms": 1e3 * bench_profile(result, rows["ar"]["dtype"]).l_fp(1), "trainable_pct": None, "S_tr": "NA",
         "S_input": "1", "positions_per_step": "1", "device": f"{where}, {rows['ar']['dtype']}"},
        {"model": target, "method": "Medusa (3 heads)", "throughput_tok_s": rows["medusa"]["tokens_per_s"],
         "tau": rows["medusa"]["tokens_per_call"], "L_fp_ms": l_step("medusa"),
         "trainable_pct": 100 * medusa_record["heads"]["trainable_fraction"], "S_tr": str(n_medusa),
         "S_input": str(n_medusa), "positions_per_step": str(n_medusa + 1),
         "device": f"{where}, {rows['medusa']['dtype']}"},
        {"model": target, "method": "PPD (3 prompt tokens, 1 EPT)", "throughput_tok_s": rows["ppd"]["tokens_per_s"],
         "tau": rows["ppd"]["tokens_per_call"], "L_fp_ms": l_step("ppd"),
         "trainable_pct": 100 * ppd_record["prompt_tokens"]["trainable_fraction"],
         "S_tr": str(tuple(s.n_candidates for s in tree.states)),
         "S_input": str(tuple(s.n_candidates + s.n_prompts * config.epts for s in tree.states)),
         "positions_per_step": str(tuple(int(x) for x in input_lengths(tree, config.epts))),
         "device": f"{where}, {rows['ppd']['dtype']}"},
    ]
    for r in table:
        r.update(quality_mt_bench=None, setting=f"T = 0, batch 1, {r['device']}")
    for model, method, *_ in PAPER_TABLE1_ROWS:
        p = paper_table1(model, method)
        table.append({"model": f"{model} (paper)", "method": method, "throughput_tok_s": p["throughput"],
                      "tau": p["tau"], "L_fp_ms": 1e3 * p["L_fp_s"], "trainable_pct": p["trainable_pct"],
                      "S_tr": p["S_tr"], "S_input": p["S_input"], "positions_per_step": None, "device": "GPU (paper)",
                      "quality_mt_bench": p["quality"],
                      "setting": f"MT-Bench, {p['decoding']}, {PAPER_GPU} (Table 1 as printed)"})
    return table


def methods_table(result: BenchResult, variants: Sequence[str]) -> list[dict]:
    """Fig. 4: each method of the bench (the fixed-size PPD trees and plain decoding left out) with its speedup, the
    speedup the bench predicted from its measured τ (or α), c and the device profile (``run.bench_summary``), and
    where the target's step sits in that dtype (``trees.step_regime``: L_fp(1), its memory floor, β(5))."""
    rows = rows_of(result)
    return [{"method": v, "dtype": rows[v]["dtype"], "speedup": rows[v]["speedup"],
             "speedup_median": rows[v]["speedup_median"], "tokens_per_call": rows[v]["tokens_per_call"],
             "identical_to_ar": rows[v]["identical_to_ar"], "predicted_speedup": rows[v]["predicted_speedup"],
             **step_regime(bench_profile(result, rows[v]["dtype"]), betas=(5,))}
            for v in variants if not v.startswith(("ppd:", "ar"))]


def throughput_by_suite(records: Sequence[dict], suites: dict[str, Sequence[str]],
                        variants: Sequence[str] = ("ar", "ppd")) -> list[dict]:
    """Fig. 5: per suite (``suites``: name -> its prompt ids), each variant's pooled tokens/s over that suite's
    records and PPD's speedup over plain decoding."""
    table = []
    for suite, ids in suites.items():
        row = {"suite": suite}
        for v in variants:
            recs = [r for r in records if r["method"] == v and r["prompt_id"] in set(ids)]
            row[f"{v}_tok_s"] = sum(r["new_tokens"] for r in recs) / sum(r["wall_time_s"] for r in recs)
        row["ppd_speedup"] = row["ppd_tok_s"] / row["ar_tok_s"]
        table.append(row)
    return table


# ------------------------------------------------------------------ memory, speed and training cost


def parameter_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def kv_bytes_per_position(model_config, bytes_per: int) -> int:
    """Bytes of KV cache one position adds: keys and values of every layer's KV heads."""
    c = model_config
    return 2 * c.num_hidden_layers * c.num_key_value_heads * (c.hidden_size // c.num_attention_heads) * bytes_per


def memory_table(result: BenchResult, target: torch.nn.Module, draft_params: int, ppd_record: dict,
                 medusa_record: dict, draft_record: dict, seed: int = 0) -> list[dict]:
    """Figs. 7 and 1: extra weights (count, MB in the dtype each method ran in on the bench, % of the target), the
    extra KV positions and MB of one step, the measured speedup and the training CPU minutes of PPD, Medusa and the
    distilled draft (``speculative:g2``, 2 extra positions a step), with each one's bench and training dtypes; PPD's
    row also has its tokens/s over Medusa's with a 95% paired bootstrap interval (``seed``)."""
    rows = rows_of(result)
    positions = lambda label: mean_input_length(result.records, label) - 1
    medusa_s = medusa_record["times_s"]
    table = [
        {"method": "PPD", "extra_params": ppd_record["prompt_tokens"]["trainable_parameters"],
         "step_kv_positions": positions("ppd"), "speedup": rows["ppd"]["speedup"],
         "train_cpu_min": ppd_record["times_s"]["train_s"] / 60},
        {"method": "Medusa", "extra_params": medusa_record["heads"]["trainable_parameters"],
         "step_kv_positions": positions("medusa"), "speedup": rows["medusa"]["speedup"],
         "train_cpu_min": medusa_s["train_s"] / 60 + medusa_s.get("hidden_s", 0) / 60},
        {"method": "speculative (distilled draft)", "extra_params": draft_params, "step_kv_positions": 2,
         "speedup": rows["speculative:g2"]["speedup"], "train_cpu_min": draft_record["times_s"]["train_s"] / 60},
    ]
    # PPD's tokens/s over Medusa's on the same prompts, with its 95% paired bootstrap interval over prompts and seeds
    # (Fig. 1's "throughput like Medusa's" is decided on it; pooled point estimates alone cannot tell them apart)
    ids = list(dict.fromkeys(r["prompt_id"] for r in result.records))
    x = task_arrays(result.records, ids, ("ppd", "medusa"))
    low, high = stats.paired_bootstrap(x, stats.pooled_ratio, seed=seed) if len(ids) > 1 else (None, None)
    for r in table:  # one set of columns: the comparison is PPD's alone
        r |= {"over_medusa": None, "over_medusa_low95": None, "over_medusa_high95": None, "prompts": len(ids)}
    table[0] |= {"over_medusa": stats.pooled_ratio(x), "over_medusa_low95": low, "over_medusa_high95": high}
    target_params = parameter_count(target)
    for r, label in zip(table, ("ppd", "medusa", "speculative:g2")):
        bytes_per = 2 if rows[label]["dtype"] in ("bf16", "fp16") else 4  # the dtype this method ran in
        r["extra_weight_MB"] = r["extra_params"] * bytes_per / 2**20
        r["extra_pct_of_target"] = 100 * r["extra_params"] / target_params
        r["step_kv_MB"] = r["step_kv_positions"] * kv_bytes_per_position(target.config, bytes_per) / 2**20
        r["bench_dtype"] = rows[label]["dtype"]
        r["train_dtype"] = TRAIN_DTYPE[r["method"]]
    return table
