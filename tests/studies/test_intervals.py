"""The intervals the notebooks write beside their measured tables (``specrepro.studies.intervals``)."""
from __future__ import annotations

import json

import pytest

from specrepro.studies import intervals


def record(method: str, prompt: str, tokens: int, seconds: float, repeat: int = 0, accepted=(), proposed=()) -> dict:
    return {"method": method, "prompt_id": prompt, "repeat": repeat, "new_tokens": tokens, "wall_time_s": seconds,
            "accept_lengths": list(accepted), "proposed_lengths": list(proposed)}


def test_a_method_twice_as_fast_on_every_prompt_is_2x_with_an_interval_around_it():
    records = [r for i in range(8) for r in (record("ar", f"p{i}", 20 + i, 1.0 + 0.1 * i),
                                             record("fast", f"p{i}", 20 + i, (1.0 + 0.1 * i) / 2))]
    got = intervals.speedup_interval(records, "fast", "ar")
    assert got["ratio"] == pytest.approx(2.0) and got["prompts"] == 8
    assert got["low95"] == pytest.approx(2.0) and got["high95"] == pytest.approx(2.0)
    assert intervals.speedup_interval(records, "ar", "fast")["high95"] == pytest.approx(0.5)


def test_a_ratio_that_varies_by_prompt_gets_an_interval_that_contains_it_and_one_prompt_none():
    records = [r for i in range(10) for r in (record("ar", f"p{i}", 30, 1.0),
                                              record("m", f"p{i}", 30, 1.0 / (0.8 + 0.05 * i)))]
    got = intervals.speedup_interval(records, "m", "ar", seed=3)
    assert got["low95"] < got["ratio"] < got["high95"] and got["low95"] > 0.8 and got["high95"] < 1.25
    assert got == intervals.speedup_interval(records, "m", "ar", seed=3)  # seeded: the same interval every time
    one = intervals.speedup_interval(records, "m", "ar", prompt_ids=["p0"])
    assert one["prompts"] == 1 and one["low95"] is None and one["high95"] is None
    with pytest.raises(ValueError, match="no record"):
        intervals.speedup_interval(records, "absent", "ar")


def test_alpha_gap_is_the_pooled_difference_paired_by_prompt():
    records = []
    for i in range(9):
        records.append(record("strong", f"p{i}", 10, 1.0, accepted=[3, 2], proposed=[4, 4]))  # 5 of 7 tested
        records.append(record("weak", f"p{i}", 10, 1.0, accepted=[0, 1], proposed=[4, 4]))  # 1 of 3 tested
    got = intervals.alpha_gap(records, "strong", "weak")
    assert got["gap"] == pytest.approx(5 / 7 - 1 / 3) and got["prompts"] == 9
    assert got["gap_low95"] == pytest.approx(got["gap"]) and got["gap_high95"] == pytest.approx(got["gap"])
    reverse = intervals.alpha_gap(records, "weak", "strong")
    assert reverse["gap_high95"] < 0
    with pytest.raises(ValueError, match="no prompt"):
        intervals.alpha_gap(records, "strong", "absent")


def test_share_gap_counts_each_conversation_once():
    got = intervals.share_gap(0.30, 0.25, 100)
    half = 1.959963984540054 * ((0.3 * 0.7 + 0.25 * 0.75) / 100) ** 0.5
    assert got["gap"] == pytest.approx(0.05) and got["units"] == 100
    assert (got["gap_low95"], got["gap_high95"]) == pytest.approx((0.05 - half, 0.05 + half))
    assert intervals.share_gap(0.9, 0.1, 400)["gap_low95"] > 0  # a clear lead is decided
    for bad in ((0.3, 0.2, 0), (1.2, 0.2, 10), (0.3, -0.1, 10)):
        with pytest.raises(ValueError):
            intervals.share_gap(*bad)


def test_bench_records_reads_a_bench_folder_or_says_it_is_missing(tmp_path):
    rows = [record("ar", "p0", 5, 1.0), record("m", "p0", 5, 0.5)]
    (tmp_path / "records.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert intervals.bench_records(tmp_path) == rows
    with pytest.raises(FileNotFoundError, match="records.jsonl"):
        intervals.bench_records(tmp_path / "absent")
