"""specrepro.studies.eagle: the EAGLE notebook's ablation rows, τ by tree shape on a tiny target and a random draft,
its speed and goal rows over a bench summary, and the PPD paper's Fig. 7 memory rows from weight files."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from specrepro.run.bench_types import BenchPrompt, BenchResult
from specrepro.drafters.eagle import EagleConfig, EagleDraft, save_draft
from specrepro.studies import eagle as study

pytestmark = pytest.mark.usefixtures("one_thread")
RANKS = ((0.5, 0.2, 0.1, 0.05), (0.4, 0.15, 0.1, 0.05), (0.3, 0.1, 0.05, 0.05))


def random_draft(target, vocab=0):
    """A draft with random fc weights over ``target`` (neither the identity nor the target), 3 deep, top-3."""
    config = EagleConfig(hidden_size=target.config.hidden_size, draft_vocab=vocab, depth=3, top_k=3, target="tiny",
                         rank_probs=RANKS)
    torch.manual_seed(0)
    draft = EagleDraft(target, config)
    with torch.no_grad():
        draft.fc.weight.add_(torch.randn_like(draft.fc.weight) * 0.3)
        if vocab:
            draft.vocab.copy_(torch.arange(vocab))
    return draft.eval().requires_grad_(False), config


def ablations(tmp_path):
    variants = [{"name": n, "features": f, "ttt": t, "draft_vocab": v, "accept_by_position": a,
                 "accept_by_position_full_head": b, "topk_accuracy": {"depth_1": [a[0]]},
                 "positions_by_depth": [90, 40],
                 "train_seconds": 120.0, "steps": 10, "command": ["x"], "git_revision": "abc"}
                for n, f, t, v, a, b in (("last", "last", 0, 8192, [0.5, 0.4], [0.55, 0.45]),
                                         ("fused-ttt", "fused", 2, 0, [0.6, 0.5], [0.6, 0.5]))]
    path = tmp_path / "ablations.json"
    path.write_text(json.dumps({"variants": variants, "shipped": "fused-ttt"}))
    return path


def test_ablation_rows_by_position_and_variant(tmp_path):
    data = study.read_ablations(ablations(tmp_path))
    rows = study.accept_rows(data)
    assert [(r["variant"], r["position"]) for r in rows] == [("last", 1), ("last", 2), ("fused-ttt", 1),
                                                             ("fused-ttt", 2)]
    assert rows[1]["accept_draft_head"] == 0.4 and rows[1]["accept_full_head"] == 0.45
    assert rows[1]["positions_measured"] == 40
    assert [r["shipped"] for r in rows] == [False, False, True, True]
    summary = study.variant_rows(data)
    assert summary[0]["chain_tau_draft_head"] == pytest.approx(1 + 0.5 + 0.5 * 0.4)
    assert summary[0]["what"] == "last features, TTT 0, 8192-row head, 10 steps" and summary[1]["what"].endswith("full head, 10 steps")
    assert summary[1]["train_minutes"] == 2.0


def test_ablations_missing_or_incomplete_get_one_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="eagle_ablations"):
        study.read_ablations(tmp_path / "none.json")
    path = ablations(tmp_path)
    data = json.loads(path.read_text())
    del data["variants"][0]["accept_by_position_full_head"]
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="accept_by_position_full_head"):
        study.read_ablations(path)
    path.write_text(json.dumps({"variants": [], "shipped": "x"}))
    with pytest.raises(ValueError, match="shipped"):
        study.read_ablations(path)


def test_theory_of_the_static_tree_and_the_chain():
    assert study.static_theory(RANKS, 1, 3) == pytest.approx(1.5)  # one node: the top guess at depth 1
    assert study.static_theory(RANKS, 3, 3) == pytest.approx(1 + 0.5 + 0.2 + 0.5 * 0.4)  # (0), (1), (0, 0)
    assert study.chain_tau([0.5, 0.4, 0.3]) == pytest.approx(1 + 0.5 + 0.2 + 0.06)
    assert study.dynamic_capacity(4, 5) == 4 + 4 * 16 and study.dynamic_capacity(3, 1) == 3


def test_tau_rows_on_a_tiny_target(tiny_pair_64):
    target, _ = tiny_pair_64
    draft, config = random_draft(target)
    prompts = [BenchPrompt("a", [1, 2, 3, 4]), BenchPrompt("b", [9, 40, 41, 12, 5])]
    row = study.tau_row(target, draft, config, prompts, 40, depth=3, max_new=10, seed=0)
    assert row["dynamic_nodes"] == study.dynamic_capacity(3, 3) == 21  # capped at what the dynamic tree ranks
    for key in ("tau_dynamic", "tau_static", "tau_random"):
        assert 1.0 <= row[key] <= 4.0, row  # at most the depth (3) plus the target's own token
    assert row["tau_theory_static"] == pytest.approx(study.static_theory(RANKS, 40, 3))
    again = study.tau_row(target, draft, config, prompts, 40, depth=3, max_new=10, seed=0)
    assert again == row  # the random tree comes from (seed, n): a resumed grid measures the same tree
    chain = study.chain_row(target, draft, config, prompts, depth=3, max_new=10, seed=0)
    assert 1.0 <= chain["tau_chain"] <= 4.0 and chain["tau_theory_chain"] == pytest.approx(1 + 0.5 + 0.2 + 0.06)


def bench(temperature, eagle_speedup):
    labels = ("ar", "speculative:gauto", "medusa", "eagle", "eagle:shapechain")
    speed = {"ar": 1.0, "speculative:gauto": 1.2, "medusa": 1.1, "eagle": eagle_speedup, "eagle:shapechain": 1.4}
    summary = [{"method": v, "base_method": v.split(":")[0], "dtype": "fp32", "tokens_per_s": 10 * speed[v],
                "speedup": speed[v], "speedup_median": speed[v], "tokens_per_call": 1 + speed[v], "efficiency": 0.95,
                "identical_to_ar": None if v == "ar" else (1 if temperature == 0 else None), "lossless": True}
               for v in labels]
    provenance = {"tree_sizes": {"medusa": {"size": 6}, "eagle": {"size": 12}, "eagle:shapechain": {"size": 12}}}
    return BenchResult(out=None, records=[], summary=summary, provenance=provenance), labels


def test_speed_rows_anchor_rows_and_goals():
    (t0, labels), (t1, _) = bench(0, 1.6), bench(1, 1.2)
    rows = study.speed_rows({0.0: t0, 1.0: t1}, labels)
    assert len(rows) == 10 and rows[3]["variant"] == "eagle" and rows[3]["tree_size"] == 12
    assert rows[0]["tree_size"] is None  # plain decoding has no tree
    assert rows[3]["speedup"] == 1.6 and rows[8]["setting"] == "T = 1" and rows[8]["speedup"] == 1.2
    anchors = study.anchor_rows()
    assert set(anchors[0]) == set(rows[0])  # one table: the same columns
    assert [a["speedup"] for a in anchors[:4]] == [2.19, 1.79, 1.44, 2.36]
    assert anchors[4]["speedup"] == pytest.approx(82.0 / 39.2) and anchors[5]["speedup"] == pytest.approx(88.0 / 39.2)
    assert study.paper_speedups()["ppd"] == ("PPD", pytest.approx(88.0 / 39.2), 2.54)
    goals = study.goal_rows({0.0: t0, 1.0: t1}, bf16_units=False)
    assert [g["met"] for g in goals] == [True, False, True, True, True]
    assert goals[-1]["target"].startswith("> speculative:gauto")  # the best other lossless method, not eagle's chain
    slower, _ = bench(0, 1.4)
    assert study.goal_rows({0.0: slower, 1.0: t1}, bf16_units=False)[0]["met"]  # >= 1.3 on an AVX2-only CPU
    assert not study.goal_rows({0.0: slower, 1.0: t1}, bf16_units=True)[0]["met"]  # < 1.5 with bf16 units


def test_memory_rows_from_weight_files(tmp_path, tiny_pair_64):
    target, _ = tiny_pair_64
    draft, config = random_draft(target, vocab=16)
    eagle = save_draft(draft, config, tmp_path / "eagle") / "eagle.safetensors"
    save_file({"embeds": torch.zeros(3, 1, 32)}, tmp_path / "prompt_tokens.safetensors")
    heads = tmp_path / "heads.safetensors"
    save_file({"blocks.0.weight": torch.zeros(32, 32), "blocks.0.bias": torch.zeros(32)}, heads)
    foot = study.weights_footprint(eagle)
    own = sum(p.numel() for n, p in draft.named_parameters())  # fc, the layer, the norm (not the target's)
    assert foot["params"] == own and foot["ids"] == 16 and foot["stored_dtypes"] == ["float32"]
    assert foot["stored_bytes"] == 4 * (own + 16)  # save_folder stores the ids as fp32 too
    rows = study.memory_rows(target, [("EAGLE", eagle, 1, "bf16"), ("Medusa", heads, 0, "fp32"),
                                      ("PPD", tmp_path / "prompt_tokens.safetensors", 0, "fp32")])
    target_params = sum(p.numel() for p in target.parameters())
    assert rows[2]["extra_params"] == 96 and rows[2]["extra_pct_of_target"] == pytest.approx(9600 / target_params)
    assert rows[0]["extra_MB_at_run_dtype"] == pytest.approx((2 * own + 8 * 16) / 2**20)
    head_dim = 32 // 4  # tiny_model: 4 heads, 2 KV heads
    assert rows[0]["own_kv_kB_per_position"] == pytest.approx(2 * 1 * 2 * head_dim * 2 / 1024)
    assert rows[1]["own_kv_kB_per_position"] == 0
    assert rows[1]["extra_MB_at_run_dtype"] == pytest.approx(4 * (32 * 32 + 32) / 2**20)
    shares = study.ppd_share_rows(rows)
    assert [s["paper_pct"] for s in shares] == [0.004, 0.007]
    assert shares[0]["ours_pct"] == pytest.approx(100 * 96 / (32 * 32 + 32))
    assert shares[1]["ours_pct"] == pytest.approx(100 * 96 / own)
    points = study.paper_memory_points()
    assert points["Medusa (Table 1)"] == 8.07 and points["PPD runtime (abstract)"] == 0.0004
