"""specrepro.studies.mjsd: the MJSD paper's numbers, the labels that carry each method's parameters, the validation
choice and the tables and claims built from bench results (hand-made, and one tiny bench of the labels)."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from specrepro.metrics.verdict import MIN_PROMPTS
from specrepro.run.bench import run_bench
from specrepro.run.bench_types import BenchPrompt, BenchResult
from specrepro.run.variants import BenchConfig
from specrepro.studies import mjsd
from tests.helpers import loaded

pytestmark = pytest.mark.usefixtures("one_thread")


def test_table5_constants_and_the_papers_averages():
    assert (mjsd.GAMMA, mjsd.BILD_GAMMA, mjsd.BEAMS, mjsd.TAU, mjsd.TAU1, mjsd.TAU2, mjsd.SPECTR_M) == \
        (4, 10, 8, 0.1, 0.9, 2.0, 4)
    assert mjsd.PAPER_T5["MJSD beams"][0] == mjsd.BEAMS and mjsd.PAPER_T5["BiLD fallback τ1"][0] == mjsd.TAU1
    # Table 2's columns average to the abstract's and §5.1's statements (their rounding)
    assert mjsd.paper_mean("speed", "MJSD", "greedy") == pytest.approx(mjsd.PAPER_CLAIMS["mjsd_speedup"], abs=0.02)
    assert mjsd.paper_mean("speed", "MJSD", "speculative") == pytest.approx(1.49, abs=0.02)
    assert mjsd.paper_mean("energy", "greedy", "MJSD") == pytest.approx(2.84, abs=0.05)


def test_labels():
    assert mjsd.bild_label(0.9, 2.0) == "bild:g10:f0.9:r2" and mjsd.spectr_label(2) == "spectr:g4:m2"
    assert mjsd.mjsd_label() == "mjsd:g4:b8:tau0.1" and mjsd.mjsd_label(tau=1.0) == "mjsd:g4:b8:tau1"
    assert mjsd.mjgd_label(3) == "mjgd:g3:b8"
    assert list(mjsd.table2_variants({"tau1": 0.3, "tau2": 1.0, "m": 2}).values()) == list(mjsd.METHODS5)


def test_labels_carry_the_parameters_into_a_bench(tmp_path, tiny_pair):
    target, draft = (loaded(m) for m in tiny_pair)
    labels = ["ar", mjsd.bild_label(0.3, 1.0, gamma=2), mjsd.spectr_label(2, gamma=2),
              mjsd.mjsd_label(beams=2, tau=0.1, gamma=2)]  # sampled (mjgd runs at T = 0 only)
    config = BenchConfig(methods=tuple(labels), target="tiny", draft="tiny-draft", prompts="test", max_new_tokens=4,
                         gamma=2, temperature=1.0, warmup_tokens=0, cost_repeats=1, quality=False)
    result = run_bench(config, tmp_path, target=target, draft=draft, prompts=[BenchPrompt("a", [1, 2, 3])],
                       progress=False)
    assert [r["method"] for r in result.records] == labels and all(r["new_tokens"] == 4 for r in result.records)


def result_of(summary, records=()):
    return BenchResult(out=None, records=list(records), summary=summary, provenance={})


def row(label, **values):
    base = {"method": label, "perplexity": 2.0, "rouge_l": 0.2, "tokens_per_call": 1.5, "new_tokens": 8,
            "tokens_per_s": 10.0, "speedup": 1.0, "joules_per_token": None, "lossless": True, "n": 1,
            "identical_to_ar": None}
    return base | values


def test_validation_picks_the_lowest_perplexity():
    grid = result_of([row(mjsd.bild_label(0.3, 1.0), perplexity=3.0), row(mjsd.bild_label(0.9, 1.0), perplexity=2.5),
                      row(mjsd.spectr_label(2), perplexity=2.0), row(mjsd.spectr_label(4), perplexity=2.2)])
    rows, chosen = mjsd.validation_rows(grid, "chat", [(0.3, 1.0), (0.9, 1.0)], [2, 4])
    assert chosen == {"tau1": 0.9, "tau2": 1.0, "m": 2} and len(rows) == 4 and rows[0]["kind"] == "chat"
    table5 = mjsd.table5_rows({"chat": ("CA", "ChatAlpaca", "multi-turn chat")}, {"chat": chosen})
    by = {r["hyper-parameter"]: r for r in table5}
    assert by["SpecTr m"]["ours CA (chat)"] == 2 and by["SpecTr m"]["how_chosen"] == "best validation perplexity"
    assert by["MJSD beams"]["paper Llama CP"] == 8 and by["MJSD τ"]["ours CA (chat)"] == mjsd.TAU


def kind_result(chosen, mjsd_tps=30.0):
    labels = mjsd.table2_variants(chosen)
    tps = dict(zip(labels, (10.0, 20.0, 15.0, 18.0, mjsd_tps)))
    summary = [row(label, tokens_per_s=tps[label], speedup=tps[label] / 10,
                   perplexity=1.5 if label.startswith("mjsd") else 2.0,
                   tokens_per_call=2.0 if label.startswith(("mjsd", "spectr")) else 1.5) for label in labels]
    records = [{"method": "speculative:g4", "accept_lengths": [1, 1, 2]},
               {"method": mjsd.mjsd_label(), "accept_lengths": [2, 4]}]
    return result_of(summary, records)


def test_table2_fig3_and_claims():
    chosen = {"tau1": 0.9, "tau2": 2.0, "m": 4}
    results = {"instruct": kind_result(chosen)}
    table2 = mjsd.table2_rows("instruct", results["instruct"], chosen, "ours")
    ours = [r for r in table2 if r["source"] == "ours"]
    assert len(ours) == 5 and len(table2) == 5 + 10 and ours[-1]["speed_over_speculative"] == 1.5
    assert ours[0]["method"] == "AR sampling (the paper's 'greedy')" and ours[2]["variant"] == "bild:g10:f0.9:r2"
    spec = mjsd.accepted_per_iteration(results["instruct"], "speculative:g4")
    fig3 = [mjsd.fig3_row("instruct", spec, mjsd.accepted_per_iteration(results["instruct"], mjsd.mjsd_label()))]
    assert fig3[0]["ratio_mjsd_over_speculative"] == pytest.approx(3 / (4 / 3))
    table1 = [{"source": "ours", "batch_size": 1, "time_per_run_vs_b1": 1.0},
              {"source": "ours", "batch_size": 2, "time_per_run_vs_b1": 1.2}]
    prompts = [f"p{i}" for i in range(MIN_PROMPTS)]  # as few as a claim may rest on
    records = [prompt_record(label, pid) for pid in prompts
               for label in mjsd.table2_variants(chosen)]
    fig1 = result_of([], [{"method": mjsd.mjgd_label(k), "prompt_id": pid, "nll_sum": 8.0 / k, "nll_tokens": 8}
                          for pid in prompts for k in (1, 2, 3)])
    rows, verdicts = mjsd.claims({"instruct": result_of([], records)}, {"instruct": chosen}, fig1, (1, 2, 3),
                                 table1, "none")
    claims = {c["claim"]: c for c in rows}
    by_id = {v.claim: v for v in verdicts}
    speedup = by_id["mjsd.speedup_over_ar_sampling"]  # 3x on every prompt: the interval is that point
    assert speedup.verdict == "holds" and speedup.estimate == pytest.approx(3.0) and speedup.n == f"{MIN_PROMPTS} prompts"
    assert claims["MJSD speedup over AR sampling ('greedy')"]["paper"].startswith("2.21x")
    ppl = by_id["mjsd.perplexity_vs_ar_sampling"]  # NLL 0.5 lower per token: exp(-0.5) - 1 = -39%
    assert ppl.estimate == pytest.approx(math.exp(-0.5) - 1) and ppl.verdict == "holds"
    assert by_id["mjsd.speed_over_speculative"].verdict == "holds"  # 30 / 20 = 1.5 >= 1.3
    assert by_id["mjsd.accepted_per_iteration_over_speculative"].estimate == pytest.approx(3 / (4 / 3))
    energy = claims["AR sampling's energy per token over MJSD's"]
    assert energy["ours"] == "none" and energy["verdict"].startswith("not decided") and energy["claim_id"] == ""
    assert by_id["mjsd.mjgd_perplexity_falls_with_k"].verdict == "holds"
    assert len(rows) == 9 and len(verdicts) == 7 and "mjsd.energy_ar_over_mjsd" not in by_id


def test_speed_claims_keep_the_mean_of_paired_ratios():
    """The paper averages per-prompt speedups, so the speed claims are the mean of paired ratios, not the bench's
    pooled tokens/s ratio: one long prompt 6x as fast moves the mean (the others at 3x) and the pooled ratio apart."""
    from specrepro.core import stats
    chosen = {"tau1": 0.9, "tau2": 2.0, "m": 4}
    prompts = [f"p{i}" for i in range(MIN_PROMPTS)]  # as few as a claim may rest on
    records = [prompt_record(label, pid) for pid in prompts for label in mjsd.table2_variants(chosen)]
    long = next(r for r in records if r["prompt_id"] == "p0" and r["method"] == mjsd.mjsd_label())
    long.update(new_tokens=80, wall_time_s=80 / 60.0)
    fig1 = result_of([], [{"method": mjsd.mjgd_label(k), "prompt_id": pid, "nll_sum": 8.0 / k, "nll_tokens": 8}
                          for pid in prompts for k in (1, 2, 3)])
    table1 = [{"source": "ours", "batch_size": 1, "time_per_run_vs_b1": 1.0}]
    _, verdicts = mjsd.claims({"instruct": result_of([], records)}, {"instruct": chosen}, fig1, (1, 2, 3), table1,
                              "none")
    x, _ = mjsd.prompt_array({"instruct": result_of([], records)}, lambda k: (mjsd.mjsd_label(), "ar"),
                             ("new_tokens", "wall_time_s"))
    speedup = next(v for v in verdicts if v.claim == "mjsd.speedup_over_ar_sampling")
    n = MIN_PROMPTS
    assert speedup.estimate == pytest.approx((3 * (n - 1) + 6) / n) == stats.mean_of_ratios(x)
    assert stats.pooled_ratio(x) == pytest.approx((80 + 8 * (n - 1)) / (80 / 60 + (n - 1) * 8 / 30) / 10)  # AR: 10/s


def prompt_record(label, prompt_id):
    """A prompt's record: MJSD 3x AR sampling's tokens/s, speculative 2x; MJSD's NLL 0.5 nats lower per token."""
    speed = {"ar": 10.0, "speculative:g4": 20.0}.get(label, 30.0 if label.startswith("mjsd") else 15.0)
    accepted = {"speculative:g4": [1, 1, 2], mjsd.mjsd_label(): [2, 4]}.get(label, [])
    return {"method": label, "prompt_id": prompt_id, "new_tokens": 8, "wall_time_s": 8 / speed,
            "nll_sum": 8 * (1.0 if label.startswith("mjsd") else 1.5), "nll_tokens": 8,
            "target_calls": 4 if label.startswith(("mjsd", "spectr")) else 5, "accept_lengths": accepted,
            "energy_j": None}


def test_fig1_table3_fig4_pick_their_labels():
    summary = [row(mjsd.mjgd_label(k), perplexity=4.0 - k, tokens_per_call=float(k)) for k in (1, 2)]
    summary += [row(mjsd.mjsd_label(beams=b), tokens_per_s=float(b)) for b in (2, 8)]
    summary += [row(mjsd.mjsd_label(tau=t), perplexity=1 + t) for t in (0.0, 1.0)]
    result = result_of(summary)
    assert [r["target_calls_per_token"] for r in mjsd.fig1_rows(result, (1, 2))] == [1.0, 0.5]
    table3 = mjsd.table3_rows(result, (2, 8), "ours")
    assert [r["tokens_per_s"] for r in table3[:2]] == [2.0, 8.0] and len(table3) == 2 + 8
    assert [r["perplexity"] for r in mjsd.fig4_rows(result, (0.0, 1.0))] == [1.0, 2.0]


def test_table1_relative_to_one_input():
    cell = SimpleNamespace(latency=SimpleNamespace(median_s=0.5), energy_j=None)
    batching = SimpleNamespace(cell=lambda b, n: cell, beta=lambda b, n: 1.5,
                               table1=lambda: [{"batch_size": b, "time_per_run_s": 0.5 * (1 + b / 10),
                                                "energy_per_run_j": None} for b in (1, 2)])
    table = mjsd.table1_rows(batching, "ours")
    assert table[1]["time_per_run_vs_b1"] == pytest.approx(1.2) and table[1]["beta_b_5"] == 1.5
    assert table[0]["energy_per_run_vs_b1"] is None and len(table) == 2 + len(mjsd.PAPER_T1)


def sweep_record(label, prompt_id, speed, nll):
    return {"method": label, "prompt_id": prompt_id, "new_tokens": 8, "wall_time_s": 8 / speed, "nll_sum": 8 * nll,
            "nll_tokens": 8, "accept_lengths": []}


@pytest.mark.parametrize("opposite", [False, True])
def test_table3_and_fig4_are_decided_on_paired_intervals_and_fail_the_other_way(opposite):
    """More beams: lower NLL and faster; larger τ: slower, and NLL up near τ = 1. The opposite on every prompt fails
    each compound claim; chat prompts without the sweep's variants are left out."""
    beams, taus = (2, 8), (0.0, 0.1, 0.5, 1.0)
    sign = -1 if opposite else 1
    records = []
    for i in range(MIN_PROMPTS):
        pid = f"p{i}"
        records += [sweep_record(mjsd.mjsd_label(beams=2), pid, 10, 1.5),
                    sweep_record(mjsd.mjsd_label(beams=8), pid, 10 + sign * 2, 1.5 - sign * 0.2)]  # also τ = 0.1
        records += [sweep_record(mjsd.mjsd_label(tau=t), pid, 20 - sign * 10 * t, 1.2 + sign * (t == 1.0) * 0.3)
                    for t in taus if t != 0.1]
    results = {"instruct": result_of([], records), "chat": result_of([], [sweep_record("ar", "c0", 10, 1.0)])}
    rows, verdicts = mjsd.sweep_claims(results, beams, taus)
    by_id = {v.claim: v for v in verdicts}
    assert set(by_id) == {"mjsd.more_beams_better", "mjsd.threshold_effect"}
    expected = "fails" if opposite else "holds"
    assert {v.verdict for v in verdicts} == {expected}
    parts = {p.claim: p for v in verdicts for p in v.parts}
    assert parts["mjsd.beams_speed_ratio"].estimate == pytest.approx(1.2 if not opposite else 0.8)
    assert parts["mjsd.tau_speed_ratio"].n == f"{MIN_PROMPTS} prompts"  # the chat prompt is not among them
    assert all(r["claim_id"] in by_id and r["verdict"] == expected for r in rows)
    assert rows[0]["threshold"] == "≤ +0.0%; ≥ 1.00x"


def test_sweep_claims_without_the_sweeps_records_are_not_decided():
    rows, verdicts = mjsd.sweep_claims({"instruct": result_of([], [])}, (2, 8), (0.0, 0.5, 1.0))
    assert verdicts == [] and all(r["verdict"].startswith("not decided") for r in rows)
