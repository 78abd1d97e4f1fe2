"""specrepro.studies.batch: the batch-size study's prediction, errors, goals, cells and resume, on the tiny models."""
from __future__ import annotations

import dataclasses
import json
import statistics

import pytest

from specrepro.metrics.batching import BatchCost, BatchingResult
from specrepro.metrics.profile import Latency
from specrepro.studies import batch as study
from specrepro.studies.common import StudyCache
from tests.helpers import loaded

pytestmark = pytest.mark.usefixtures("one_thread")
PROMPTS = [("a", [1, 2, 3, 4, 1, 2, 3]), ("b", [5, 6, 7, 5, 6])]  # each repeats itself: prompt lookup can copy


def config(**changes) -> study.BatchStudyConfig:
    base = dict(target="tiny", draft="tiny-draft", suite="toy", batches=(1, 2), gammas=(1, 2), rows=2,
                max_new_tokens=5, beta_rounds=1, beta_forwards=1, beta_warmup=0)
    return study.BatchStudyConfig(**{**base, **changes})


def costs(seconds: dict[tuple[int, int], float]) -> BatchingResult:
    """A measurement with given medians per (B, n)."""
    cells = tuple(BatchCost(batch=b, new_tokens=n, latency=Latency(s, s, s), energy_j=None, runs=1, total_s=s,
                            total_j=None) for (b, n), s in sorted(seconds.items()))
    return BatchingResult(model="m", device="cpu", dtype="fp32", threads=1, context_tokens=8, rounds=1, forwards=1,
                          warmup=0, energy_source="none", energy_reason=None, cells=cells, machine={})


@pytest.fixture(scope="module")
def run(tiny_pair_64, tmp_path_factory):
    target, draft = (loaded(m) for m in tiny_pair_64)
    cache = StudyCache("batch_test", root=tmp_path_factory.mktemp("cache"))
    return target, draft, cache, study.run_study(config(), target, draft, PROMPTS, cache, echo=False)


def test_prediction_is_the_survey_formula_by_hand():
    # α = 0.5, γ = 2: τ = 1 + 0.5 + 0.25 = 1.75; β = 1.4, c = 0.1: 1.75 / (0.2 + 1.4)
    assert study.predicted_speedup(0.5, 2, 1.4, 0.1) == pytest.approx(1.75 / 1.6)
    assert study.predicted_speedup(0.0, 3, 1.0, 0.0) == pytest.approx(1.0)  # nothing accepted, free verify
    assert study.relative_error(1.1, 1.0) == pytest.approx(0.1)
    assert study.relative_error(0.9, 1.0) == pytest.approx(-0.1)


def test_draft_cost_follows_how_the_draft_ran():
    target = costs({(1, 1): 0.010, (4, 1): 0.020})
    draft = costs({(1, 1): 0.002, (4, 1): 0.003})
    assert study.draft_cost(target, draft, 4, "batched") == pytest.approx(0.003 / 0.020)
    assert study.draft_cost(target, draft, 4, "per-row") == pytest.approx(4 * 0.002 / 0.020)  # B forwards of 1
    assert study.draft_cost(target, None, 4, "per-row") == 0.0  # prompt lookup: c = 0
    with pytest.raises(ValueError, match="draft mode"):
        study.draft_cost(target, draft, 4, "sideways")


def test_goals_decide_on_the_worst_cell():
    def row(method, b, g, speedup, dec, e2e):
        return {"method": method, "batch_size": b, "gamma": g, "speedup": speedup, "rel_error_decode": dec,
                "rel_error_end_to_end": e2e}
    rows = [row("prompt-lookup", 8, 1, 1.2, 0.05, -0.09), row("prompt-lookup", 8, 2, 0.9, -0.08, 0.02),
            row("prompt-lookup", 1, 1, 1.5, 0.02, 0.15)]
    goals = {(g["goal"].split(" (")[0] if "faster" in g["goal"] else g["goal"], g["goal"]): g
             for g in study.goal_rows(rows)}
    best, every = (g for k, g in goals.items() if "faster" in k[0])
    assert best["met"] and best["measured"] == 1.2 and best["where"] == "γ = 1"
    assert not every["met"] and every["measured"] == 0.9
    decode, e2e = (g for k, g in goals.items() if "≤" in k[0])
    assert decode["met"] and decode["measured"] == pytest.approx(0.08)  # |−8 %| is the worst, within 10 %
    assert not e2e["met"] and "B = 1" in e2e["where"]  # 15 % at B = 1 fails the whole curve
    assert study.goal_rows([row("speculative", 2, 1, 1.0, 0.0, 0.0)])[0]["met"] is None  # B = 8 not measured


def test_config_checks():
    with pytest.raises(ValueError, match="multiple of every B"):
        config(batches=(1, 2, 4), rows=6)
    with pytest.raises(ValueError, match="needs a draft"):
        config(draft=None)
    assert config().decode("ar", 3).stop_at_eos is False  # every row writes max_new_tokens


def test_rows_cycle_the_prompts():
    rows = study.fill_rows(PROMPTS, 5)
    assert [pid for pid, _ in rows] == ["a", "b", "a", "b", "a"]
    context = study.decode_context(rows, 4)
    assert len(context) == round((7 * 3 + 5 * 2) / 5 + 2)


def test_a_cell_runs_every_method_on_the_same_prompts(run):
    _, _, _, result = run
    assert [(c["batch"], c["gamma"]) for c in result.cells] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    for cell in result.cells:
        assert len(cell["batches"]) == 2 // cell["batch"]  # the same 2 rows at every B
        for b in cell["batches"]:
            assert set(b["runs"]) == {"ar", "prompt-lookup", "speculative"}
            for label, rows in b["runs"].items():
                assert [r["prompt_id"] for r in rows] == b["prompt_ids"], label
                assert all(r["new_tokens"] == 5 for r in rows)  # no stop at EOS
    speedups = study.speedup_rows(result.cells, result.costs)
    assert len(speedups) == 8 and all(r["same_prompts_as_ar"] and r["identical_to_ar"] for r in speedups)
    for r in speedups:  # the prediction is the formula on the row's own measured numbers
        assert r["predicted"] == pytest.approx(study.predicted_speedup(r["alpha"], r["gamma"], r["beta"], r["c"]))
        assert r["rel_error_decode"] == pytest.approx(r["speedup_decode"] / r["predicted"] - 1)
        assert (r["c"] == 0) == (r["method"] == "prompt-lookup")


def test_the_cells_of_one_batch_size_share_the_prefill_and_ar(run):
    _, _, _, result = run
    for b in (1, 2):
        g1, g2 = (c for c in result.cells if c["batch"] == b)
        for x, y in zip(g1["batches"], g2["batches"]):
            assert x["prefill_s"] == y["prefill_s"] and x["runs"]["ar"] == y["runs"]["ar"]  # one AR run, not two
            for cell, runs in ((g1, x["runs"]), (g2, y["runs"])):  # each method ran at its cell's γ
                assert max(n for r in runs["speculative"] for n in r["proposed_lengths"]) == cell["gamma"]


def test_method_row_counts(run):
    _, _, _, result = run
    cell = result.cells[2]  # B = 2, γ = 1: one batch of both rows
    ar = study.method_row(cell, "ar")
    assert ar["rows"] == 2 and ar["new_tokens"] == 10 and ar["target_calls"] == 5  # one forward per token
    assert ar["tokens_per_s"] == pytest.approx(10 / ar["wall_s"])
    spec = study.method_row(cell, "speculative")
    assert spec["target_calls"] <= 5 and spec["draft"] == "batched"
    table1 = study.table1_rows(result.cells, result.costs)
    assert [r["batch_size"] for r in table1] == [1, 2] and table1[0]["decode_step_over_b1"] == 1.0
    # a decode step: the walls less the timed prefill, over the calls less the prefill's one per batch (the median
    # over the cells of that B)
    assert ar["decode_step_ms"] == pytest.approx(
        1e3 * (ar["wall_s"] - ar["prefill_s"]) / (ar["target_calls"] - len(cell["batches"])))
    at_2 = [c for c in result.cells if c["batch"] == 2]
    assert table1[1]["ar_decode_step_ms"] == pytest.approx(
        statistics.median(study.method_row(c, "ar")["decode_step_ms"] for c in at_2))
    assert table1[1]["ar_step_with_prefill_ms"] == pytest.approx(
        statistics.median(study.method_row(c, "ar")["step_ms"] for c in at_2))
    assert table1[1]["mjsd_time_per_run_over_b1"] == pytest.approx(0.397 / 0.376)
    assert len(study.throughput_rows(result.cells)) == 4 * 3


def test_resume_reads_the_cells_back(run, monkeypatch):
    target, draft, cache, result = run

    def fail(*_, **__):
        raise AssertionError("a resumed study measured again")
    monkeypatch.setattr(study, "run_batch_size", fail)
    monkeypatch.setattr(study, "measure_costs", fail)
    again = study.run_study(config(), target, draft, PROMPTS, cache, echo=False)
    assert again.cells == result.cells and again.folder == result.folder
    saved = json.loads((cache.dir("cells", config(), ["a", "b"]) / "study.json").read_text())
    assert saved["format"] == study.FORMAT and saved["config"] == json.loads(json.dumps(dataclasses.asdict(config())))


def test_rows_keep_the_last_prompt_tokens():
    assert study.fill_rows(PROMPTS, 2, prompt_tokens=3) == [("a", [1, 2, 3]), ("b", [7, 5, 6])]
