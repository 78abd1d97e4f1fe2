"""``plan.plan_run``: the one place a run's dtype, γ policy, tree size and drafter are chosen, each with its reason,
for the command line and the bench alike."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from specrepro.decode.adaptive import AdaptiveGamma, FixedGamma
from specrepro.drafters import LMDrafter
from specrepro.methods import REGISTRY, TreeSizing
from specrepro.engine.models import LoadedModel, tiny_model
from specrepro.run.plan import RunRequest, lazy_profiles, plan_run
from tests.helpers import fake_profile

# fp32: the faster one-token step; bf16: the cheaper verification of several tokens (the Xeon-with-AMX shape)
PROFILES = {"fp32": fake_profile("fp32", 30.0, {2: 1.2, 3: 1.3, 5: 2.5, 9: 3.0, 17: 4.0}, draft_ms=4.5),
            "bf16": fake_profile("bf16", 36.0, {2: 1.05, 3: 1.08, 5: 1.1, 9: 1.2, 17: 1.5}, draft_ms=5.0)}
AUTO = RunRequest(dtype="auto", gamma=4, candidates=("fp32", "bf16"), alpha_prior=0.8)


def test_a_named_dtype_is_kept_and_a_default_one_is_the_runs():
    plan = plan_run(REGISTRY["speculative"], PROFILES, RunRequest(dtype="bf16", dtype_reason="named with --dtype"))
    assert (plan.dtype, plan.dtype_reason) == ("bf16", "named with --dtype")
    plan = plan_run(REGISTRY["ar"], PROFILES, RunRequest(dtype=None, default_dtype="fp32"))
    assert (plan.dtype, plan.dtype_reason) == ("fp32", "the run's default dtype")


def test_auto_weighs_each_method_by_its_cost():
    """Plain decoding pays L_fp(1) only (fp32 here); a draft model at γ = 4 and α 0.8 pays β(5) (bf16 here)."""
    assert plan_run(REGISTRY["ar"], PROFILES, AUTO).dtype == "fp32"
    plan = plan_run(REGISTRY["speculative"], PROFILES, AUTO)
    assert plan.dtype == "bf16" and "fp32" in plan.dtype_reason and "α prior 0.80" in plan.dtype_reason


def test_gamma_auto_charges_a_draft_model_and_not_a_model_free_draft():
    request = RunRequest(dtype="fp32", gamma="auto", gamma_max=8, alpha_prior=0.7)
    chain = plan_run(REGISTRY["speculative"], PROFILES, request).gamma_policy
    lookup = plan_run(REGISTRY["prompt-lookup"], PROFILES, request).gamma_policy
    assert isinstance(chain, AdaptiveGamma) and chain.c == pytest.approx(PROFILES["fp32"].c) and chain.c > 0
    assert isinstance(lookup, AdaptiveGamma) and lookup.c == 0.0  # c = 0 for a model-free draft
    assert chain.alpha_prior == 0.7 and lookup.gamma_max == chain.gamma_max
    fixed = plan_run(REGISTRY["speculative"], PROFILES, RunRequest(dtype="fp32", gamma=3)).gamma_policy
    assert isinstance(fixed, FixedGamma) and fixed.gamma == 3


def test_a_token_tree_is_sized_on_the_chosen_dtype_unless_named():
    seen = []

    def choose(config, profile, gamma):
        seen.append((config, profile.key.dtype, gamma))
        return type("Size", (), {"size": 11, "reason": "best τ/L here", "latency_s": 0.03, "tau": 2.0})()
    medusa = dataclasses.replace(REGISTRY["medusa"], tree=TreeSizing(read_config=lambda weights, target: "ranks",
                                                                     choose=choose))
    plan = plan_run(medusa, PROFILES, RunRequest(dtype="bf16", gamma=3))
    assert (plan.tree_size, plan.tree_size_reason, seen) == (11, "best τ/L here", [("ranks", "bf16", 3)])
    named = plan_run(medusa, PROFILES, RunRequest(dtype="bf16", tree_size=7))
    assert (named.tree_size, named.tree_size_reason) == (7, "named")
    assert plan_run(REGISTRY["speculative"], PROFILES, RunRequest(dtype="bf16")).tree_size is None


def test_the_drafter_is_built_on_the_models_at_the_planned_dtype():
    asked = []
    draft = LoadedModel("d", tiny_model(vocab_size=16, n_layers=1, hidden=8), None)

    def models(dtype):
        asked.append(dtype)
        return None, draft
    plan = plan_run(REGISTRY["speculative"], PROFILES, RunRequest(dtype="bf16"), models=models)
    assert asked == ["bf16"] and isinstance(plan.drafter, LMDrafter)
    with pytest.raises(ValueError, match="needs a draft model"):
        plan_run(REGISTRY["speculative"], PROFILES, RunRequest(dtype="bf16"), models=lambda dtype: (None, None))


def test_profiles_are_measured_only_when_a_choice_needs_them():
    measured = []
    profiles = lazy_profiles(lambda dtype: measured.append(dtype) or PROFILES[dtype])
    plan_run(REGISTRY["speculative"], profiles, RunRequest(dtype="fp32", gamma=4))
    assert measured == []  # a named dtype and a fixed γ need no profile
    plan_run(REGISTRY["speculative"], profiles, AUTO)
    assert sorted(measured) == ["bf16", "fp32"]


def test_a_drafter_that_pays_for_its_drafting_sizes_its_tree_once_with_that_cost():
    """Medusa's heads (and an EAGLE draft) cost time every step: the tree is chosen once, after the drafter is
    built and has measured that cost in place, and the drafter is resized to it."""
    from specrepro.drafters import medusa as heads
    from tests.test_cost import RANKS
    config = heads.MedusaConfig(hidden_size=8, rank_probs=RANKS)
    drafter = heads.MedusaDrafter(heads.MedusaHeads(8, 3), config, torch.nn.Linear(8, 32, bias=False), tree_size=4)
    drafter.forward_seconds = lambda: 0.004
    seen = []

    def choose(config, profile, gamma, draft_step_s=0.0):
        seen.append(draft_step_s)
        return type("Size", (), {"size": 6, "reason": "with its drafting", "latency_s": 0.03, "tau": 2.0})()
    medusa = dataclasses.replace(REGISTRY["medusa"], tree=TreeSizing(read_config=lambda weights, target: config,
                                                                     choose=choose))
    plan = plan_run(medusa, PROFILES, RunRequest(dtype="bf16", gamma=3), models=lambda dtype: (None, drafter))
    assert seen == [0.004] and (plan.tree_size, plan.tree_size_reason) == (6, "with its drafting")
    assert plan.drafter.tree_size == 6 and plan.drafter.heads is drafter.heads
    assert plan.draft_step_s == 0.004 and plan.provenance()["draft_step_s"] == 0.004  # the bench charges it


def test_a_drafter_that_drafts_for_free_is_built_once_at_the_planned_size():
    """PPD's prompt tokens ride in the verifying forward: its tree is sized without a drafter, which is then built
    once, at that size (never built at the default size and resized)."""
    from specrepro.drafters import ppd as prompt
    assert not hasattr(prompt.PPDDrafter, "forward_seconds")
    built = []

    def build(source, target, config):
        built.append(config.tree_size)
        return object.__new__(prompt.PPDDrafter)

    def choose(config, profile, gamma, **drafting):
        assert drafting == {}
        return type("Size", (), {"size": 5, "reason": "free drafting", "latency_s": 0.03, "tau": 2.0})()
    ppd = dataclasses.replace(REGISTRY["ppd"], drafter=build, tree=TreeSizing(read_config=lambda weights, target: None,
                                                                                choose=choose))
    plan = plan_run(ppd, PROFILES, RunRequest(dtype="bf16", gamma=3), models=lambda dtype: (None, "folder"))
    assert built == [5] and plan.tree_size == 5 and isinstance(plan.drafter, prompt.PPDDrafter)
    assert plan.draft_step_s is None and "draft_step_s" not in plan.provenance()


def test_method_auto_picks_the_expected_fastest_and_never_goes_without_ar(tmp_path, monkeypatch):
    """With cheap verification (β(2) 1.05) prompt lookup's α prior makes it pay; where verifying two tokens costs
    twice one (compute-bound), plain decoding is expected fastest. A draft model with no timing in the profile, and
    a tree method with no weights for the target, are left out, saying why."""
    from specrepro.run.plan import choose_method
    monkeypatch.setenv("SPECREPRO_CACHE", str(tmp_path))  # no zoo weights for target "nowhere"
    request = RunRequest(gamma="auto", gamma_max=4, candidates=("bf16",), target="nowhere")
    cheap = {"bf16": fake_profile("bf16", 10.0, {2: 1.05, 3: 1.08, 5: 1.1})}
    costly = {"bf16": fake_profile("bf16", 10.0, {2: 2.0, 3: 3.0, 5: 5.0})}
    methods = [REGISTRY[n] for n in ("ar", "prompt-lookup", "speculative", "eagle")]
    fast = choose_method(methods, cheap, request)
    assert fast.method.name == "prompt-lookup" and fast.seconds_per_token["ar"] == pytest.approx(0.010)
    assert "speculative left out" in fast.reason and "eagle left out" in fast.reason
    assert choose_method(methods, costly, request).method.name == "ar"
    with pytest.raises(ValueError, match="plain decoding among its candidates"):
        choose_method(methods[1:], cheap, request)
