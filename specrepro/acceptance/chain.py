"""Acceptance rules: pure functions on tensors, no model or cache inside, randomness passed in.

Each rule maps ``(p, q, draft_tokens, uniforms)`` to ``(n_accepted, next_token)``:

    p            [γ+1, V]  target distributions at the γ+1 verified positions (already warped)
    q            [γ, V]    draft distributions the draft tokens were sampled from (one-hot if deterministic)
    draft_tokens [γ]       x_1..x_γ
    uniforms     [γ+1]     U(0, 1): r_1..r_γ for the accept tests, the last one to sample the next token

``next_token`` is the recovered (residual) token after a rejection, or the bonus token from p_{γ+1}
when all γ drafts are accepted.
"""
from __future__ import annotations

import torch

from ..core.warping import sample


def _check(p: torch.Tensor, q: torch.Tensor, draft_tokens: torch.Tensor, uniforms: torch.Tensor) -> int:
    gamma = draft_tokens.shape[0]
    if p.dim() != 2 or q.dim() != 2 or p.shape[0] != gamma + 1 or q.shape[0] != gamma or p.shape[1] != q.shape[1]:
        raise ValueError(
            f"expected p [γ+1, V], q [γ, V], draft_tokens [γ]; got p {tuple(p.shape)}, q {tuple(q.shape)}, "
            f"draft_tokens {tuple(draft_tokens.shape)}"
        )
    if uniforms.shape[0] != gamma + 1:
        raise ValueError(f"expected γ+1 = {gamma + 1} uniforms, got {uniforms.shape[0]}")
    return gamma


def speculative_sampling(
    p: torch.Tensor,  # [γ+1, V]
    q: torch.Tensor,  # [γ, V]
    draft_tokens: torch.Tensor,  # [γ]
    uniforms: torch.Tensor,  # [γ+1]
) -> tuple[int, int]:
    """Leviathan et al. Algorithm 1 (slides §2.3) / Chen et al.: exact sampling from p.

    n = min({i − 1 | r_i > p_i(x_i)/q_i(x_i)} ∪ {γ}); the next token is drawn from
    norm(max(0, p_{n+1} − q_{n+1})) if n < γ, else from p_{γ+1}.
    The test is written ``r·q < p`` (accept), which never accepts a token with p(x) = 0, even at r = 0.
    """
    gamma = _check(p, q, draft_tokens, uniforms)
    idx = torch.arange(gamma, device=p.device)
    p_x = p[idx, draft_tokens].double()  # [γ]
    q_x = q[idx, draft_tokens].double()  # [γ]
    rejected = (uniforms[:gamma].double() * q_x >= p_x).nonzero()
    n = int(rejected[0]) if rejected.numel() else gamma
    if n == gamma:
        return n, sample(p[gamma], uniforms[gamma])
    residual = (p[n].double() - q[n].double()).clamp_min(0.0)  # [V]
    if residual.sum() <= 0:
        # Only reachable when p_{n+1} == q_{n+1} up to rounding, where rejection has probability 0.
        residual = p[n].double()
    return n, sample(residual, uniforms[gamma])


def greedy_match(
    p: torch.Tensor,  # [γ+1, V]
    q: torch.Tensor,  # [γ, V]  (unused: only the draft tokens matter)
    draft_tokens: torch.Tensor,  # [γ]
    uniforms: torch.Tensor,  # [γ+1] (unused)
) -> tuple[int, int]:
    """T = 0 rule: accept while the draft equals the target's argmax, then emit the target's argmax.

    Identical in outcome to ``speculative_sampling`` on one-hot p, kept separate because it is the rule
    every greedy speculative decoder (and transformers' assisted generation) implements.
    """
    gamma = _check(p, q, draft_tokens, uniforms)
    target_argmax = p.argmax(-1)  # [γ+1]
    mismatch = (target_argmax[:gamma] != draft_tokens).nonzero()
    n = int(mismatch[0]) if mismatch.numel() else gamma
    return n, int(target_argmax[n])
