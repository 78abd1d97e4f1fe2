"""specrepro.studies.survey: mentored decoding on real rows, the speed-quality and staged tables, the token-source
picture and β against batch size, on the tiny models and hand-made bench results."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from specrepro.run.bench_types import BenchPrompt, BenchResult
from specrepro.core.config import DecodeConfig, SamplingConfig
from specrepro.run.generate import generate_ids
from specrepro.studies import survey
from tests.helpers import loaded

pytestmark = pytest.mark.usefixtures("one_thread")
T1 = SamplingConfig(temperature=1.0)


@pytest.fixture(scope="module")
def rows(tiny_pair_64):
    target, draft = (loaded(m) for m in tiny_pair_64)
    prompts = [BenchPrompt("a", [1, 2, 3, 4]), BenchPrompt("b", [5, 6, 7])]
    return target, survey.target_rows(target, draft, prompts, 5, 0, T1)


def test_target_rows_are_distributions_at_the_written_positions(rows):
    _, (p, q, contexts) = rows
    assert p.shape == q.shape == (10, 64) and p.dtype == torch.float64  # 2 prompts x 5 tokens, V = 64
    assert torch.allclose(p.sum(-1), torch.ones(10, dtype=torch.float64))
    assert [len(c) for c in contexts] == [4 + 5, 3 + 5]


def test_acceptance_is_speculative_at_zero_and_keeps_the_bound(rows):
    _, (p, q, _) = rows
    curve, excess = survey.acceptance_curve(p, q, (0.0, 0.05, 1.0))
    assert curve.shape == (3, 10) and excess <= 1e-6
    assert np.allclose(curve[0], survey.speculative_rates(p, q).numpy(), atol=1e-9)
    assert (np.diff(curve, axis=0) >= -1e-9).all()  # a looser bound never keeps fewer drafts
    chunked, _ = survey.acceptance_at(p, q, 0.05, chunk=3)
    assert np.allclose(chunked.numpy(), curve[1])


def test_kl_rows():
    p = torch.tensor([[0.5, 0.5], [1.0, 0.0]], dtype=torch.float64)
    q = torch.tensor([[0.5, 0.5], [0.0, 1.0]], dtype=torch.float64)
    kl = survey.kl_rows(p, q)
    assert kl[0] == 0 and kl[1] == float("inf")


def test_acceptance_table(rows):
    _, (p, q, _) = rows
    bounds = (0.0, 1.0)
    curve, _ = survey.acceptance_curve(p, q, bounds)
    table = survey.acceptance_table(bounds, curve, p, q, np.array([0.3, 0.6]))
    assert [r["D"] for r in table] == [0.0, 1.0] and table[1]["synthetic_mean_accept"] == 0.6
    assert table[0]["mean_accept"] == pytest.approx(table[0]["speculative_accept_D0"])
    assert table[0]["q10_accept"] <= table[0]["mean_accept"] <= table[0]["q90_accept"] and table[0]["rows"] == 10


def test_solver_cost_rows(rows):
    target, (p, q, contexts) = rows
    cost = survey.solver_cost(target.model, p, q, contexts[0], 0.2, 2, repeats=1)
    assert [r["rows"] for r in cost] == [1, 2, None, None]
    assert cost[2]["vs_target_forward_1_token"] == 1.0 and cost[3]["vs_target_forward_gamma1_tokens"] == 1.0
    assert all(r["ms"] > 0 for r in cost)


def bench_result(records, summary):
    return BenchResult(out=None, records=records, summary=summary, provenance={})


def summary_row(label, tps, rouge, **extra):
    return {"method": label, "lossless": True, "tokens_per_s": tps, "speedup": tps / 10, "tokens_per_call": 1.5,
            "alpha": 0.5, "rouge_l": rouge, "perplexity": 2.0, "n": 1, "new_tokens": 8, **extra}


def test_quality_table_and_speed_at_largest_bound():
    spec, ment_lo, ment_hi = "speculative:g2", survey.mentored_label(2, 0.2), survey.mentored_label(2, 1.0)
    rouge = {("ar", 0): 0.30, ("ar", 1): 0.34, (spec, 0): 0.32, (spec, 1): 0.32, (ment_lo, 0): 0.31,
             (ment_lo, 1): 0.31, (ment_hi, 0): 0.10, (ment_hi, 1): 0.10}
    records = [{"method": m, "repeat": k, "rouge_l": v} for (m, k), v in rouge.items()]
    summary = [summary_row("ar", 10, 0.32), summary_row(spec, 20, 0.32), summary_row(ment_lo, 30, 0.31),
               summary_row(ment_hi, 40, 0.10)]
    table, run_range, reference, lossless = survey.quality_table(bench_result(records, summary), (2,), (0.2, 1.0), 2)
    assert run_range == pytest.approx(0.04) and reference == pytest.approx(0.32) and len(lossless) == 4
    by = {r["variant"]: r for r in table}
    assert by[ment_lo]["drop_within_run_range"] and not by[ment_hi]["drop_within_run_range"]
    assert by[ment_lo]["speed_over_speculative"] == 1.5 and by["ar"]["speed_over_speculative"] is None
    assert by[ment_lo]["rouge_l_runs"] == "0.3100 0.3100"
    at_bound = survey.speed_at_largest_bound(table, {r["method"]: r for r in summary}, (2,), (0.2, 1.0), run_range)
    assert [{k: v for k, v in r.items() if k != "verdict_in"} for r in at_bound] == [
        {"gamma": 2, "largest_D_drop_within_run_range": 0.2, "mentored_tokens_per_s": 30,
         "speculative_tokens_per_s": 20, "mentored_over_speculative": 1.5, "rouge_l_run_range": run_range}]
    assert "mentored_speed_quality/verdicts.md" in at_bound[0]["verdict_in"]  # decided there, not here


def test_task_speedup_table_pairs_prompts_and_names_the_paper():
    spec = "speculative:g4"
    # summarize prompt s1 and code prompt h1; speculative twice AR's speed on code, 1.5x on summarize
    records = [{"method": m, "prompt_id": p, "repeat": 0, "new_tokens": 8, "wall_time_s": t,
                "accept_lengths": [2, 2] if m == spec else [], "proposed_lengths": [4, 4] if m == spec else [],
                "target_calls": 4 if m == spec else 8, "prompt_tokens": 7}
               for m, p, t in (("ar", "s1", 1.5), (spec, "s1", 1.0), ("ar", "h1", 2.0), (spec, "h1", 1.0))]
    summary = [{"method": "ar", "c": None, "beta": None}, {"method": spec, "c": 0.1, "beta": 1.2}]
    result = bench_result(records, summary)
    calls = []

    def bootstrap(x, statistic, resamples):
        calls.append(x.shape)
        return statistic(x) - 0.1, statistic(x) + 0.1

    table = survey.task_speedup_table({0.0: result, 1.0: result}, {"summarize": ["s1"], "humaneval": ["h1"]}, spec,
                                      4, "CPU", bootstrap, resamples=10)
    by = {(r["suite"], r["decoding"]): r for r in table}
    assert len(table) == 4 and calls == [(1, 1, 2, 2)] * 4  # [P, S, methods, (tokens, seconds)]
    assert by["summarize", "greedy"]["speedup"] == pytest.approx(1.5)
    assert by["humaneval", "sampling"]["speedup"] == pytest.approx(2.0)
    assert by["humaneval", "sampling"]["speedup_low"] == pytest.approx(1.9)
    assert by["summarize", "greedy"]["paper_speedup"] == 2.01 and by["summarize", "sampling"]["paper_speedup"] == 1.92
    assert by["humaneval", "sampling"]["paper_speedup"] == 2.46 and by["humaneval", "greedy"]["paper_speedup"] is None
    assert by["summarize", "greedy"]["alpha"] == pytest.approx(2 / 3)  # 4 accepted of 6 tested
    assert by["summarize", "greedy"]["beta"] == 1.2
    assert by["summarize", "greedy"]["temperature"] == 0.0 and by["humaneval", "sampling"]["temperature"] == 1.0
    assert "Chinchilla 70B" in by["summarize", "greedy"]["paper_setting"]
    assert by["summarize", "greedy"]["predicted_speedup"] > 1 and "c = 0.10" in by["summarize", "greedy"]["why_differs"]
    assert by["summarize", "greedy"]["mean_prompt_tokens"] == 7


def test_task_arrays_in_the_stats_layout_with_the_real_bootstrap():
    """The table by task reads ``task_arrays`` (speculative first, AR second) with the bench's pooled ratio."""
    from specrepro.core import stats
    from specrepro.core.stats import paired_bootstrap
    records = [{"method": m, "prompt_id": p, "repeat": 0, "new_tokens": 10, "wall_time_s": t}
               for m, p, t in (("ar", "a", 1.0), ("s", "a", 0.5), ("ar", "b", 2.0), ("s", "b", 1.0))]
    x = survey.task_arrays(records, ["a", "b"], ("s", "ar"))  # [P=2, S=1, 2, 2]: s twice as fast
    assert x.tolist() == [[[[10, 0.5], [10, 1.0]]], [[[10, 1.0], [10, 2.0]]]]
    assert stats.pooled_ratio(x) == pytest.approx(2.0)
    assert paired_bootstrap(x, stats.pooled_ratio, resamples=50) == pytest.approx((2.0, 2.0))


def test_staged_table_counts_calls_per_token():
    records = [{"method": "speculative:g4", "new_tokens": 8, "draft_calls": 16, "target_calls": 4},
               {"method": "staged:g4", "new_tokens": 8, "draft_calls": 4, "target_calls": 3}]
    summary = [summary_row("speculative:g4", 10, None, identical_to_ar=1.0),
               summary_row("staged:g4", 15, None, identical_to_ar=1.0)]
    table = survey.staged_table(bench_result(records, summary), {"speculative:g4": "draft model alone",
                                                                 "staged:g4": "staged"}, "speculative:g4")
    assert table[1]["speed_over_draft_alone"] == 1.5 and table[1]["draft_calls_per_token"] == 0.5
    assert table[0]["target_calls_per_token"] == 0.5 and table[1]["new_tokens"] == 8


def test_token_sources_reproduce_greedy(tiny_pair_64):
    target, draft = (loaded(m) for m in tiny_pair_64)
    ids = [1, 2, 3, 1, 2, 3, 1, 2]
    ar = generate_ids(target, ids, DecodeConfig(method="ar", max_new_tokens=8, sampling=SamplingConfig(0.0))).token_ids
    pictures = survey.token_sources(target, draft, ids, 8, 4, 0)
    assert set(pictures) == {"staged", "fused"}
    for tokens, sources in pictures.values():
        assert tokens == ar and len(sources) == len(tokens)
    table = survey.source_table(pictures, sorted({s for _, src in pictures.values() for s in src}), ar, "p")
    for name in pictures:
        assert sum(r["share"] for r in table if r["drafter"] == name) == pytest.approx(1.0)
    assert all(r["identical_to_ar"] for r in table)


def test_layout_wraps_and_marks_newlines():
    text = {1: "ab", 2: "c\nd", 3: "efgh"}
    pieces = survey.layout_sources(lambda ids: text[ids[0]], [1, 2, 3], ["x", "y", "x"], {"x": "C0", "y": "C1"},
                                   width=4)
    assert pieces == [(0, 0, "ab", "C0"), (2, 0, "c", "C1"), (3, 0, "¶", "C1"), (0, 1, "d", "C1"),
                      (0, 2, "efgh", "C0")]  # "efgh" would end at column 5 > 4: a new line


def test_beta_table_uses_the_measured_beta():
    latency = {1: 1.0, 3: 2.0}
    batching = SimpleNamespace(batches=(1, 4), beta=lambda b, n: latency[n] / latency[1],
                               cell=lambda b, n: SimpleNamespace(latency=SimpleNamespace(median_s=latency[n] * 1e-3)))
    table = survey.beta_table(batching, (2,), alpha=0.0, c=0.0)
    assert [r["batch_size"] for r in table] == [1, 4] and table[0]["beta"] == 2.0
    assert table[0]["expected_speedup"] == pytest.approx(0.5)  # α = 0: one token per step costing β
    assert table[0]["latency_n_ms"] == pytest.approx(2.0) and table[0]["compute_bound_limit"] == 3
