"""``bench --batch-size``: prompts decoded B at a time, each keeping its batch-1 record key, seed and tokens; the
summary's throughput counts a batch's wall time once; the profile is timed over B rows; refusals and resume."""
from __future__ import annotations

import json

import pytest

from specrepro.run.bench_types import BenchPrompt
from specrepro.run.store import load_records
from specrepro.run.variants import BenchConfig
from specrepro.run.bench_summary import run_wall
from specrepro.drafters import PromptLookupDrafter
from specrepro.metrics.profile import Profile

from tests.helpers import run_tiny_bench, tiny_bench_config

pytestmark = pytest.mark.usefixtures("one_thread")

METHODS = ("ar", "speculative", "prompt-lookup", "bigram")
PROMPTS = [BenchPrompt("a", [5, 7, 9, 11, 5, 7]), BenchPrompt("b", [3, 4, 3, 4, 3]),
           BenchPrompt("c", [8, 1, 6, 1, 8, 1, 6, 2, 9])]  # ragged: batches [a, b] and [c] at B = 2


def config(bench_table_path, **changes) -> BenchConfig:
    return tiny_bench_config(bench_table_path, **{"methods": METHODS, **changes})


def run(cfg, out, bench_pair, **kw):
    return run_tiny_bench(cfg, out, bench_pair, PROMPTS, **kw)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_batched_bench_gives_every_prompt_its_batch_1_tokens(tmp_path, bench_pair, bench_table_path, temperature):
    one = run(config(bench_table_path, temperature=temperature), tmp_path / "b1", bench_pair)
    two = run(config(bench_table_path, temperature=temperature, batch_size=2), tmp_path / "b2", bench_pair)
    key = lambda r: (r["method"], r["prompt_id"], r["repeat"])
    tokens_1 = {key(r): r["token_ids"] for r in one.records}
    assert {key(r): r["token_ids"] for r in two.records} == tokens_1  # each row's tokens: its batch-1 run's
    for r in two.records:
        assert r["batch_size"] == 2 and r["batch"] == {"a": 0, "b": 0, "c": 1}[r["prompt_id"]]
        assert r["provenance"]["batch"]["size"] == (2 if r["batch"] == 0 else 1)
        assert r["seed"] == 0
    rows = {row["method"]: row for row in two.summary}
    assert all(row["batch_size"] == 2 for row in rows.values())
    if temperature == 0:
        assert all(rows[m]["identical_to_ar"] == 1.0 for m in METHODS[1:])
    assert rows["ar"]["speedup"] == 1.0 and rows["speculative"]["predicted_speedup"] is not None


def test_throughput_counts_a_batch_once_and_latency_per_row(tmp_path, bench_pair, bench_table_path):
    result = run(config(bench_table_path, methods=("ar", "prompt-lookup"), batch_size=2), tmp_path, bench_pair)
    for row in result.summary:
        recs = [r for r in result.records if r["method"] == row["method"]]
        batches = {(r["batch"], r["repeat"]): r["provenance"]["batch"]["wall_time_s"] for r in recs}
        assert len(batches) == 2 and row["wall_time_s"] == pytest.approx(sum(batches.values()))
        assert row["wall_time_s"] < sum(r["wall_time_s"] for r in recs)  # rows of a batch overlap in time
        tokens = sum(r["new_tokens"] for r in recs)
        assert row["tokens_per_s"] == pytest.approx(tokens / row["wall_time_s"])
        assert row["latency_per_token_s"] == pytest.approx(sum(r["wall_time_s"] for r in recs) / tokens)
    # The device profile is the batched step's: its key says B, and it was timed over B rows.
    prov = json.loads((tmp_path / "provenance.json").read_text())
    profile = Profile.from_dict(prov["sessions"][0]["profiles"]["fp32"])
    assert profile.key.batch == 2


def test_run_wall_of_batch_1_records_is_their_sum():
    recs = [{"prompt_id": p, "repeat": 0, "wall_time_s": t} for p, t in (("a", 1.5), ("b", 2.0))]
    assert run_wall(recs) == 3.5


def test_an_interrupted_batched_bench_resumes_without_duplicates(tmp_path, bench_pair, bench_table_path):
    cfg = config(bench_table_path, methods=("ar", "prompt-lookup"), batch_size=2)
    seen = []

    def stop_after_three(record):
        seen.append(record)
        if len(seen) == 3:  # in the middle of prompt-lookup's first batch
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(cfg, tmp_path, bench_pair, on_record=stop_after_three)
    assert len(load_records(tmp_path)) == 3
    result = run(cfg, tmp_path, bench_pair)
    keys = [(r["method"], r["prompt_id"], r["repeat"]) for r in load_records(tmp_path)]
    assert len(keys) == len(set(keys)) == 2 * len(PROMPTS)
    assert len(result.records) == 2 * len(PROMPTS)


def test_a_run_written_before_batch_size_resumes_at_batch_1(tmp_path, bench_pair, bench_table_path):
    cfg = config(bench_table_path, methods=("ar",))
    run(cfg, tmp_path, bench_pair)
    stored = json.loads((tmp_path / "config.json").read_text())
    del stored["batch_size"]
    (tmp_path / "config.json").write_text(json.dumps(stored))
    assert len(run(cfg, tmp_path, bench_pair).records) == len(PROMPTS)  # resumed, not refused
    with pytest.raises(ValueError, match="other arguments.*batch_size: stored 1, now 2"):
        run(config(bench_table_path, methods=("ar",), batch_size=2), tmp_path, bench_pair)


def test_what_cannot_batch_is_refused_before_anything_runs(tmp_path, bench_pair, bench_table_path):
    with pytest.raises(ValueError, match=r"method 'mjsd' cannot batch \(batch size 4\): batched decoding runs ar "
                                         r"and the speculative methods whose drafter declares how its rows batch"):
        config(bench_table_path, methods=("ar", "mjsd"), batch_size=4)
    with pytest.raises(ValueError, match="'hf-ar' cannot batch"):
        config(bench_table_path, methods=("ar", "hf-ar"), batch_size=2)
    with pytest.raises(ValueError, match="gamma auto runs at batch size 1"):
        config(bench_table_path, methods=("ar", "prompt-lookup:gauto"), batch_size=2)
    with pytest.raises(ValueError, match="--batch-size must be an integer >= 1"):
        config(bench_table_path, batch_size=0)
    with pytest.raises(ValueError, match="drafters passed in .* run at batch size 1"):
        run(config(bench_table_path, methods=("ar", "prompt-lookup"), batch_size=2), tmp_path / "x", bench_pair,
            drafters={"prompt-lookup": PromptLookupDrafter()})
    assert not (tmp_path / "x").exists()


def test_bench_batch_size_flag_refuses_before_any_model_loads(tmp_path, capsys):
    from specrepro.run.commands import main
    assert main(["bench", "--methods", "ar,spectr", "--suite", "mixed", "--batch-size", "2",
                 "--out", str(tmp_path / "o"), "--draft", "layers:4"]) == 2
    assert "'spectr' cannot batch" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_batched_step_is_costed_at_its_padded_width():
    from specrepro.run.bench_session import cost_context
    prompts = [BenchPrompt(str(i), [1] * n) for i, n in enumerate((10, 50, 20, 30, 12, 14))]
    one = dict(methods=("ar",), target="t", max_new_tokens=8)
    assert len(cost_context(prompts, BenchConfig(**one), 2048, 5)) == 17 + 4  # median prompt + half the tokens
    # batches (10, 50), (20, 30), (12, 14): each step attends over its longest row; the median of those
    assert len(cost_context(prompts, BenchConfig(**one, batch_size=2), 2048, 5)) == 30 + 4
