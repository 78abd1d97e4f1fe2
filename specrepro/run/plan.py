"""One plan for a run: the dtype, the γ policy, the tree size and the drafter a method runs with, each with the
reason it was chosen. The command line (``generate``) and the bench both call ``plan_run``; neither decides these on
its own.

    dtype       named, the run's default, or (``auto``) the fastest for the method's cost on the device profiles
    γ policy    a fixed γ, or (``auto``) ``AdaptiveGamma`` on the chosen dtype's profile (c = 0 for a model-free draft)
    tree size   named, or the hardware-aware size on the chosen dtype's profile (token-tree methods only)
    drafter     the method's drafter built on the models at the chosen dtype, resized to the tree size
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..decode.adaptive import AdaptiveGamma, FixedGamma, GammaPolicy
from ..core.config import DecodeConfig
from ..methods import Cost, Method
from ..metrics.profile import DEFAULT_ALPHA_PRIOR, Profile, choose_dtype, dtype_name


@dataclass(frozen=True)
class RunRequest:
    """What was asked of a run, before the device has its say."""

    dtype: str | None = "auto"  # bf16 | fp16 | fp32 | auto | None (``default_dtype``)
    gamma: int | str = 4  # γ or "auto"
    tree_size: int | None = None  # nodes of a token tree; None: the hardware-aware size
    gamma_max: int = 16  # largest γ that gamma auto considers
    alpha_prior: float | None = None  # the draft model's measured α (its training record), for dtype and γ auto
    target: str = ""  # the target's name: a token-tree method's zoo weights are the target's
    tree_weights: Any = None  # a token-tree method's weights (folder or zoo name); None: the target's own
    candidates: tuple[str, ...] = ("fp32",)  # the dtypes auto chooses among (metrics.profile.candidate_dtypes)
    default_dtype: str = "fp32"  # the dtype a None request runs at
    tree_size_reason: str = "named"  # why a named tree size was named (a resumed bench: "kept from the first run")
    dtype_reason: str | None = None  # why a named dtype was named
    # The run's mean prompt length and new tokens per prompt: auto then weighs each dtype's prefill and its step at
    # the run's context (``choose_dtype``), and γ auto and the tree size read the profile at that context.
    prompt_tokens: int | None = None
    new_tokens: int | None = None

    def profile_at(self, profile: Profile) -> Profile:
        """``profile`` at this run's mean context (prompt + half the new tokens), or as measured without one."""
        if self.prompt_tokens is None:
            return profile
        return profile.at_context(self.prompt_tokens + (self.new_tokens or 0) // 2)


@dataclass
class Plan:
    method: Method
    dtype: str
    dtype_reason: str
    gamma_policy: GammaPolicy
    gamma_reason: str
    tree_size: int | None = None
    tree_size_reason: str | None = None
    drafter: Any = None  # the method's Drafter (speculative loop), built by ``plan_run`` when given models
    # A tree drafter's drafting on this machine (``forward_seconds``: an EAGLE draft forward, Medusa's heads for one
    # step), measured when its drafter was built; None for a drafter that does no work outside the target forward.
    draft_step_s: float | None = None

    def config(self, config: DecodeConfig) -> DecodeConfig:
        """``config`` with the planned tree size."""
        return dataclasses.replace(config, tree_size=self.tree_size) if self.tree_size else config

    def provenance(self) -> dict:
        out = {"dtype_reason": self.dtype_reason, "gamma_reason": self.gamma_reason}
        if self.tree_size_reason is not None:
            out["tree_size_reason"] = self.tree_size_reason
        if self.draft_step_s is not None:
            out["draft_step_s"] = self.draft_step_s
        return out


def alpha_prior(method: Method, request: RunRequest) -> float:
    """The α the device profile weighs a draft-model method with: the draft's measured α, else the default prior."""
    return request.alpha_prior if method.cost.draft_cost and request.alpha_prior is not None else DEFAULT_ALPHA_PRIOR


def tree_cost(method: Method, weights, target: str, gamma: int | str) -> Callable[[Profile], tuple[float, str]] | None:
    """For a token-tree method, profile -> (seconds per token at the hardware-aware tree size, why): what dtype auto
    compares dtypes by (the tree forward's measured latency over its expected tokens per call), instead of treating
    the method as a c = 0 chain. None for other methods."""
    if method.tree is None:
        return None
    config = method.tree.read_config(weights, target)

    def cost(profile: Profile) -> tuple[float, str]:
        size = method.tree.choose(config, profile, gamma)
        step_s = size.latency_s + profile.host_s(1)  # the tree's forward and the host's work of a speculative step
        host = f", host {1e3 * profile.host_s(1):.2f} ms" if profile.host is not None else ""
        return step_s / size.tau, (f"{1e3 * step_s / size.tau:.1f} ms/token with a {size.size}-node tree "
                                   f"(τ {size.tau:.2f}, L_fp {1e3 * size.latency_s:.1f} ms{host})")
    return cost


def choose_run_dtype(method: Method, profiles: Mapping[str, Profile], request: RunRequest) -> tuple[str, str]:
    """(dtype, why): as named, the default for None, or the profile's fastest for the method's cost."""
    if request.dtype is None:
        return request.default_dtype, request.dtype_reason or "the run's default dtype"
    if request.dtype != "auto":
        return dtype_name(request.dtype), request.dtype_reason or "named"
    choice = choose_dtype({d: profiles[d] for d in request.candidates}, method.cost.value, request.gamma,
                          alpha_prior(method, request), request.gamma_max,
                          tree_cost=tree_cost(method, request.tree_weights, request.target, request.gamma),
                          prompt_tokens=request.prompt_tokens, new_tokens=request.new_tokens)
    return choice.dtype, choice.reason


@dataclass(frozen=True)
class MethodChoice:
    method: Method
    reason: str  # the chosen method's expected ms/token and each other candidate's (or why it was left out)
    seconds_per_token: dict  # method name -> expected seconds per token at its best dtype (and γ or tree size)


def choose_method(methods: list[Method], profiles: Mapping[str, Profile], request: RunRequest) -> MethodChoice:
    """``--method auto``: of ``methods`` (plain decoding among them), the one with the lowest expected seconds per
    token on the device profiles, each at its best dtype and its best γ (or hardware-aware tree size), weighed with
    its α prior at the run's context (``choose_dtype``). A candidate that cannot be costed here (a draft model with
    no timing, a tree method with no weights for the target) is left out, saying why. Each step's cost holds the
    forwards and, where the profile measured it (``Profile.host``), the host's work of a plain or a speculative
    step; a chosen drafter that stops paying mid-run goes on as plain decoding (γ auto asks for γ = 0:
    ``decode.adaptive``)."""
    if not any(m.cost is Cost.PLAIN for m in methods):
        raise ValueError("method auto needs plain decoding among its candidates: it must never be slower than AR")
    costs, detail, left_out = {}, {}, {}
    for m in methods:
        try:
            choice = choose_dtype({d: profiles[d] for d in request.candidates}, m.cost.value, "auto",
                                  alpha_prior(m, request), request.gamma_max,
                                  tree_cost=tree_cost(m, None, request.target, "auto"),
                                  prompt_tokens=request.prompt_tokens, new_tokens=request.new_tokens)
        except (ValueError, FileNotFoundError, OSError) as err:
            left_out[m.name] = str(err).split("\n")[0]
            continue
        costs[m.name] = choice.seconds_per_token[choice.dtype]
        detail[m.name] = f"{1e3 * costs[m.name]:.2f} ms/token ({choice.dtype})"
    chosen = min(costs, key=costs.get)
    others = "; ".join([f"{n} {detail[n]}" for n in costs if n != chosen] +
                       [f"{n} left out: {why}" for n, why in left_out.items()])
    return MethodChoice(next(m for m in methods if m.name == chosen),
                        f"{chosen} is expected fastest here: {detail[chosen]}" + (f" (vs {others})" if others else ""),
                        costs)


def gamma_policy(method: Method, profile: Profile | None, request: RunRequest) -> tuple[GammaPolicy, str]:
    if request.gamma != "auto":
        return FixedGamma(request.gamma), "named"
    if method.cost is Cost.PLAIN:
        return FixedGamma(1), "a plain method drafts nothing"
    policy = AdaptiveGamma.from_profile(profile, model_free=not method.cost.draft_cost,
                                        alpha_prior=request.alpha_prior if method.cost.draft_cost else None,
                                        gamma_max=request.gamma_max)
    return policy, "auto: chosen each step from the device profile and α so far"


def plan_run(method: Method, profiles: Mapping[str, Profile], request: RunRequest,
             models: Callable[[str], tuple[Any, Any]] | None = None, config: DecodeConfig | None = None) -> Plan:
    """The plan of ``method`` on these device ``profiles`` (dtype -> Profile; a mapping that measures on demand is
    fine). With ``models(dtype) -> (target LoadedModel, drafter source)`` and the run's ``config``, the drafter is
    built too, at the planned tree size."""
    dtype, dtype_reason = choose_run_dtype(method, profiles, request)
    needs_profile = request.gamma == "auto" and method.cost is not Cost.PLAIN
    policy, gamma_reason = gamma_policy(method, request.profile_at(profiles[dtype]) if needs_profile else None,
                                        request)
    plan = Plan(method, dtype, dtype_reason, policy, gamma_reason)
    if method.tree is not None and request.tree_size is not None:
        plan.tree_size, plan.tree_size_reason = request.tree_size, request.tree_size_reason
    builds = models is not None and method.drafter is not None
    sizes = method.tree is not None and request.tree_size is None
    # A tree drafter that pays for its drafting (``forward_seconds``: EAGLE, Medusa) is built first and measured
    # (the bench charges that drafting to its prediction and its c), then sized with that cost and resized; any
    # other drafter is built once, at the size planned without it.
    if builds and (not sizes or hasattr(method.drafter_type, "forward_seconds")):
        plan.drafter = _build(method, models, dtype, plan, config)
        plan.draft_step_s = tree_drafting(method, plan.drafter)
    if sizes:
        weights = method.tree.read_config(request.tree_weights, request.target)
        drafting = {"draft_step_s": plan.draft_step_s} if plan.draft_step_s is not None else {}
        size = method.tree.choose(weights, request.profile_at(profiles[dtype]), request.gamma, **drafting)
        plan.tree_size, plan.tree_size_reason = size.size, size.reason
        if plan.drafter is not None and size.size != plan.drafter.tree_size:
            plan.drafter = plan.drafter.resized(size.size)
    if builds and plan.drafter is None:
        plan.drafter = _build(method, models, dtype, plan, config)
    return plan


def tree_drafting(method: Method, drafter) -> float | None:
    """A token-tree drafter's drafting, measured in place on this machine (``forward_seconds``: an EAGLE draft
    forward, Medusa's heads for one step); None for other drafters and for one that drafts inside the target's
    forward (PPD)."""
    measure = getattr(drafter, "forward_seconds", None) if method.tree is not None else None
    return measure() if measure is not None else None


def _build(method: Method, models: Callable[[str], tuple[Any, Any]], dtype: str, plan: Plan,
           config: DecodeConfig | None):
    """The method's drafter on ``models(dtype)``, with the plan's settings (its tree size, once planned)."""
    target, source = models(dtype)
    base = config if config is not None else DecodeConfig(method=method.name)
    return method.build_drafter(source, target, plan.config(base))


def lazy_profiles(measure: Callable[[str], Profile]) -> dict[str, Profile]:
    """A dtype -> Profile mapping that measures (or reads from the cache) a dtype the first time it is asked for."""
    class Lazy(dict):
        def __missing__(self, dtype: str) -> Profile:
            self[dtype] = measure(dtype)
            return self[dtype]
    return Lazy()
