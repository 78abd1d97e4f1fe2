"""The benchmark on a tiny model pair: files, summary arithmetic, resume after an interruption, refusals."""
from __future__ import annotations

import csv
import json

import pytest
import torch

from simulations.speculative import expected_tokens
from specrepro.drafters.ngram import target_corpus
from specrepro.run.bench import run_bench
from specrepro.run.bench_summary import SUMMARY_COLUMNS, predicted_from_steps, predicted_speedup, read_summary
from specrepro.run.bench_types import BenchPrompt
from specrepro.run.store import load_records
from specrepro.run.variants import BenchConfig, ResumeMismatch, Variant
from specrepro.methods import method
from specrepro.metrics.profile import Profile
from specrepro.core.config import DecodeConfig, SamplingConfig
from specrepro.engine.draft_model import draft_from_target
from specrepro.drafters import LMDrafter
from specrepro.run.generate import generate_ids
from specrepro.run.hf_baselines import as_assistant
from specrepro.engine.models import LoadedModel, layer_skip_draft, tiny_model

METHODS = ("ar", "speculative", "prompt-lookup", "bigram", "hf-ar", "hf-assisted", "hf-prompt-lookup")


from tests.helpers import run_tiny_bench, tiny_bench_config

pytestmark = pytest.mark.usefixtures("one_thread")


PROMPTS = [BenchPrompt("a", [5, 7, 9, 11, 5, 7]), BenchPrompt("b", [3, 4, 3, 4, 3]),
           BenchPrompt("c", [8, 1, 6, 1, 8, 1])]


def config(bench_table_path, **changes) -> BenchConfig:
    return tiny_bench_config(bench_table_path, **{"methods": METHODS, "repeats": 2, **changes})


def run(cfg, out, bench_pair, **kw):
    return run_tiny_bench(cfg, out, bench_pair, PROMPTS, **kw)


def test_writes_records_summary_provenance(tmp_path, bench_pair, bench_table_path):
    result = run(config(bench_table_path), tmp_path, bench_pair)
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert len(records) == len(METHODS) * len(PROMPTS) * 2
    assert records[0]["method"] == "ar" and [r["method"] for r in records[:len(METHODS)]] == list(METHODS)
    assert {r["seed"] for r in records} == {0, 1}  # seed = base seed + repeat
    for r in records:
        assert r["new_tokens"] == len(r["token_ids"]) and r["wall_time_s"] > 0
        assert r["alpha"] is None or 0 <= r["alpha"] <= 1

    with open(tmp_path / "summary.csv", newline="") as handle:
        rows = {row["method"]: row for row in csv.DictReader(handle)}
    assert set(rows) == set(METHODS) and set(SUMMARY_COLUMNS) <= set(next(iter(rows.values())))
    assert float(rows["ar"]["speedup"]) == 1.0
    by_method = {row["method"]: row for row in result.summary}
    spec = by_method["speculative"]
    recs = [r for r in records if r["method"] == "speculative"]
    tps = sum(r["new_tokens"] for r in recs) / sum(r["wall_time_s"] for r in recs)
    assert spec["tokens_per_s"] == pytest.approx(tps)
    assert spec["speedup"] == pytest.approx(tps / by_method["ar"]["tokens_per_s"])
    # The prediction charges each step its real proposal length g: Σ τ(α, g) tokens for Σ (g c L1 + L(g+1)).
    prov = json.loads((tmp_path / "provenance.json").read_text())
    profile = Profile.from_dict(prov["sessions"][0]["profiles"]["fp32"])
    steps = [g for r in recs for g in r["proposed_lengths"]]
    plain = sum(r["target_calls"] - len(r["proposed_lengths"]) for r in recs)
    assert steps and max(steps) == 3
    tokens = plain + sum(float(expected_tokens(spec["alpha"], g)) for g in steps)
    seconds = plain * profile.l_fp(1) + sum(g * spec["c"] * profile.l_fp(1) + profile.l_fp(g + 1) for g in steps)
    assert spec["predicted_speedup"] == pytest.approx(tokens * profile.l_fp(1) / seconds)
    assert spec["efficiency"] == pytest.approx(spec["speedup"] / spec["predicted_speedup"])
    assert spec["c"] == pytest.approx(profile.c) and spec["beta"] == pytest.approx(profile.beta(4))
    # With every step at γ the per-step prediction is the survey blog's closed form.
    assert predicted_from_steps(0.6, [3] * 5, 0, 0.2, profile, profile.l_fp(1)) == pytest.approx(
        predicted_speedup(0.6, 3, 0.2, profile.beta(4)))
    assert by_method["prompt-lookup"]["c"] == 0.0 and by_method["bigram"]["c"] == 0.0
    # T = 0: every method, ours or transformers', reproduces greedy decoding on this fp32 model.
    for method in METHODS[1:]:
        assert by_method[method]["identical_to_ar"] == 1.0, method
    for method in ("hf-ar", "hf-assisted", "hf-prompt-lookup"):
        assert by_method[method]["identical_to_counterpart"] == 1.0, method

    session = prov["sessions"][0]
    assert {"git_revision", "versions", "device", "cpu_kernel_flags", "threads", "seeds", "costs",
            "profiles"} <= set(session)
    assert session["threads"] == 1 and session["seeds"] == [0, 1]
    for when in ("host_speed_start", "host_speed_end"):  # the host's speed on a fixed workload, as it began and ended
        assert session[when]["read_gb_s"] > 0 and session[when]["python_loop_ms"] > 0
    assert session["costs"]["beta"] > 0 and session["costs"]["c"] > 0
    assert prov["config"]["methods"] == list(METHODS)
    assert {v["dtype"] for v in prov["resolved_dtypes"].values()} == {"fp32"}
    assert all(r["provenance"]["dtype"] in ("fp32", "float32") for r in records)


def test_interrupted_run_resumes_without_duplicates(tmp_path, bench_pair, bench_table_path):
    cfg = config(bench_table_path, methods=("ar", "prompt-lookup", "hf-ar"))

    def interrupt_after(k):
        seen = []
        def on_record(record):
            seen.append(record)
            if len(seen) == k:
                raise KeyboardInterrupt
        return on_record

    with pytest.raises(KeyboardInterrupt):
        run(cfg, tmp_path, bench_pair, on_record=interrupt_after(4))
    assert len(load_records(tmp_path)) == 4 and not (tmp_path / "summary.csv").exists()
    # A line cut off mid-write is dropped on resume, not duplicated or left to corrupt the file.
    with open(tmp_path / "records.jsonl", "a") as handle:
        handle.write('{"method": "ar", "prompt_')
    written = []
    result = run(cfg, tmp_path, bench_pair, on_record=written.append)
    keys = [(r["method"], r["prompt_id"], r["repeat"]) for r in load_records(tmp_path)]
    assert len(keys) == len(set(keys)) == 3 * len(PROMPTS) * 2
    assert len(written) == len(keys) - 4  # only the missing ones were run
    assert len(result.provenance["sessions"]) == 2
    run(cfg, tmp_path, bench_pair, on_record=written.append)  # complete: nothing more runs
    assert len(load_records(tmp_path)) == len(keys) and len(written) == len(keys) - 4


def test_refuses_to_resume_with_other_arguments(tmp_path, bench_pair, bench_table_path):
    cfg = config(bench_table_path, methods=("ar",), repeats=1)
    run(cfg, tmp_path, bench_pair)
    with pytest.raises(ResumeMismatch, match="max_new_tokens"):
        run(config(bench_table_path, methods=("ar",), repeats=1, max_new_tokens=9), tmp_path, bench_pair)
    target, draft = bench_pair
    with pytest.raises(ResumeMismatch, match="prompt_digest"):  # same arguments, other prompts
        run_bench(cfg, tmp_path, target=target, prompts=PROMPTS[:2], progress=False)
    retrained = LoadedModel("layers:1", layer_skip_draft(tiny_model(vocab_size=32, n_layers=2, hidden=16, seed=1), 1),
                            None)  # same name, other weights
    with pytest.raises(ResumeMismatch, match="weights_digest"):
        run(cfg, tmp_path, (target, retrained))


class BreaksOn(LMDrafter):
    """The draft model's chain, except that it raises on one prompt: a method with a bug."""

    def __init__(self, model, prompt: list[int]):
        super().__init__(model)
        self.prompt = prompt

    def propose(self, ids, gamma, sampling, generator):
        if ids[:len(self.prompt)] == self.prompt:
            raise RuntimeError("the drafter broke")
        return super().propose(ids, gamma, sampling, generator)


def test_a_failing_method_never_takes_the_others_down(tmp_path, bench_pair, bench_table_path, capsys):
    """speculative raises on prompt b, medusa cannot even be built (no heads for a tiny target): both are recorded
    as failed, with their errors in the result, the summary, the provenance and on stderr; every other method is
    written and summarised; a restart tries only the missing records again."""
    cfg = config(bench_table_path, methods=("ar", "speculative", "prompt-lookup", "medusa"), repeats=1)
    result = run(cfg, tmp_path, bench_pair, drafters={"speculative": BreaksOn(bench_pair[1].model, PROMPTS[1].ids)})
    assert set(result.failed) == {"speculative", "medusa"}
    assert result.failed["speculative"] == {"error": "RuntimeError", "message": "the drafter broke",
                                            "where": "prompt b, repeat 0"}
    assert "no medusa heads in the zoo for target 'tiny'" in result.failed["medusa"]["message"]
    assert "speculative failed (prompt b, repeat 0): RuntimeError: the drafter broke" in capsys.readouterr().err
    rows = {r["method"]: r for r in read_summary(tmp_path)}
    assert rows["ar"]["n"] == rows["prompt-lookup"]["n"] == len(PROMPTS) and rows["ar"]["error"] is None
    assert rows["speculative"]["n"] == 1 and rows["speculative"]["error"] == "RuntimeError: the drafter broke"
    assert rows["medusa"]["n"] == 0 and rows["medusa"]["error"].startswith("ValueError: no medusa heads")
    assert json.loads((tmp_path / "provenance.json").read_text())["failed"] == result.failed

    written = []
    again = run(cfg, tmp_path, bench_pair, on_record=written.append)  # speculative with its own drafter now
    assert [(r["method"], r["prompt_id"]) for r in written] == [("speculative", "b"), ("speculative", "c")]
    assert set(again.failed) == {"medusa"} and {r["method"]: r for r in again.summary}["speculative"]["n"] == 3


class PlainDraft(torch.nn.Module):
    """A draft our loop can run but transformers cannot assist with (no generate, no generation_config)."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.config = inner, inner.config

    def forward(self, **kwargs):
        return self.inner(**kwargs)


def test_hf_assisted_is_skipped_for_a_draft_transformers_cannot_run(tmp_path, bench_pair, bench_table_path):
    target, draft = bench_pair
    plain = LoadedModel("plain", PlainDraft(draft.model), None)
    cfg = config(bench_table_path, methods=("ar", "speculative", "hf-assisted"), repeats=1)
    result = run_bench(cfg, tmp_path, target=target, draft=plain, prompts=PROMPTS[:1], progress=False)
    rows = {r["method"]: r for r in result.summary}
    assert rows["speculative"]["n"] == 1 and rows["hf-assisted"]["n"] == 0
    assert "not a transformers generation model" in result.provenance["sessions"][0]["skipped"]["hf-assisted"]


def test_hf_assisted_runs_a_reduced_vocabulary_draft(tmp_path, bench_pair, bench_table_path):
    """transformers runs our reduced-vocabulary draft through a wrapper and, at T = 0, proposes and keeps
    what our loop does: the same tokens as greedy decoding."""
    target, _ = bench_pair
    reduced = draft_from_target(target.model, torch.arange(0, 32, 2), n_layers=1).eval().requires_grad_(False)
    assistant = as_assistant(reduced)
    ids = torch.tensor([PROMPTS[0].ids])  # [1, T]
    assert assistant.config.vocab_size == 32 and reduced.config.vocab_size == 17  # 16 kept + "other"
    assert torch.equal(assistant(input_ids=ids).logits, reduced(input_ids=ids).logits)
    # generate hands the draft its KV cache as ``cache``: the newest token, after the cached rest, scores as in
    # one forward over all of them (ignoring it would score the newest token without its context)
    from transformers import DynamicCache
    cache, kept = DynamicCache(config=reduced.config), torch.tensor([[2, 8, 4, 6, 10, 4]])  # ids the draft keeps
    assistant(input_ids=kept[:, :-1], cache=cache, use_cache=True)
    torch.testing.assert_close(assistant(input_ids=kept[:, -1:], cache=cache, use_cache=True).logits[0, -1],
                               reduced(input_ids=kept).logits[0, -1])
    cfg = config(bench_table_path, methods=("ar", "speculative", "hf-assisted"), repeats=1)
    result = run_bench(cfg, tmp_path, target=target, draft=LoadedModel("reduced", reduced, None),
                       prompts=PROMPTS, progress=False)
    rows = {r["method"]: r for r in result.summary}
    assert rows["hf-assisted"]["n"] == len(PROMPTS) and not result.provenance["sessions"][0]["skipped"]
    assert rows["hf-assisted"]["identical_to_ar"] == rows["hf-assisted"]["identical_to_counterpart"] == 1.0
    records = [r for r in load_records(tmp_path) if r["method"] == "hf-assisted"]
    assert all(r["draft_calls"] > 0 for r in records)
    # Sampling: transformers divides p by the q of each proposed token; the -inf logits outside the kept
    # ids give q = 0 only where nothing is ever proposed.
    sampled = run_bench(config(bench_table_path, methods=("ar", "hf-assisted"), repeats=1, temperature=1.0),
                        tmp_path / "t1", target=target, draft=LoadedModel("reduced", reduced, None),
                        prompts=PROMPTS, progress=False)
    assert {r["method"]: r["n"] for r in sampled.summary}["hf-assisted"] == len(PROMPTS)
    assert all(0 <= t < 32 for r in load_records(tmp_path / "t1") for t in r["token_ids"])


def test_config_validation(bench_table_path):
    with pytest.raises(ValueError, match="unknown method"):
        config(bench_table_path, methods=("ar", "no-such-method"))
    with pytest.raises(ValueError, match="twice"):
        config(bench_table_path, methods=("ar", "ar"))


def test_variants_run_side_by_side_at_their_own_dtype_and_gamma(tmp_path, bench_pair, bench_table_path):
    """One run, several (dtype, γ) variants: each labelled row at its dtype; auto dtypes resolved from the
    session's profiles with the reason kept; gamma auto records the γ of every step."""
    methods = ("ar", "ar:bf16", "speculative:g1", "speculative:bf16:g2", "prompt-lookup:gauto", "speculative:auto:gauto")
    result = run(config(bench_table_path, methods=methods, repeats=1), tmp_path, bench_pair)
    rows = {r["method"]: r for r in result.summary}
    assert rows["ar:bf16"]["dtype"] == "bf16" and rows["speculative:g1"]["dtype"] == "fp32"
    assert rows["speculative:g1"]["gamma"] == 1 and rows["prompt-lookup:gauto"]["gamma"] == "auto"
    assert rows["speculative:g1"]["identical_to_ar"] == 1.0  # fp32 against the fp32 ar
    resolved = result.provenance["resolved_dtypes"]
    assert resolved["speculative:auto:gauto"]["dtype"] in ("bf16", "fp32")
    assert "fastest" in resolved["speculative:auto:gauto"]["reason"]
    assert set(result.provenance["sessions"][0]["profiles"]) == {"bf16", "fp32"}
    recs = [r for r in load_records(tmp_path) if r["method"] == "prompt-lookup:gauto"]
    assert all(len(r["gammas"]) == r["target_calls"] and all(g >= 0 for g in r["gammas"]) for r in recs)
    assert recs[0]["provenance"]["gamma_policy"]["policy"].startswith("adaptive")
    assert all(r["base_method"] == "prompt-lookup" for r in recs)


def test_variant_labels_are_checked():
    assert Variant.parse("speculative:fp32:g2", None, 4) == Variant("speculative:fp32:g2", method("speculative"),
                                                                    "fp32", 2)
    assert Variant.parse("ar", "auto", 4).dtype == "auto"
    with pytest.raises(ValueError, match="bad field"):
        Variant.parse("speculative:g0", None, 4)
    with pytest.raises(ValueError, match="unknown method"):
        Variant.parse("no-such-method:fp32", None, 4)
    with pytest.raises(ValueError, match="fixed γ"):
        Variant.parse("hf-assisted:gauto", None, 4)
    assert Variant.parse("medusa:bf16:t24", None, 3).tree_size == 24
    with pytest.raises(ValueError, match="token-tree drafters"):
        Variant.parse("speculative:t8", None, 4)
    assert Variant.parse("eagle:fp32:compiled", None, 4).compiled and not Variant.parse("eagle:fp32", None, 4).compiled
    with pytest.raises(ValueError, match="compiled is for our loops"):
        Variant.parse("hf-assisted:compiled", None, 4)


def test_target_corpus_is_what_the_target_generates(bench_pair):
    target, _ = bench_pair
    greedy = target_corpus(target, PROMPTS, 6, SamplingConfig(temperature=0.0), batch_size=2)
    assert len(greedy) == len(PROMPTS)
    for prompt, seq in zip(PROMPTS, greedy):  # left padding changes nothing: greedy continuations match ours
        ar = generate_ids(target, prompt.ids, DecodeConfig(method="ar", max_new_tokens=6)).token_ids
        assert seq == ar[:len(seq)] and 2 not in seq  # cut before EOS (id 2 in the tiny config)
    sampled = target_corpus(target, PROMPTS, 6, SamplingConfig(temperature=1.0), seed=1)
    assert sampled == target_corpus(target, PROMPTS, 6, SamplingConfig(temperature=1.0), seed=1)
    assert all(0 <= t < 32 for seq in sampled for t in seq)


def test_cli_accepts_the_make_bench_arguments():
    from specrepro.run.commands import build_parser
    args = build_parser().parse_args(
        "bench --methods ar,speculative,prompt-lookup,hf-assisted,hf-prompt-lookup --target smollm2-135m-instruct "
        "--draft smollm2-135m-draft --suite mixed --max-new-tokens 64 --temperature 0 --gamma 4 --repeats 1 "
        "--out figures/bench".split())
    assert args.func.__name__ == "cmd_bench" and args.suite == "mixed" and args.gamma == 4


def test_the_summary_speedups_are_the_pooled_and_the_median_ratio():
    """Hand-made records where the two differ (one long prompt slower than AR, two short ones faster): ``speedup``
    is the pooled tokens/s ratio, ``speedup_median`` the median of paired ratios, and the printed table says so."""
    from specrepro.core import stats
    from specrepro.run.bench_summary import format_summary, summarize
    walls = {"ar": {"a": 2.0, "b": 3.0, "c": 25.0}, "speculative": {"a": 1.0, "b": 1.0, "c": 50.0}}
    tokens = {"a": 10, "b": 10, "c": 100}
    records = [{"method": m, "prompt_id": p, "repeat": 0, "new_tokens": tokens[p], "wall_time_s": walls[m][p],
                "token_ids": [1] * tokens[p], "target_calls": tokens[p], "accept_lengths": [],
                "proposed_lengths": []} for m in walls for p in tokens]
    variants = [Variant.parse(label, "fp32", 4) for label in walls]
    rows = {r["method"]: r for r in summarize(records, variants, False, {}, "ar")}
    spec = rows["speculative"]
    assert spec["speedup"] == pytest.approx((120 / 52) / (120 / 30))  # pooled: the long prompt dominates
    assert spec["speedup_median"] == pytest.approx(2.0)  # paired ratios 2, 3 and 0.5
    assert rows["ar"]["speedup"] == rows["ar"]["speedup_median"] == 1.0
    caption = format_summary(list(rows.values())).splitlines()[-1]
    assert f"speedup: {stats.POOLED_RATIO}" in caption and f"speedup_median: {stats.MEDIAN_OF_RATIOS}" in caption
