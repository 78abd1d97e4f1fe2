"""The host's work per step (issue 64): measured by running the loops (``run.host_cost``), kept in the device profile
(``Profile.host``), and weighed by every prediction: seconds per token, the dtype and method choice, γ auto and the
bench's ``predicted_with_host``."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import simulations as sim
from specrepro.decode.adaptive import AdaptiveGamma
from specrepro.engine.models import tiny_model
from specrepro.metrics import calibrate as cal
from specrepro.metrics.profile import HostCost, Profile, choose_dtype, load_profile, save_profile
from specrepro.run import bench_summary
from specrepro.run.host_cost import measure_host, steady_host_s
from tests.helpers import fake_profile, loaded

pytestmark = pytest.mark.usefixtures("one_thread")

BETAS = {2: 1.05, 3: 1.1, 5: 1.2, 9: 1.6, 17: 2.4}


def hosted(ar_ms: float, spec_ms: float, decode_ms: float = 10.0, draft_ms: float | None = None) -> Profile:
    return dataclasses.replace(fake_profile("fp32", decode_ms, BETAS, draft_ms=draft_ms),
                               host=HostCost(ar_step_s=ar_ms / 1e3, spec_step_s=spec_ms / 1e3))


@pytest.mark.parametrize("bad", [dict(ar_step_s=-1e-3), dict(spec_step_s=float("nan")), dict(ar_step_s="1")])
def test_a_bad_host_cost_gets_one_clear_error(bad):
    with pytest.raises(ValueError, match="finite number of seconds"):
        HostCost(**{"ar_step_s": 1e-3, "spec_step_s": 2e-3, **bad})


def test_the_host_cost_round_trips_and_an_older_profile_reads_without_one(tmp_path):
    p = hosted(1.0, 2.5)
    save_profile(p, tmp_path / "p.json")
    assert load_profile(tmp_path / "p.json") == p and p.host_s(0) == 1e-3 and p.host_s(3) == 2.5e-3
    old = json.loads((tmp_path / "p.json").read_text())
    del old["host"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert load_profile(tmp_path / "old.json").host is None and load_profile(tmp_path / "old.json").host_s(2) == 0.0


def test_seconds_per_token_and_the_dtype_choice_count_the_host():
    bare, p = fake_profile("fp32", 10.0, BETAS), hosted(1.0, 2.5)
    tau = float(sim.expected_tokens(0.6, 4))
    assert p.time_per_token(4, 0.6, c=0.0) == pytest.approx(bare.time_per_token(4, 0.6, c=0.0) + 2.5e-3 / tau)
    assert p.time_per_token(0, 0.6, c=0.0) == pytest.approx(11e-3)  # a plain step: L_fp(1) + its host work
    plain = choose_dtype({"fp32": p}, "plain")
    assert plain.seconds_per_token["fp32"] == pytest.approx(11e-3) and "host 1.00 ms" in plain.reason


def test_gamma_auto_falls_back_to_ar_when_the_host_takes_the_gain():
    """At α = 0.3 with a model-free drafter the forwards alone predict a gain (1.26x at γ = 2); a speculative step's
    host work of 5 ms against AR's 1 ms (10 ms steps) takes it, so γ auto asks for plain decoding and says why."""
    bare = AdaptiveGamma.from_profile(fake_profile("fp32", 10.0, BETAS), model_free=True, alpha_prior=0.3,
                                      gamma_max=8)
    policy = AdaptiveGamma.from_profile(hosted(1.0, 5.0), model_free=True, alpha_prior=0.3, gamma_max=8)
    assert (policy.host_ar, policy.host_spec) == pytest.approx((0.1, 0.5))
    assert bare.choose([], []) >= 1 and policy.choose([], []) == 0
    assert "host 0.500 a step against AR's 0.100" in policy.explain([], [])
    speedups = policy.speedups([], [])
    g = np.arange(1, 9)
    want = [float(sim.expected_tokens(0.3, k)) * 1.1 / (float(policy.beta(k + 1)) + 0.5) for k in g]
    np.testing.assert_allclose(speedups, want)
    with pytest.raises(ValueError, match="host_ar and host_spec"):
        dataclasses.replace(policy, host_spec=-0.1)


def test_steady_host_leaves_the_first_step_out():
    rec = type("Rec", (), {})()
    rec.target_calls = 5
    rec.time_split = {"target_forward_s": 0.5, "draft_forward_s": 0.0, "host_s": 0.09,
                      "first_step": {"wall_s": 0.2, "target_forward_s": 0.15, "draft_forward_s": 0.0}}
    assert steady_host_s(rec) == pytest.approx((0.09 - 0.05) / 4)
    rec.target_calls = 1
    with pytest.raises(ValueError, match="at least 2 steps"):
        steady_host_s(rec)


def test_measure_host_runs_both_loops_on_a_tiny_model():
    target = tiny_model(vocab_size=32, n_layers=1, hidden=16)
    host = measure_host(target, list(range(3, 30)), steps=6, repeats=1)
    assert host.ar_step_s > 0 and host.spec_step_s > 0 and (host.method, host.gamma, host.steps) == ("prompt-lookup",
                                                                                                        4, 6)
    with pytest.raises(ValueError, match="steps >= 2"):
        measure_host(target, [1, 2, 3], steps=1)
    with pytest.raises(ValueError, match="empty"):
        measure_host(target, [])


def test_get_profile_adds_the_host_once_and_keeps_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECREPRO_CACHE", str(tmp_path))
    monkeypatch.setattr("specrepro.engine.models.load_model",
                        lambda name, dtype=None, device=None: loaded(tiny_model(vocab_size=32, n_layers=1, hidden=16)))
    calls = []

    def host(model, context):
        calls.append(len(context))
        return HostCost(ar_step_s=1e-3, spec_step_s=2e-3)
    quiet = open("/dev/null", "w")
    bare = cal.get_profile("tiny", None, "fp32", device="cpu", threads=1, repeats=1, context_tokens=24, log=quiet)
    assert bare.host is None
    added = cal.get_profile("tiny", None, "fp32", device="cpu", threads=1, repeats=1, context_tokens=24, log=quiet,
                            host=host)
    assert added.forward == bare.forward and added.host == HostCost(1e-3, 2e-3) and calls == [24]
    again = cal.get_profile("tiny", None, "fp32", device="cpu", threads=1, repeats=1, context_tokens=24, host=host)
    assert again == added and calls == [24]  # kept in the cache: not measured again


def test_the_bench_predicts_with_the_host_beside_the_forwards_alone():
    """A prompt-lookup variant's steps: γ = 4 at every step. ``predicted_speedup`` counts the forwards alone;
    ``predicted_with_host`` adds each profile's host work to both its steps and AR's."""
    p = hosted(1.0, 3.0)
    steps, alpha = [4] * 10, 0.5
    bare = bench_summary.predicted_from_steps(alpha, steps, 0, 0.0, p, p.decode_s)
    with_host = bench_summary.predicted_from_steps(alpha, steps, 0, 0.0, p, p.decode_s + p.host_s(0), host=True)
    tau = float(sim.expected_tokens(alpha, 4))
    assert bare == pytest.approx(tau * p.decode_s / p.l_fp(5))
    assert with_host == pytest.approx(tau * 11e-3 / (p.l_fp(5) + 3e-3)) and with_host < bare
