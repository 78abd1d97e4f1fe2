"""specrepro.studies.slides: the slides' Tables 2 and 3 from sweep summary rows, the prompt splits, the resumable
bigram corpus and the run-conditions lines, on the tiny models and hand-made rows."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulations import SLIDES_TABLE2, expected_speedup
from specrepro.run.bench_types import BenchPrompt
from specrepro.studies import slides
from specrepro.studies.common import StudyCache
from tests.helpers import loaded

pytestmark = pytest.mark.usefixtures("one_thread")


def sweep_row(method, t, gamma=4, **extra):
    return {"method": method, "temperature": float(t), "gamma": gamma, "dtype": "fp32", "alpha": 0.5, "speedup": 1.2,
            "predicted_speedup": 1.5, "c": 0.1, "beta": 1.1, "efficiency": 0.8, "tokens_per_s": 10.0, **extra}


def test_eval_and_corpus_prompts_split_each_suite(monkeypatch):
    def fake(target, suite, limit, references=True):
        assert references is False
        return [BenchPrompt(f"{suite}/{i}", [i]) for i in range(limit)]

    monkeypatch.setattr(slides, "suite_prompts", fake)
    evaluation, corpus = slides.eval_and_corpus_prompts("target", ("a", "b"), 1, 2)
    assert [p.id for p in evaluation] == ["a/0", "b/0"]
    assert [p.id for p in corpus] == ["a/1", "a/2", "b/1", "b/2"]


def test_bigram_table_fits_the_kept_corpus(tmp_path, tiny_pair_64):
    target = loaded(tiny_pair_64[0])
    prompts = [BenchPrompt("a", [1, 2, 3]), BenchPrompt("b", [4, 5])]
    cache = StudyCache("stem", root=tmp_path)
    table, path, meta, corpus = slides.bigram_table(cache, target, "tiny", prompts, 5, seed=0)
    assert path.exists() and meta["prompts"] == ["a", "b"] and meta["max_new_tokens"] == 5
    assert len(corpus) == 2 and all(len(c) <= 5 for c in corpus)
    assert int(table.unigram.sum()) == sum(map(len, corpus))
    again = slides.bigram_table(cache, target, "tiny", prompts, 5, seed=0)
    assert again[3] == corpus and (path.parent / "corpus.json").exists()  # resumed from the run cache


def test_table3_matches_each_draft_to_its_printed_kind():
    rows = [sweep_row(m, t, alpha=a) for t in (1, 0)
            for m, a in (("ar", 1.0), ("prompt-lookup", 0.1), ("speculative", 0.6), ("bigram", 0.2), ("unigram", 0.3))]
    table = slides.table3(rows, "tiny-draft")
    assert [(r["T"], r["draft"]) for r in table] == [(t, d) for t in (0, 1) for d in
                                                     ("unigram", "bigram", "LM (tiny-draft)", "prompt-lookup")]
    unigram, lm, lookup = table[0], table[2], table[3]
    assert unigram["alpha_ours"] == 0.3 and lm["alpha_ours"] == 0.6
    assert unigram["alpha_gpt_like_97m"] == slides.published_alpha("GPT-LIKE (97M)", "UNIGRAM", 0)
    assert unigram["alpha_lamda_137b"] is None  # LaMDA prints LM drafts only
    assert lm["alpha_lamda_137b"] == slides.published_alpha("LAMDA (137B)", "LAMDA (100M)", 0)
    assert all(lookup[c] is None for c in slides.PUBLISHED_LM)  # no published prompt-lookup row


def test_table2_and_the_zero_cost_rows():
    speed = [sweep_row("speculative", 1, 2), sweep_row("ar", 0, 1), sweep_row("speculative", 0, 2),
             sweep_row("speculative", 0, 1)]
    table = slides.table2(speed, "d")
    assert [(r["T"], r["gamma"]) for r in table] == [(0, 1), (0, 2), (1, 2)] and {r["draft"] for r in table} == {"d"}
    assert set(table[0]) == {"draft", "T", "gamma", "dtype", "alpha", "speedup", "predicted_speedup", "c", "beta",
                             "efficiency", "tokens_per_s"}
    alpha_rows = [sweep_row(m, 0) for m in ("ar", "speculative", "prompt-lookup", "unigram", "bigram")]
    assert [r["draft"] for r in slides.zero_cost_rows(alpha_rows)] == ["prompt-lookup", "unigram", "bigram"]


def test_published_table2_implied_cost_gives_back_the_printed_speed():
    table = slides.published_table2()
    assert len(table) == len(SLIDES_TABLE2)
    for r in table:  # a negative c (a speed the β = 1 model cannot reach) has no speedup to compare
        if r["implied_c_at_beta_1"] >= 0:
            assert float(expected_speedup(r["alpha"], r["gamma"], r["implied_c_at_beta_1"])) == pytest.approx(
                r["speedup"])


def test_run_conditions_lines(tmp_path):
    session = {"load_average": [0.5, 0.4, 0.3], "threads": 1, "costs": {"beta": 1.234, "c": 0.12345},
               "device_name": "cpu"}
    for run, extra in (("T0_g4", {"t0_mismatches": ["prompt a differs"]}), ("T1_g4", {})):
        folder = tmp_path / "stem-table3-abc" / run
        folder.mkdir(parents=True)
        (folder / "provenance.json").write_text(json.dumps({"sessions": [session], **extra}))
    lines = slides.run_conditions([tmp_path / "stem-table3-abc"])
    assert lines == ["table3/T0_g4: load [0.5, 0.4, 0.3], threads 1, β 1.23, c 0.123, cpu",
                     "    T = 0 records differing from plain decoding: 1", "      prompt a differs",
                     "table3/T1_g4: load [0.5, 0.4, 0.3], threads 1, β 1.23, c 0.123, cpu"]


def test_step_regime_reads_the_benchs_profile_step_and_floor(tmp_path):
    """L_fp(1) and the memory floor of the bytes the engine holds (its 4-bit weights), from the profile a sweep
    point's bench recorded; a dtype the bench did not profile is one error naming the folder."""
    committed = json.loads((Path(__file__).parents[2] / "figures/bench/eagle-t0/provenance.json").read_text())
    profile = committed["sessions"][0]["profiles"]["bf16"]
    (tmp_path / "provenance.json").write_text(json.dumps({"sessions": [{"profiles": {"bf16": profile}}]}))
    regime = slides.step_regime(tmp_path, "bf16")
    m = profile["machine"]
    assert regime["step_ms"] == pytest.approx(1e3 * profile["forward"][0][1]["median_s"])
    assert regime["floor_ms"] == pytest.approx(1e3 * m["held_bytes"] / m["bandwidth_bytes_s"])
    with pytest.raises(ValueError, match="no fp32 profile"):
        slides.step_regime(tmp_path, "fp32")
