"""The device profile (issue 12): round trip, cache keys, dtype choice, adaptive γ, bad input."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

import simulations as sim
from specrepro import DecodeConfig, generate_ids
from specrepro.decode.adaptive import AdaptiveGamma, FixedGamma
from specrepro.drafters import LMDrafter, PromptLookupDrafter
from specrepro.metrics import calibrate as cal
from specrepro.metrics import profile as prof
from specrepro.metrics.calibrate import measure
from specrepro.metrics.profile import Latency, choose_dtype, load_profile, save_profile
from specrepro.engine.models import tiny_model
from tests.helpers import fake_profile, loaded, profile_key

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def measured():
    target, draft = tiny_model(vocab_size=32, n_layers=2, hidden=16), tiny_model(vocab_size=32, n_layers=1, hidden=16)
    return measure(target, draft, list(range(20)), profile_key(contexts=(40, 600), prefill_sizes=(8, 16, 900)),
                   ns=(1, 2, 3, 5, 8), repeats=2, warmup=1)


def test_profile_round_trips_and_reads_its_numbers(tmp_path, measured):
    path = save_profile(measured, tmp_path / "p.json")
    back = load_profile(path, measured.key)
    assert back == measured
    assert [n for n, _ in back.forward] == [1, 2, 3, 5, 8]
    assert back.beta(1) == 1.0 and back.c == pytest.approx(measured.draft_decode.median_s / measured.decode_s)
    # Linear between measured sizes; β curve for the simulators agrees.
    assert back.l_fp(4) == pytest.approx((back.l_fp(3) + back.l_fp(5)) / 2)
    assert back.beta_curve()(4) == pytest.approx(back.beta(4))
    for _, lat in back.forward:
        assert 0 < lat.p25_s <= lat.median_s <= lat.p75_s


def test_longer_contexts_and_prefill_are_measured_and_read(tmp_path, measured):
    """The profile times the step after each longer context that fits the model (40; 600 + 8 does not fit in 512
    positions) on the coarse grid, and the prefill of each prompt length that fits (8, 16; not 900)."""
    assert [c for c, _ in measured.contexts] == [40] and [n for n, _ in measured.contexts[0][1]] == [1, 2, 3, 5]
    assert [p for p, _ in measured.prefill] == [8, 16]
    assert load_profile(save_profile(measured, tmp_path / "p.json"), measured.key) == measured
    old = {k: v for k, v in measured.to_dict().items() if k not in ("contexts", "prefill")}
    old["format"], old["key"] = "specrepro-device-profile/1", dataclasses.asdict(profile_key())
    del old["key"]["contexts"], old["key"]["prefill_sizes"]
    (tmp_path / "old.json").write_text(json.dumps(old))  # a committed bench's profile from before them
    back = load_profile(tmp_path / "old.json")
    assert back.forward == measured.forward and back.contexts == back.prefill == () and back.key.contexts == ()
    assert back.at_context(900) is back and back.prefill_s(100) is None


def test_at_context_interpolates_between_measured_contexts():
    base = fake_profile("fp32", 10.0, {2: 1.5, 4: 2.0, 8: 3.0})  # after 64 tokens
    longer = ((256, ((1, Latency(0.020, 0.02, 0.02)), (8, Latency(0.060, 0.06, 0.06)))),)
    p = dataclasses.replace(base, contexts=longer, prefill=((32, Latency(0.1, 0.1, 0.1)),
                                                            (128, Latency(0.5, 0.5, 0.5))))
    assert p.at_context(10) is p and p.at_context(64) is p  # at or below the base context: as measured
    mid = p.at_context(160)  # halfway from 64 to 256
    assert mid.l_fp(1) == pytest.approx((0.010 + 0.020) / 2) and mid.l_fp(8) == pytest.approx((0.030 + 0.060) / 2)
    assert mid.l_fp(4) == pytest.approx((0.020 + (0.020 + 3 / 7 * 0.040)) / 2)  # each curve linear in n
    assert p.at_context(5000).l_fp(1) == pytest.approx(0.020) and p.at_context(5000).context_tokens == 256
    assert p.prefill_s(16) == pytest.approx(0.05) and p.prefill_s(80) == pytest.approx(0.3)
    assert p.prefill_s(224) == pytest.approx(0.9)  # beyond the longest: the last slope
    assert base.prefill_s(100) is None
    with pytest.raises(ValueError, match="longer contexts must increase"):
        dataclasses.replace(base, contexts=((32, longer[0][1]),))


def test_auto_dtype_weighs_the_prefill_of_long_prompts():
    """The AVX2 EPYC's case: bf16's decode step is cheaper, its prefill several times fp32's. A short prompt runs
    faster in bf16, a long one in fp32; without the prompt the choice sees only the step."""
    def with_prefill(profile, ms_per_prompt_token):
        return dataclasses.replace(profile, prefill=tuple(
            (n, Latency(*(3 * (ms_per_prompt_token * n / 1e3,)))) for n in (32, 128, 512)))
    bf16 = with_prefill(fake_profile("bf16", 60.0, {2: 1.4}), 25.0)
    fp32 = with_prefill(fake_profile("fp32", 70.0, {2: 1.6}), 5.0)
    profiles = {"bf16": bf16, "fp32": fp32}
    assert choose_dtype(profiles, "plain").dtype == "bf16"
    assert choose_dtype(profiles, "plain", prompt_tokens=10, new_tokens=64).dtype == "bf16"
    long = choose_dtype(profiles, "plain", prompt_tokens=300, new_tokens=64)
    assert long.dtype == "fp32" and "prefill of 300 tokens" in long.reason
    assert long.seconds_per_token["bf16"] == pytest.approx(0.060 + 0.025 * 300 / 64)
    with pytest.raises(ValueError, match="both prompt_tokens and new_tokens"):
        choose_dtype(profiles, "plain", prompt_tokens=300)


def test_cache_key_separates_threads_dtype_and_device():
    names = {profile_key().filename(), profile_key(threads=2).filename(), profile_key(dtype="bf16").filename(),
             profile_key(device="cpu:test:avx512f+avx512_bf16").filename(), profile_key(draft=None).filename(),
             profile_key(weights="retrained").filename(), profile_key(context_tokens=1024).filename(),
             profile_key(repeats=20).filename(), profile_key(contexts=(512,)).filename(),
             profile_key(prefill_sizes=(64,)).filename(), profile_key(compiled=True).filename()}
    assert len(names) == 11


def test_weights_digest_follows_the_files(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"a" * 1000)
    first = prof.weights_digest(str(folder))
    (folder / "model.safetensors").write_bytes(b"b" * 1000)  # retrained under the same name
    assert prof.weights_digest(str(folder)) != first
    assert prof.weights_digest("some/hub-id") == prof.weights_digest("some/hub-id")


def test_get_profile_reuses_only_a_profile_of_the_same_key(tmp_path, monkeypatch):
    """A cached profile is reused for the same key; another thread count or dtype measures anew."""
    monkeypatch.setenv("SPECREPRO_CACHE", str(tmp_path))
    calls = []

    def fake_load(name, dtype=None, device=None):
        calls.append((name, dtype))
        return loaded(tiny_model(vocab_size=32, n_layers=1, hidden=16))
    monkeypatch.setattr("specrepro.engine.models.load_model", fake_load)
    first = cal.get_profile("tiny", None, "fp32", device="cpu", threads=1, repeats=1, log=open("/dev/null", "w"))
    again = cal.get_profile("tiny", None, "fp32", device="cpu", threads=1, repeats=1)
    assert again == first and len(calls) == 1
    cal.get_profile("tiny", None, "fp32", device="cpu", threads=2, repeats=1, log=open("/dev/null", "w"))
    cal.get_profile("tiny", None, "bf16", device="cpu", threads=1, repeats=1, log=open("/dev/null", "w"))
    assert len(calls) == 3
    cal.get_profile("tiny", None, "fp32", device="cpu", threads=1, repeats=1, recalibrate=True,
                     log=open("/dev/null", "w"))
    assert len(calls) == 4
    cal.get_profile("tiny", None, "fp32", device="cpu", threads=1, repeats=2, log=open("/dev/null", "w"))
    assert len(calls) == 5  # more repeats asked: a new measurement, not the cached one
    files = sorted(p.name for p in (tmp_path / "profiles").iterdir())
    assert len(files) == 4 and not any(f.startswith(".") for f in files)  # no temporary file left behind


class FakePeer:
    """Stands in for ``peers.LlamaCppPeer`` (calibrate's other engine): its setup, and a measure that counts calls and
    answers L(n) = 2 + n ms."""

    def __init__(self, threads=1):
        self.threads, self.calls = threads, []

    def describe(self):
        return {"engine": "fake.cpp", "version": "1", "model_file": "m.gguf", "model_type": "q4_1",
                "threads": self.threads}

    def measure(self, context, ns, repeats):
        self.calls.append((len(context), tuple(ns), repeats))
        lat = lambda n: Latency((2 + n) / 1e3, (2 + n) / 1e3, (2 + n) / 1e3)
        return prof.PeerProfile(**{k: v for k, v in self.describe().items()}, context_tokens=len(context),
                                repeats=repeats, forward=tuple((n, lat(n)) for n in ns))


def test_calibrate_adds_the_roofline_and_the_peer_and_upgrades_an_old_cached_profile(tmp_path, monkeypatch):
    """calibrate's profile carries the compute roofline and the other engine's forwards on the same context and sizes;
    a cached profile without them (written before) is read, gets them added without measuring ours again, and is saved;
    another thread count of the engine measures it again."""
    monkeypatch.setenv("SPECREPRO_CACHE", str(tmp_path))
    loads = []

    def fake_load(name, dtype=None, device=None):
        loads.append(name)
        return loaded(tiny_model(vocab_size=32, n_layers=1, hidden=16))
    monkeypatch.setattr("specrepro.engine.models.load_model", fake_load)
    quiet = open("/dev/null", "w")
    plain = cal.get_profile("tiny", None, "fp32", device="cpu", threads=1, repeats=1, context_tokens=24, log=quiet)
    m = plain.machine
    assert m["gemm_flops_s"] > 1e8 and m["gemm_threads"] == 1 and plain.peer is None
    # q and o 16×16, k and v 16×8 (2 of 4 heads); gate, up, down 16×32; the LM head 16×32: 2 FLOPs per weight
    assert m["step_flops"] == 2 * (2 * 16 * 16 + 2 * 16 * 8 + 3 * 16 * 32 + 16 * 32)
    assert plain.compute_floor_s == pytest.approx(m["step_flops"] / m["gemm_flops_s"])
    path = tmp_path / "profiles" / plain.key.filename()
    old = json.loads(path.read_text())
    for k in ("gemm_flops_s", "gemm_threads", "step_flops"):
        del old["machine"][k]
    del old["peer"]
    path.write_text(json.dumps(old))  # as written before calibrate measured them
    assert load_profile(path).compute_floor_s is None and load_profile(path).peer is None
    peer = FakePeer()
    upgraded = cal.get_profile("tiny", None, "fp32", device="cpu", threads=1, repeats=1, context_tokens=24,
                                log=quiet, peer=peer)
    assert upgraded.forward == plain.forward and upgraded.compute_floor_s is not None
    assert peer.calls == [(24, tuple(n for n, _ in plain.forward), 1)]
    assert upgraded.peer.beta(1) == 1.0 and upgraded.peer.beta(3) == pytest.approx(5 / 3)
    assert load_profile(path) == upgraded and len(loads) == 2  # ours not measured again: the model loaded to add them
    assert cal.get_profile("tiny", None, "fp32", device="cpu", threads=1, repeats=1, context_tokens=24,
                            peer=peer) == upgraded and len(peer.calls) == 1  # cached with the peer: nothing measured
    other = FakePeer(threads=2)
    cal.get_profile("tiny", None, "fp32", device="cpu", threads=1, repeats=1, context_tokens=24, log=quiet, peer=other)
    assert len(other.calls) == 1


def test_the_gemm_roofline_measures_a_rate():
    rate = cal.gemm_roofline(torch.device("cpu"), torch.float32, size=256, repeats=2)
    assert 1e8 < rate < 1e14


def test_interrupted_calibration_leaves_no_profile(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECREPRO_CACHE", str(tmp_path))
    monkeypatch.setattr("specrepro.engine.models.load_model", lambda *a, **k: loaded(tiny_model(vocab_size=32, hidden=16)))
    real = cal.measure

    def interrupted(*args, **kwargs):
        def stop(done, total):
            raise KeyboardInterrupt
        return real(*args, **{**kwargs, "progress": stop})
    monkeypatch.setattr(cal, "measure", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cal.get_profile("tiny", None, "fp32", device="cpu", threads=1, repeats=1)
    assert not (tmp_path / "profiles").exists() or not any((tmp_path / "profiles").iterdir())


def test_bad_profiles_get_one_clear_error(tmp_path, measured):
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"format": "specrepro-device-prof')
    with pytest.raises(ValueError, match="not valid JSON"):
        load_profile(corrupt)
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({"format": "something-else", "key": {}}))
    with pytest.raises(ValueError, match="not a specrepro device profile"):
        load_profile(foreign)
    damaged = tmp_path / "damaged.json"
    d = measured.to_dict()
    del d["forward"]
    damaged.write_text(json.dumps(d))
    with pytest.raises(ValueError, match="damaged"):
        load_profile(damaged)
    save_profile(measured, tmp_path / "other.json")
    with pytest.raises(ValueError, match="threads: 1 vs 4"):
        load_profile(tmp_path / "other.json", dataclasses.replace(measured.key, threads=4))
    with pytest.raises(ValueError, match="outside this profile's measured range 1..8"):
        measured.l_fp(9)
    with pytest.raises(ValueError, match="outside"):
        measured.beta(0)
    with pytest.raises(ValueError, match="unknown dtype"):
        prof.dtype_name("int8")
    with pytest.raises(ValueError, match="within 1..64"):
        measure(tiny_model(vocab_size=32, hidden=16), None, list(range(8)), profile_key(), ns=(1, 65), repeats=1)


def test_auto_dtype_picks_the_lower_measured_cost():
    fast_decode = fake_profile("fp32", 30.0, {2: 1.2, 3: 1.3, 5: 2.5, 9: 3.0}, draft_ms=4.5)  # fast 1 row, slow 5 rows
    cheap_verify = fake_profile("bf16", 36.0, {2: 1.05, 3: 1.08, 5: 1.1, 9: 1.2}, draft_ms=5.0)
    profiles = {"fp32": fast_decode, "bf16": cheap_verify}
    assert choose_dtype(profiles, "plain").dtype == "fp32"  # plain decoding weighs L_fp(1) only
    # γ = 4 at α = 0.8: fp32 pays β(5) = 2.5, bf16 only 1.1.
    choice = choose_dtype(profiles, "draft model", 4, alpha=0.8)
    expected = min(profiles, key=lambda d: profiles[d].time_per_token(4, 0.8))
    assert choice.dtype == expected == "bf16" and "bf16" in choice.reason and "fp32" in choice.reason
    # At α = 0 drafting never pays: the cheaper one-token step wins again, for γ auto too.
    assert choose_dtype(profiles, "model-free", "auto", alpha=0.0).dtype == "fp32"
    with pytest.raises(ValueError, match="no draft timing"):
        choose_dtype({"fp32": fake_profile("fp32", 30.0, {2: 1.2})}, "draft model", 1)


@pytest.mark.parametrize("alpha", [0.2, 0.5, 0.8, 0.95])
def test_adaptive_gamma_picks_the_closed_form_optimum(alpha):
    curve = sim.BetaCurve(tuple(range(1, 18)), tuple(1.0 + 0.06 * (n - 1) ** 1.3 for n in range(1, 18)))
    policy = AdaptiveGamma(c=0.1, beta=curve, alpha_prior=alpha, prior_weight=1e9, gamma_max=16)
    gammas = np.arange(1, 17)
    speedups = [float(sim.expected_speedup(alpha, g, 0.1, float(curve(g + 1)))) for g in gammas]
    assert policy.choose([], []) == gammas[int(np.argmax(speedups))]
    assert policy.choose([1, 0, 2], [3, 3, 3]) == policy.choose([], [])  # the prior outweighs three steps
    # Estimates move from the prior towards what the generation measured, position by position.
    loose = dataclasses.replace(policy, prior_weight=4.0)
    assert loose.alpha_estimates([], [])[0] == pytest.approx(alpha)
    est = loose.alpha_estimates([3, 0, 1, 2], [3, 3, 3, 2])  # position 1: 4 tested, 3 accepted
    assert est[0] == pytest.approx((4 * alpha + 3) / 8)
    assert est[1] == pytest.approx((4 * alpha + 2) / 7)  # tested where ≥ 2 proposed and ≥ 1 accepted
    assert est[2] == pytest.approx((4 * alpha + 1) / 5) and est[3] == pytest.approx(alpha)  # never tested


def test_per_position_estimates_fit_bursty_acceptance():
    """Prompt lookup's pattern: a step either fails at its first draft or copies all of them. The per-position
    estimates reproduce the observed tokens per step; one pooled α (the i.i.d. closed form) overestimates it."""
    curve = sim.BetaCurve(tuple(range(1, 18)), tuple(1.0 + 0.1 * (n - 1) for n in range(1, 18)))
    policy = AdaptiveGamma(c=0.0, beta=curve, alpha_prior=0.5, prior_weight=1e-9, gamma_max=4)
    accepts, proposals = [0] * 7 + [4] * 3, [4] * 10
    observed = 1 + np.mean(accepts)  # tokens per step: 2.2
    tau_per_position = policy.speedups(accepts, proposals)[3] * float(curve(5))
    assert tau_per_position == pytest.approx(observed)
    pooled = sum(accepts) / sum(a + (a < g) for a, g in zip(accepts, proposals))
    assert float(sim.expected_tokens(pooled, 4)) > observed + 0.2


def test_beta_curve_in_the_simulators():
    curve = sim.BetaCurve((1, 2, 4, 8), (1.0, 1.1, 1.5, 3.0))
    assert curve(3) == pytest.approx(1.3)
    assert sim.expected_speedup(0.7, 3, 0.1, curve) == pytest.approx(sim.expected_speedup(0.7, 3, 0.1, 1.5))
    assert sim.optimal_gamma(0.7, 0.1, gamma_max=7, beta=curve) == max(
        range(1, 8), key=lambda g: float(sim.expected_speedup(0.7, g, 0.1, float(curve(g + 1)))))
    with pytest.raises(ValueError, match="outside the measured range"):
        sim.expected_speedup(0.7, 8, 0.1, curve)
    with pytest.raises(ValueError, match="start at 1"):
        sim.BetaCurve((2, 3), (1.0, 1.2))
    with pytest.raises(ValueError, match="β\\(1\\) must be 1"):
        sim.BetaCurve((1, 2), (1.2, 1.3))


def test_gamma_auto_in_the_loop_records_each_step(tiny_pair_64, measured):
    target, draft = tiny_pair_64
    curve = sim.BetaCurve((1, 2, 3, 4, 5, 6, 7), (1.0, 1.01, 1.02, 1.03, 1.04, 1.05, 1.06))
    policy = AdaptiveGamma(c=0.0, beta=curve, alpha_prior=0.9, gamma_max=6)
    config = DecodeConfig(method="speculative", max_new_tokens=30, gamma="auto")
    rec = generate_ids(loaded(target), [1, 2, 3], config, draft=LMDrafter(draft), gamma_policy=policy)
    ar = generate_ids(loaded(target), [1, 2, 3], DecodeConfig(method="ar", max_new_tokens=30))
    assert rec.token_ids == ar.token_ids  # exact at T = 0 whatever γ each step uses
    assert len(rec.gammas) == rec.target_calls and rec.gammas[0] == 6  # α prior 0.9, nearly free verification
    assert rec.provenance["gamma_policy"]["policy"].startswith("adaptive")
    fixed = generate_ids(loaded(target), [1, 2, 3], DecodeConfig(max_new_tokens=12, gamma=3), draft=LMDrafter(draft))
    assert fixed.gammas[0] == max(fixed.gammas) == 3 and fixed.provenance["gamma_policy"] == FixedGamma(3).to_dict()
    with pytest.raises(ValueError, match="needs a device profile"):
        generate_ids(loaded(target), [1, 2, 3], config, draft=PromptLookupDrafter())
    with pytest.raises(ValueError, match="gamma"):
        DecodeConfig(gamma="sometimes")
