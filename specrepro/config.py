"""Typed configuration: frozen dataclasses, validated on construction and serialised with every result.

Notation (fixed across the package): p = target model, q = draft model, γ (``gamma``) = draft tokens
per step, α = acceptance rate, c = draft/target cost ratio, β = cost of verifying γ+1 tokens relative
to decoding one.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass


# the names of specrepro.acceptance.TREE_RULES: lossless "exact", "greedy" (T = 0), "spectr"; LOSSY "typical"
# (Medusa), "mjsd" (joint-likelihood threshold), "bild" (BiLD's rollback), "mentored" (KL-bounded; exact at D = 0)
ACCEPTANCE_RULES = ("exact", "greedy", "typical", "spectr", "mjsd", "bild", "mentored")
# the names of specrepro.distill.DIVERGENCES (DistillSpec's losses), for the online draft's updates
ONLINE_DIVERGENCES = ("fkl", "rkl", "jsd", "tvd")
# what an online update trains on (training.online.OnlineConfig.examples)
ONLINE_EXAMPLES = ("steps", "sequences")


@dataclass(frozen=True)
class SamplingConfig:
    """How logits become a distribution; applied identically to p and q (slides §2.2)."""

    temperature: float = 0.0  # 0 means exact argmax (a one-hot distribution), never a division by 0
    top_k: int = 0  # keep the k most likely tokens; 0 disables
    top_p: float = 1.0  # nucleus: keep the smallest set with mass >= top_p; 1 disables

    def __post_init__(self) -> None:
        if not (isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature)) or self.temperature < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0 disables it), got {self.top_k!r}")
        if not (isinstance(self.top_p, (int, float)) and 0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


# Named warpings. "mjsd": the MJSD paper's Appendix D, applied to p and q alike: keep the top 20 tokens, then the
# smallest set with mass >= 0.9, at temperature 1. Its "greedy decoding" baseline is AR *sampling* from this.
PRESETS: dict[str, SamplingConfig] = {}


@dataclass(frozen=True)
class MethodParams:
    """Parameters of the MJSD paper's methods and baselines (defaults from its Table 5: Llama, ChatGPT-Prompts) and of
    mentored decoding."""

    num_beams: int = 8  # MJSD: beams of the draft's beam sampling; MJGD: beams of the target's beam search
    tau: float = 0.1  # MJSD: a prefix x_1:j passes when min(1, p(x_1:j)/q(x_1:j)) > τ, τ in [0, 1]
    fallback_threshold: float = 0.9  # BiLD τ1: the draft stops where its max probability falls below τ1
    rollback_threshold: float = 2.0  # BiLD τ2: the target rolls back from the first token with −log p(x) > τ2
    num_drafts: int = 4  # SpecTr m: i.i.d. draft sequences verified together
    kl_bound: float = 0.1  # mentored decoding's D: KL(target ‖ resulting distribution) ≤ D per token; 0 = exact
    # online speculative decoding (training.online.OnlineConfig): a FIFO buffer of verification steps with the
    # target's rows, and an update of the draft after every L-th served sequence
    online_buffer: int = 128  # verification steps kept
    online_every: int = 8  # L: sequences between updates
    online_steps: int = 1  # optimiser steps per update
    online_lr: float = 1e-4  # AdamW learning rate of the draft
    online_divergence: str = "fkl"  # fkl | rkl | jsd | tvd (specrepro.distill.DIVERGENCES)
    online_examples: str = "steps"  # steps (each verification step re-run over its context) | sequences (one each)

    def __post_init__(self) -> None:
        def whole(x) -> bool:
            return isinstance(x, int) and not isinstance(x, bool)
        if not whole(self.num_beams) or self.num_beams < 1:
            raise ValueError(f"num_beams must be an integer >= 1, got {self.num_beams!r}")
        if not whole(self.num_drafts) or self.num_drafts < 1:
            raise ValueError(f"num_drafts must be an integer >= 1, got {self.num_drafts!r}")
        if not (isinstance(self.tau, (int, float)) and 0.0 <= self.tau <= 1.0):
            raise ValueError(f"tau (MJSD's acceptance threshold) must be in [0, 1], got {self.tau!r}")
        if not (isinstance(self.fallback_threshold, (int, float)) and 0.0 <= self.fallback_threshold <= 1.0):
            raise ValueError(f"fallback_threshold (BiLD τ1, a probability) must be in [0, 1], "
                             f"got {self.fallback_threshold!r}")
        if not (isinstance(self.kl_bound, (int, float)) and math.isfinite(self.kl_bound) and self.kl_bound >= 0):
            raise ValueError(f"kl_bound (mentored decoding's D, in nats) must be a finite number >= 0, "
                             f"got {self.kl_bound!r}")
        if not (isinstance(self.rollback_threshold, (int, float)) and math.isfinite(self.rollback_threshold)
                and self.rollback_threshold >= 0):
            raise ValueError(f"rollback_threshold (BiLD τ2, a cross-entropy in nats) must be a finite number >= 0, "
                             f"got {self.rollback_threshold!r}")
        for name, what in (("online_buffer", "the buffer size"), ("online_every", "L, sequences between updates"),
                           ("online_steps", "optimiser steps per update")):
            if not whole(getattr(self, name)) or getattr(self, name) < 1:
                raise ValueError(f"{name} ({what}) must be an integer >= 1, got {getattr(self, name)!r}")
        if not (isinstance(self.online_lr, (int, float)) and math.isfinite(self.online_lr) and self.online_lr > 0):
            raise ValueError(f"online_lr must be a finite number > 0, got {self.online_lr!r}")
        if self.online_examples not in ONLINE_EXAMPLES:
            raise ValueError(f"online_examples must be one of {', '.join(ONLINE_EXAMPLES)}, "
                             f"got {self.online_examples!r}")
        if self.online_divergence not in ONLINE_DIVERGENCES:
            raise ValueError(f"online_divergence must be one of {', '.join(ONLINE_DIVERGENCES)}, "
                             f"got {self.online_divergence!r}")


@dataclass(frozen=True)
class DecodeConfig:
    """One generation: which method, how many tokens, the sampling rule and the seed."""

    method: str = "speculative"  # "ar" or "speculative" (later methods register more names)
    max_new_tokens: int = 64  # hard cap; a step that accepts several tokens never overshoots it
    gamma: int | str = 4  # γ, draft tokens per target call (ignored by "ar"); "auto": chosen each step (adaptive.py)
    sampling: SamplingConfig = SamplingConfig()
    tree_size: int | None = None  # nodes of a drafter's token tree (Medusa, PPD); None: the drafter's default
    # acceptance rule of the verification loop (``acceptance.TREE_RULES``): "exact" (lossless at any T), "greedy"
    # (T = 0 only) or "typical" (Medusa's typical acceptance: LOSSY, never a default)
    acceptance: str = "exact"
    seed: int = 0  # seeds the torch.Generator that supplies every uniform the decoder draws
    stop_at_eos: bool = True
    params: MethodParams = MethodParams()  # MJSD, MJGD, BiLD and SpecTr parameters (ignored by other methods)

    def __post_init__(self) -> None:
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an integer >= 1, got {self.max_new_tokens!r}")
        if self.gamma != "auto" and (not isinstance(self.gamma, int) or isinstance(self.gamma, bool) or self.gamma < 1):
            raise ValueError(f"gamma (draft tokens per step) must be an integer >= 1 or 'auto', got {self.gamma!r}")
        if self.tree_size is not None and (not isinstance(self.tree_size, int) or self.tree_size < 1):
            raise ValueError(f"tree_size must be an integer >= 1 (nodes of the draft tree), got {self.tree_size!r}")
        if self.acceptance not in ACCEPTANCE_RULES:
            raise ValueError(f"acceptance must be one of {ACCEPTANCE_RULES}, got {self.acceptance!r}")
        if self.acceptance == "greedy" and not self.sampling.greedy:
            raise ValueError(f"acceptance 'greedy' keeps the target's argmax, exact only at temperature 0 (got "
                             f"{self.sampling.temperature}); use 'exact' to sample")
        if not isinstance(self.seed, int):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


PRESETS["mjsd"] = SamplingConfig(temperature=1.0, top_k=20, top_p=0.9)
