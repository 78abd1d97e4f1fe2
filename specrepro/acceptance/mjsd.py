"""MJSD's verification: accept the longest draft prefix whose joint likelihood ratio passes a threshold. LOSSY.

Multi-token joint speculative decoding (Qin et al., §3.2 "Draft Tokens Verification", Algorithm 1): a prefix
x_1:j of the draft passes when min(1, p(x_1:j | input) / q(x_1:j | input)) > τ, and the longest passing prefix is
kept, whatever shorter prefixes did. The next token is then drawn from the target's own row after it, not from
a residual. The committed tokens are therefore NOT distributed as p: a draft token the target finds unlikely is
kept when the prefix's joint ratio stays above τ, and the draw after a rejection ignores what was rejected. The
paper means this (it approximates multi-token joint greedy decoding, not p); it is never a default.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..core.warping import sample
from .base import TreeRule, TreeVerdict, check_chain_inputs


@dataclass(frozen=True)
class MJSDParams:
    """Parameters of MJSD's verification (the paper's Table 5: "acc/rej thres τ" = 0.1 for every model and task)."""

    tau: float = 0.1  # τ: a prefix passes when min(1, p(x_1:j)/q(x_1:j)) > τ; 0 keeps any prefix p allows, 1 none

    def __post_init__(self):
        if isinstance(self.tau, bool) or not isinstance(self.tau, (int, float)) or not 0.0 <= self.tau <= 1.0:
            raise ValueError(f"tau (MJSD's threshold on the joint ratio min(1, p/q)) must be a number in [0, 1], "
                             f"got {self.tau!r}")


def mjsd_joint_threshold(
    p: torch.Tensor,  # [N+1, V]
    q: torch.Tensor,  # [N, V]
    tokens: torch.Tensor,  # [N]
    parents: torch.Tensor,  # [N], a chain: [−1, 0, …, N−2]
    uniforms: torch.Tensor,  # [N+1]: only uniforms[N] is used (the test is deterministic)
    params: MJSDParams = MJSDParams(),
) -> TreeVerdict:
    """LOSSY. MJSD's joint-likelihood verification (Qin et al., Algorithm 1 lines 6–17, §3.2) on a draft chain.

    With p(x_1:j) = Π_{i≤j} p_{i−1}(x_i) (p row i−1 is the target's distribution after x_1:i−1) and q(x_1:j)
    likewise from the q rows, η is the largest j in 1..N with min(1, p(x_1:j)/q(x_1:j)) > τ, or 0 when none passes;
    a failing shorter prefix does not stop a longer passing one. Algorithm 1 as printed writes ``η ← j`` with j the
    token id and starts at η = −1; the intent, used here, is η ← i starting at 0 (the seeds README's trap). The
    next token is drawn from p row η (after x_1:η) with uniforms[N]; the path is x_1..x_η.

    Joints are sums of logs (float64), so long drafts do not underflow. A prefix the target gives probability 0
    never passes (not even at τ = 0); one the draft gives probability 0 and the target does not has ratio ∞ and
    passes whenever τ < 1. τ = 1 accepts nothing (min(1, ·) is never above 1), and MJSD becomes sampling from p.
    """
    n = check_chain_inputs(p, q, tokens, parents, uniforms, "MJSD")
    at = torch.arange(n, device=tokens.device)
    x = tokens.long()
    log_p = p.double()[at, x].log().cumsum(0)  # [N] log p(x_1:j), j = 1..N
    log_q = q.double()[at, x].log().cumsum(0)  # [N] log q(x_1:j)
    log_ratio = (log_p - log_q).clamp_max(0.0)  # [N] log min(1, p/q); NaN where both are −inf
    log_tau = math.log(params.tau) if params.tau > 0 else float("-inf")
    passes = (log_p > float("-inf")) & (log_ratio > log_tau)  # [N]
    eta = int(passes.nonzero().max()) + 1 if bool(passes.any()) else 0
    return TreeVerdict(list(range(eta)), sample(p[eta], uniforms[n]))


MJSD_RULE = TreeRule("mjsd", lossless=False, fn=mjsd_joint_threshold, params=MJSDParams())
