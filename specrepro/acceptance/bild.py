"""BiLD's rollback policy as a tree rule: LOSSY, with the signature of ``acceptance.base``.

Kim et al. 2023, *Speculative Decoding with Big Little Decoder* (NeurIPS; arXiv 2302.07863, §3, "Rollback
policy"), a baseline of the MJSD paper (seed 000, §5 "Baselines" and §6: "the large model rejects a token if its
negative log-likelihood is larger than threshold τ2"; Table 5: τ2 ∈ {1, 2, 3}, 2 in four of six settings).

BiLD's distance between the small model's prediction and the large model's is the cross-entropy of the small
model's hard label under the large model's soft label, d(x_i) = −log p_i(x_i): the target's negative
log-likelihood of the drafted token, p_i being the target row the token is scored under. The large model keeps
the longest draft prefix whose every token has d(x_i) ≤ τ2 and rolls back from the first token with
d(x_i) > τ2 (strictly greater, as the paper writes it); a token p gives probability 0 has d = ∞ and is always
rolled back. The token after the kept prefix is the large model's: here drawn from the (warped) p row after the
prefix with uniforms[N]; that is the replacement at the rollback position, or the token at the fallback position
when nothing is rolled back (``drafters.bild.BiLDDrafter`` stops drafting there).

The committed tokens are NOT distributed as p: a drafted token is kept whenever the target finds it likely
enough, however likely the draft found it, and q is never consulted. At T = 0 (one-hot p, d ∈ {0, ∞}) the rule
keeps exactly the prefix that follows the target's argmax, so it is token-identical to greedy decoding.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..core.warping import sample
from .base import TreeRule, TreeVerdict, check_chain_inputs


@dataclass(frozen=True)
class BiLDParams:
    """BiLD's rollback threshold (τ2 in the MJSD paper, α_RB in BiLD's)."""

    rollback_threshold: float = 2.0  # τ2, in nats: keep a drafted token while −log p(x) ≤ τ2 (MJSD Table 5's usual 2)

    def __post_init__(self):
        if not (isinstance(self.rollback_threshold, (int, float)) and 0 <= self.rollback_threshold < math.inf):
            raise ValueError(f"rollback_threshold (τ2, a negative log-likelihood in nats) must be a finite number "
                             f">= 0, got {self.rollback_threshold!r}")


def bild_rollback(
    p: torch.Tensor,  # [N+1, V]
    q: torch.Tensor,  # [N, V]  (unused: the test looks at p only)
    tokens: torch.Tensor,  # [N]
    parents: torch.Tensor,  # [N]  must be a chain: BiLD drafts one sequence
    uniforms: torch.Tensor,  # [N+1]: only uniforms[N] is used
    params: BiLDParams = BiLDParams(),
) -> TreeVerdict:
    """LOSSY. Keep the drafts before the first one with −log p(x_i) > τ2, then draw the next token from the
    p row after them (module docstring). On a chain row i of p scores node i, so the kept prefix has length
    n = min({i | −log p[i, x_i] > τ2} ∪ {N})."""
    n = check_chain_inputs(p, q, tokens, parents, uniforms, "BiLD's rollback")
    nll = -torch.log(p.double()[torch.arange(n, device=p.device), tokens.long()])  # [N] d(x_i), inf where p = 0
    rolled_back = (nll > params.rollback_threshold).nonzero()
    kept = int(rolled_back[0]) if rolled_back.numel() else n
    return TreeVerdict(list(range(kept)), sample(p[kept], uniforms[n]))


BILD_RULE = TreeRule("bild", lossless=False, fn=bild_rollback, params=BiLDParams())
