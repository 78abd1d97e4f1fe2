"""How many drafts to propose at each step: a fixed γ, or the γ the closed form says is best right now.

``--gamma auto`` (issue 12) picks, before every step, the γ that maximises the survey blog's (*Batch Size*)

    E[speedup] = (1 − α^{γ+1}) / ((1 − α)(γc + β(γ+1)))

with c and the β(n) curve of the device profile (``specrepro.metrics.profile``) and a running estimate of α:
the prior counts as ``prior_weight`` tested drafts, and every draft this generation tests is added to it,

    α̂ = (prior_weight · α_prior + accepted) / (prior_weight + tested).

The slides' Fig. 3 (optimal γ against α and c) is this choice with β = 1. Fixed γ stays the default, so the
documents' tables are reproduced at the γ they name.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from simulations.speculative import BetaCurve, optimal_gamma

from .metrics.profile import DEFAULT_ALPHA_PRIOR, Profile


@dataclass(frozen=True)
class FixedGamma:
    gamma: int  # γ at every step

    def choose(self, accepted: int, tested: int) -> int:
        return self.gamma

    def to_dict(self) -> dict:
        return {"policy": "fixed", "gamma": self.gamma}


@dataclass(frozen=True)
class AdaptiveGamma:
    c: float  # draft/target cost ratio of one decode step (0 for a model-free drafter)
    beta: BetaCurve  # β(n) of the target in the dtype that runs
    alpha_prior: float = DEFAULT_ALPHA_PRIOR  # α before this generation has tested any draft
    prior_weight: float = 4.0  # the prior counts as this many tested drafts
    gamma_max: int = 16  # largest γ considered (bounded by the profile's n_max − 1)

    def __post_init__(self) -> None:
        if not 0.0 <= self.alpha_prior <= 1.0:
            raise ValueError(f"alpha_prior must be in [0, 1], got {self.alpha_prior}")
        if self.prior_weight <= 0:
            raise ValueError(f"prior_weight must be > 0, got {self.prior_weight}")
        if not 1 <= self.gamma_max <= self.beta.n_max - 1:
            raise ValueError(f"gamma_max must be in 1..{self.beta.n_max - 1} (the β curve's n_max − 1), "
                             f"got {self.gamma_max}")
        if self.c < 0:
            raise ValueError(f"c must be >= 0, got {self.c}")

    @classmethod
    def from_profile(cls, profile: Profile, model_free: bool, alpha_prior: float | None = None,
                     gamma_max: int = 16) -> "AdaptiveGamma":
        c = 0.0 if model_free else profile.c
        if c is None:
            raise ValueError("gamma auto with a draft model needs a profile with the draft's timing "
                             "(calibrate with --draft)")
        return cls(c=c, beta=profile.beta_curve(), gamma_max=min(gamma_max, profile.n_max - 1),
                   alpha_prior=DEFAULT_ALPHA_PRIOR if alpha_prior is None else alpha_prior)

    def alpha_estimate(self, accepted: int, tested: int) -> float:
        return (self.prior_weight * self.alpha_prior + accepted) / (self.prior_weight + tested)

    def choose(self, accepted: int, tested: int) -> int:
        """γ for the next step, from the drafts accepted and tested so far in this generation."""
        return int(optimal_gamma(self.alpha_estimate(accepted, tested), self.c, self.gamma_max, beta=self.beta))

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["beta"] = {"ns": list(self.beta.ns), "values": list(self.beta.values)}
        return {"policy": "adaptive", **d}


GammaPolicy = FixedGamma | AdaptiveGamma
