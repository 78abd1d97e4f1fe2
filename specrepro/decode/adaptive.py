"""How many drafts to propose at each step: a fixed γ, or the γ the measured costs say is best right now.

``--gamma auto`` (issue 12) picks, before every step, the γ that maximises the expected speedup (``specrepro.core.cost``)

    E[speedup](γ) = τ(γ) (1 + h_AR) / (γc + β(γ+1) + h_spec),    τ(γ) = 1 + Σ_{i=1}^{γ} Π_{j≤i} α_j

with c, the β(n) curve and the host's work per step (h_AR for a plain step, h_spec for a speculative one, both in
units of L_fp(1): ``Profile.host``, 0 when the profile has no such measurement) of the device profile
(``specrepro.metrics.profile``), and running estimates of the
conditional acceptance rates α_i = P(draft i accepted | drafts 1..i−1 accepted), each starting from a prior
that counts as ``prior_weight`` tests and adding every test this generation made at position i:

    α̂_i = (prior_weight · α_prior + accepted at i) / (prior_weight + tested at i).

With every α_i equal this is the survey blog's (*Batch Size*) (1 − α^{γ+1}) / ((1 − α)(γc + β(γ+1))) and the
slides' Fig. 3 choice (with β = 1); per position it also fits drafts whose acceptances are not i.i.d.: prompt
lookup either copies a long span that keeps being accepted or fails at its first token, so its later α_i are
much higher than its first, and a single pooled α would choose γ too short. Positions never tested yet keep
their prior, so a longer γ is tried when the prior says it may pay. Fixed γ stays the default, so the
documents' tables are reproduced at the γ they name.

When no γ is predicted to beat plain decoding (every E[speedup](γ) ≤ 1: the drafts are failing, or drafting costs
more than it can save), the policy asks for γ = 0: the step verifies the newest token alone, as AR does, and the
loop records why (``explain``). With no draft tested after that the estimates stand still, so the generation goes
on as AR: a drafter that stopped paying is not tried again in that generation.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from simulations.speculative import BetaCurve

from ..core.cost import step_cost, tau_by_position
from ..metrics.profile import DEFAULT_ALPHA_PRIOR, Profile


@dataclass(frozen=True)
class FixedGamma:
    gamma: int  # γ at every step

    def choose(self, accept_lengths: list[int], proposed_lengths: list[int]) -> int:
        return self.gamma

    def explain(self, accept_lengths: list[int], proposed_lengths: list[int]) -> str:
        return f"γ fixed at {self.gamma}"

    def to_dict(self) -> dict:
        return {"policy": "fixed", "gamma": self.gamma}


@dataclass(frozen=True)
class AdaptiveGamma:
    c: float  # draft/target cost ratio of one decode step (0 for a model-free drafter)
    beta: BetaCurve  # β(n) of the target in the dtype that runs
    alpha_prior: float = DEFAULT_ALPHA_PRIOR  # α_i before this generation has tested position i
    prior_weight: float = 4.0  # the prior counts as this many tests at each position
    gamma_max: int = 16  # largest γ considered (bounded by the profile's n_max − 1)
    host_ar: float = 0.0  # the host's work of a plain step, in target decode steps (L_fp(1))
    host_spec: float = 0.0  # the host's work of a speculative step, in target decode steps

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
        if not (self.host_ar >= 0 and self.host_spec >= 0):
            raise ValueError(f"host_ar and host_spec must be >= 0, got {self.host_ar} and {self.host_spec}")

    @classmethod
    def from_profile(cls, profile: Profile, model_free: bool, alpha_prior: float | None = None,
                     gamma_max: int = 16) -> "AdaptiveGamma":
        c = 0.0 if model_free else profile.c
        if c is None:
            raise ValueError("gamma auto with a draft model needs a profile with the draft's timing "
                             "(calibrate with --draft)")
        return cls(c=c, beta=profile.beta_curve(), gamma_max=min(gamma_max, profile.n_max - 1),
                   alpha_prior=DEFAULT_ALPHA_PRIOR if alpha_prior is None else alpha_prior,
                   host_ar=profile.host_s(0) / profile.decode_s, host_spec=profile.host_s(1) / profile.decode_s)

    def alpha_estimates(self, accept_lengths: list[int], proposed_lengths: list[int]) -> np.ndarray:
        """α̂_i for i = 1..gamma_max [G]: draft i was tested at a step that proposed ≥ i drafts and accepted
        ≥ i − 1 of them, and accepted when the step accepted ≥ i."""
        a = np.asarray(accept_lengths, dtype=np.int64)  # [S]
        g = np.asarray(proposed_lengths, dtype=np.int64)  # [S]
        i = np.arange(1, self.gamma_max + 1)[:, None]  # [G, 1]
        tested = ((g >= i) & (a >= i - 1)).sum(1) if a.size else np.zeros(self.gamma_max)  # [G]
        accepted = (a >= i).sum(1) if a.size else np.zeros(self.gamma_max)  # [G]
        return (self.prior_weight * self.alpha_prior + accepted) / (self.prior_weight + tested)

    def speedups(self, accept_lengths: list[int], proposed_lengths: list[int]) -> np.ndarray:
        """E[speedup] for γ = 1..gamma_max [G] under the current estimates."""
        tokens = tau_by_position(self.alpha_estimates(accept_lengths, proposed_lengths))  # [G]
        steps = step_cost(np.arange(1, self.gamma_max + 1), self.c, self.beta) + self.host_spec  # [G]
        return tokens * (1 + self.host_ar) / steps  # [G]

    def choose(self, accept_lengths: list[int], proposed_lengths: list[int]) -> int:
        """γ for the next step, from the accept and proposal lengths of this generation's steps so far: the best
        γ, or 0 (verify the newest token alone, as AR) when no γ is predicted to beat plain decoding."""
        speedups = self.speedups(accept_lengths, proposed_lengths)
        best = int(np.argmax(speedups))
        return best + 1 if speedups[best] > 1.0 else 0

    def explain(self, accept_lengths: list[int], proposed_lengths: list[int]) -> str:
        """Why :meth:`choose` gives what it gives: the best γ's predicted speedup and what it rests on."""
        speedups = self.speedups(accept_lengths, proposed_lengths)
        best = int(np.argmax(speedups))
        alpha = self.alpha_estimates(accept_lengths, proposed_lengths)[0]
        host = (f", host {self.host_spec:.3f} a step against AR's {self.host_ar:.3f}"
                if self.host_spec or self.host_ar else "")
        return (f"best predicted speedup {speedups[best]:.3f} at γ = {best + 1} (α̂_1 = {alpha:.3f}, c = "
                f"{self.c:.3g}, β({best + 2}) = {float(self.beta(best + 2)):.3f}{host}"
                f"{'' if speedups[best] > 1.0 else '; not above 1, so γ = 0: plain decoding'})")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["beta"] = {"ns": list(self.beta.ns), "values": list(self.beta.values)}
        return {"policy": "adaptive (per-position α)", **d}


GammaPolicy = FixedGamma | AdaptiveGamma
