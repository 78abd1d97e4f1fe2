"""The MJSD paper's methods wired through the one registry: generate, the command line and the bench.

The rules and drafters are tested on their own in test_mjsd.py, test_mjgd.py, test_spectr.py and test_bild.py;
here: each method runs through ``generate_ids`` with its own rule and parameters, records say which rules are
lossy, the bench scores quality and energy, and bad parameters get one clear error.
"""
from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from specrepro.run.commands import build_parser, main, sampling_from
from specrepro.run.bench import run_bench
from specrepro.run.bench_types import BenchPrompt
from specrepro.run.variants import BenchConfig, Variant
from specrepro.core.config import PRESETS, DecodeConfig, SamplingConfig
from specrepro.methods import REGISTRY, method
from specrepro.run.generate import generate_ids
from specrepro.metrics.quality import PromptScorer
from specrepro.engine.models import LoadedModel, layer_skip_draft, tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def pair():
    target = LoadedModel("tiny", tiny_model(vocab_size=32, n_layers=2, hidden=16, seed=0), None)
    return target, LoadedModel("layers:1", layer_skip_draft(target.model, 1), None)


@pytest.mark.parametrize("method, rule, lossless", [("mjsd", "mjsd", False), ("bild", "bild", False),
                                                    ("spectr", "spectr", True), ("multi-draft", "exact", True),
                                                    ("mentored", "mentored", False)])
def test_each_method_verifies_with_its_own_rule_and_records_it(pair, method, rule, lossless):
    target, draft = pair
    params = REGISTRY[method].params_from(dict(num_beams=3, tau=0.2, num_drafts=2, fallback_threshold=0.2,
                                               rollback_threshold=3.0))
    config = DecodeConfig(method=method, max_new_tokens=12, gamma=3, sampling=PRESETS["mjsd"], seed=1, params=params)
    rec = generate_ids(target, [1, 2, 3, 4], config, draft=draft)
    assert rec.new_tokens == 12 and rec.config["acceptance"] == rule
    assert rec.provenance["acceptance"]["name"] == rule and rec.provenance["acceptance"]["lossless"] is lossless
    assert rec.config["params"] == dataclasses.asdict(params) and rec.provenance["method"]["rule"] == (
        None if method == "multi-draft" else rule)
    assert rec.config["params"].get("num_beams", 3) == 3 and rec.config["params"].get("num_drafts", 2) == 2
    if method == "mjsd":
        assert rec.provenance["acceptance"]["params"]["tau"] == 0.2
    if method == "bild":
        assert rec.provenance["acceptance"]["params"]["rollback_threshold"] == 3.0


def test_a_method_with_its_own_rule_refuses_another(pair):
    target, draft = pair
    with pytest.raises(ValueError, match="verifies with its own rule 'mjsd', not 'typical'"):
        generate_ids(target, [1, 2, 3], DecodeConfig(method="mjsd", acceptance="typical", max_new_tokens=4,
                                                     sampling=PRESETS["mjsd"]), draft=draft)


def test_mjgd_runs_from_the_registry_with_k_from_gamma(pair):
    target, _ = pair
    greedy = generate_ids(target, [1, 2, 3], DecodeConfig(method="ar", max_new_tokens=9))
    k1 = generate_ids(target, [1, 2, 3], DecodeConfig(method="mjgd", gamma=1, max_new_tokens=9))
    k3 = generate_ids(target, [1, 2, 3], DecodeConfig(method="mjgd", gamma=3, max_new_tokens=9,
                                                      params=method("mjgd").params(num_beams=4)))
    assert k1.token_ids == greedy.token_ids and k3.provenance["mjgd"] == {"k": 3, "num_beams": 4}
    with pytest.raises(ValueError, match="integer gamma"):
        generate_ids(target, [1, 2, 3], DecodeConfig(method="mjgd", gamma="auto", max_new_tokens=4))


@pytest.mark.parametrize("params, message", [
    (dict(tau=1.5), "tau"), (dict(tau=-0.1), "tau"), (dict(num_beams=0), "num_beams"),
    (dict(num_drafts=0), "num_drafts"), (dict(fallback_threshold=-0.1), "fallback_threshold"),
    (dict(rollback_threshold=-1.0), "rollback_threshold"), (dict(rollback_threshold=math.inf), "rollback_threshold"),
    (dict(kl_bound=-0.1), "kl_bound"), (dict(kl_bound=math.nan), "kl_bound"), (dict(kl_bound=math.inf), "kl_bound")])
def test_bad_parameters_get_one_clear_error(params, message):
    (name,) = params
    owner = next(m for m in REGISTRY.values() if name in {f.name for f in m.param_fields()})
    with pytest.raises(ValueError, match=message):
        owner.params(**params)


def test_preset_mjsd_is_the_papers_warping_and_conflicts_with_explicit_knobs(capsys):
    assert PRESETS["mjsd"] == SamplingConfig(temperature=1.0, top_k=20, top_p=0.9)
    parser = build_parser()
    args = parser.parse_args(["generate", "--prompt", "x", "--preset", "mjsd"])
    assert sampling_from(args) == PRESETS["mjsd"]
    assert sampling_from(parser.parse_args(["generate", "--prompt", "x"])) == SamplingConfig()
    assert main(["generate", "--prompt", "x", "--preset", "mjsd", "--top-k", "5"]) == 2
    assert "--preset mjsd sets the warping; drop --top-k" in capsys.readouterr().err


def test_variant_fields_for_beams_drafts_and_tau():
    v = Variant.parse("mjsd:b4:tau0.5", None, 4)
    assert dict(v.params) == {"num_beams": 4, "tau": 0.5}
    assert dict(Variant.parse("spectr:m2:fp32", None, 4).params) == {"num_drafts": 2}
    assert dict(Variant.parse("bild:g10:f0.3:r1", None, 4).params) == {"fallback_threshold": 0.3,
                                                                        "rollback_threshold": 1.0}
    with pytest.raises(ValueError, match="fallback_threshold"):
        Variant.parse("bild:f1.5", None, 4)
    with pytest.raises(ValueError, match="tau"):
        Variant.parse("mjsd:tau2", None, 4)
    with pytest.raises(ValueError, match="acceptance rule is for our speculative loop"):
        Variant.parse("mjgd:typical", None, 4)


def test_bench_scores_quality_and_energy_and_labels_lossy_rules(tmp_path, pair):
    target, draft = pair
    prompts = [BenchPrompt("a", [5, 7, 9, 11, 5, 7], reference=None), BenchPrompt("b", [3, 4, 3, 4, 3])]
    settings = dict(target="tiny", draft="layers:1", prompts="test", max_new_tokens=6, gamma=2, temperature=1.0,
                    top_k=20, top_p=0.9, preset="mjsd", repeats=1, warmup_tokens=0, cost_repeats=1)
    # MJGD searches for the argmax: it runs at T = 0 only, so a sampled bench refuses it before running anything.
    with pytest.raises(ValueError, match="temperature 0"):
        BenchConfig(methods=("ar", "mjgd:g2"), **settings)
    cfg = BenchConfig(methods=("ar", "speculative", "mjsd:b2", "spectr:m2", "bild"), **settings)
    result = run_bench(cfg, tmp_path / "t1b", target=target, draft=draft, prompts=prompts, progress=False)
    rows = {r["method"]: r for r in result.summary}
    assert rows["ar"]["lossless"] and rows["speculative"]["lossless"] and rows["spectr:m2"]["lossless"]
    assert rows["mjsd:b2"]["lossless"] is False and rows["bild"]["lossless"] is False
    records = [json.loads(line) for line in (tmp_path / "t1b" / "records.jsonl").read_text().splitlines()]
    for r in records:  # the record's perplexity is Eq. (1) under the target, recomputed here
        ppl = PromptScorer(target.model)(next(p.ids for p in prompts if p.id == r["prompt_id"]), r["token_ids"])
        assert r["nll_tokens"] == ppl.n and r["nll_sum"] == pytest.approx(ppl.mean_nll * ppl.n)
        # each record carries its own method's parameters only: the label's, else the method's defaults
        assert r["config"]["params"] == {"mjsd:b2": {"num_beams": 2, "tau": 0.1}, "spectr:m2": {"num_drafts": 2},
                                         "bild": {"fallback_threshold": 0.9, "rollback_threshold": 2.0}
                                         }.get(r["method"], {})
    ar = [r for r in records if r["method"] == "ar"]
    assert rows["ar"]["perplexity"] == pytest.approx(math.exp(sum(r["nll_sum"] for r in ar) /
                                                              sum(r["nll_tokens"] for r in ar)))
    session = result.provenance["sessions"][-1]
    if session["energy"]["source"] == "none":  # no counter on this machine: empty column, the reason recorded
        assert rows["ar"]["joules_per_token"] is None and session["energy"]["reason"]
        assert all(r["energy_j"] is None and r["energy"]["reason"] for r in records)
    else:
        assert rows["ar"]["joules_per_token"] > 0
    assert result.provenance["t0_mismatches"] == []  # sampled: no T = 0 cross-check


def test_t0_cross_check_skips_lossy_methods(tmp_path, pair):
    target, draft = pair
    cfg = BenchConfig(methods=("ar", "mjgd:g3", "mjsd", "spectr:m2"), target="tiny", draft="layers:1",
                      prompts="test", max_new_tokens=8, gamma=3, repeats=1, warmup_tokens=0, cost_repeats=1,
                      params=(("num_beams", 2),))  # --num-beams 2: every method of the run that takes it
    result = run_bench(cfg, tmp_path, target=target, draft=draft, prompts=[BenchPrompt("a", [5, 7, 9, 11])],
                       progress=False)
    rows = {r["method"]: r for r in result.summary}
    assert rows["mjgd:g3"]["lossless"] is False and rows["mjgd:g3"]["predicted_speedup"] is None
    assert rows["spectr:m2"]["identical_to_ar"] == 1.0  # the fraction of records token-identical to AR
    assert not any(line.startswith(("mjgd", "mjsd")) for line in result.provenance["t0_mismatches"])


@pytest.mark.parametrize("method", ["staged", "fused"])
def test_staged_and_fused_from_the_registry_are_token_identical_to_ar_at_t0(pair, method):
    target, draft = pair
    prompt = [5, 7, 9, 5, 7, 9, 5, 7]  # repetitive: prompt lookup finds matches
    ar = generate_ids(target, prompt, DecodeConfig(method="ar", max_new_tokens=12))
    rec = generate_ids(target, prompt, DecodeConfig(method=method, gamma=4, max_new_tokens=12), draft=draft)
    assert rec.token_ids == ar.token_ids and rec.provenance["acceptance"]["lossless"]


def test_mentored_at_d0_is_speculative_sampling_and_labelled_lossless(pair):
    """D = 0: the same tokens as speculative sampling at the same seed, and the record says lossless."""
    target, draft = pair
    runs = {}
    for method, bound in (("speculative", 0.1), ("mentored", 0.0), ("mentored", 0.5)):
        config = DecodeConfig(method=method, gamma=3, max_new_tokens=16, sampling=SamplingConfig(temperature=1.0),
                              seed=3, params=REGISTRY[method].params_from({"kl_bound": bound}))
        runs[method, bound] = generate_ids(target, [1, 2, 3, 4], config, draft=draft)
    assert runs["mentored", 0.0].token_ids == runs["speculative", 0.1].token_ids
    assert runs["mentored", 0.0].provenance["acceptance"]["lossless"] is True
    assert runs["mentored", 0.5].provenance["acceptance"]["lossless"] is False
    assert dict(Variant.parse("mentored:kl0.05", None, 4).params) == {"kl_bound": 0.05}


def test_online_from_the_registry_learns_on_a_copy_of_the_draft(pair):
    """The registry's online drafter trains a copy: the draft other methods of the same run use stays frozen."""
    from specrepro.methods import drafter_for
    target, draft = pair
    before = {k: v.clone() for k, v in draft.model.state_dict().items()}
    config = DecodeConfig(method="online", gamma=3, max_new_tokens=8, sampling=SamplingConfig(temperature=1.0))
    drafter = drafter_for(draft, "online", target, config)
    drafter.learner.config = dataclasses.replace(drafter.learner.config, update_every=1)
    for seed in range(2):
        generate_ids(target, [1, 2, 3, 4], dataclasses.replace(config, seed=seed), draft=drafter)
    drafter.reset()  # closes the last sequence: an update
    assert drafter.learner.updates >= 1
    assert all(torch.equal(before[k], v) for k, v in draft.model.state_dict().items())
