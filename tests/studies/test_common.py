"""specrepro.studies.common: the run-cache folders, the resumable bench runner and the small aggregates every study
notebook shares."""
from __future__ import annotations

import statistics

import pytest

from specrepro.run.bench_types import BenchPrompt, BenchResult
from specrepro.run.variants import BenchConfig
from specrepro.studies import common
from specrepro.studies.common import (StudyCache, cached_json, cap, holdout_split, paired_ratio, records_of, rows_of,
                                      run_means)
from tests.helpers import loaded

pytestmark = pytest.mark.usefixtures("one_thread")
PROMPTS = [BenchPrompt("a", [1, 2, 3, 1, 2]), BenchPrompt("b", [4, 5, 4, 5])]


def record(method, prompt, repeat, tokens, seconds, **extra):
    return {"method": method, "prompt_id": prompt, "repeat": repeat, "new_tokens": tokens, "wall_time_s": seconds,
            **extra}


def test_dir_is_keyed_and_fresh_empties_it(tmp_path):
    cache = StudyCache("stem", root=tmp_path)
    one, again, other = cache.dir("part/x", {"a": 1}), cache.dir("part/x", {"a": 1}), cache.dir("part/x", {"a": 2})
    assert one == again != other and one.parent == tmp_path / "runs" and one.name.startswith("stem-part-x-")
    (one / "done.json").write_text("1")
    assert (cache.dir("part/x", {"a": 1}) / "done.json").exists()
    assert not (StudyCache("stem", root=tmp_path, fresh=True).dir("part/x", {"a": 1}) / "done.json").exists()


def test_bench_runs_then_resumes(tmp_path, tiny_pair):
    target, draft = (loaded(m) for m in tiny_pair)
    config = BenchConfig(methods=("ar", "speculative:g2"), target="tiny", draft="tiny-draft", prompts="test",
                         max_new_tokens=4, gamma=2, warmup_tokens=0, cost_repeats=1, quality=False)
    cache = StudyCache("stem", root=tmp_path)
    first = cache.bench("b", config, PROMPTS, "fp32", target=target, draft=draft, echo=False)
    assert len(first.records) == 2 * len(PROMPTS) and set(rows_of(first)) == {"ar", "speculative:g2"}
    assert [r["prompt_id"] for r in records_of(first, "ar")] == ["a", "b"]
    again = cache.bench("b", config, PROMPTS, "fp32", target=target, draft=draft, echo=False)
    assert again.out == first.out and [r["token_ids"] for r in again.records] == [r["token_ids"] for r in first.records]
    assert [r["wall_time_s"] for r in again.records] == [r["wall_time_s"] for r in first.records]  # read, not rerun


def test_cached_json_computes_once(tmp_path):
    calls = []
    compute = lambda: calls.append(1) or {"tau": 1.5}
    assert cached_json(tmp_path / "n4.json", compute) == {"tau": 1.5} == cached_json(tmp_path / "n4.json", compute)
    assert calls == [1]


def test_run_means_and_paired_ratio():
    records = [record("ar", "a", 0, 10, 1.0, x=1.0), record("ar", "b", 0, 10, 2.0, x=3.0),
               record("s", "a", 0, 10, 0.5, x=5.0), record("s", "b", 0, 10, 0.5, x=7.0),
               record("s", "c", 0, 10, 0.5, x=9.0)]  # c has no baseline: left out of the pairs
    assert run_means(records, "x") == {("ar", 0): 2.0, ("s", 0): 7.0}
    assert paired_ratio(records, "s", "ar") == pytest.approx(statistics.median([2.0, 4.0]))
    assert paired_ratio(records, "ar", "missing") is None


def test_rows_of_keys_the_summary_by_label():
    result = BenchResult(out=None, records=[], summary=[{"method": "ar", "n": 1}, {"method": "s", "n": 2}],
                         provenance={})
    assert rows_of(result)["s"]["n"] == 2


def test_holdout_split_and_cap():
    rest, held = holdout_split(PROMPTS + [BenchPrompt("c", [1])], 1)
    assert [p.id for p in rest] == ["a", "b"] and [p.id for p in held] == ["c"]
    with pytest.raises(ValueError):
        holdout_split(PROMPTS, 0)
    assert cap(None, None) is None and cap(None, 3) == 3 and cap(5, 3) == 3 and cap(2, None) == 2


def test_suite_prompts_go_through_encode_prompts(monkeypatch):
    seen = []
    monkeypatch.setattr(common, "encode_prompts", lambda *args: seen.append(args) or [BenchPrompt("s/1", [1], "ref")])
    assert common.suite_prompts("target", "instruct", 2)[0].reference == "ref"
    assert common.suite_prompts("target", "instruct", 2, references=False)[0].reference is None
    assert seen[0] == ("target", "suite:instruct", 2, True)
