"""The distillation losses: DistillSpec's divergences between the teacher p and the student q, and the loss of a
draft on a batch of teacher rows (survey blog, "Draft Model Distillation"; Zhou et al. 2023, DistillSpec).

Each divergence takes the teacher p [..., M] (probabilities) and the student log q [..., M] over the same M
outcomes and returns the divergence per row [...]. Terms with p = 0 (or q = 0) are dropped, as 0 log 0 = 0; logs
are made finite before use so that masked entries never put NaN into gradients.

``batch_loss`` is what every draft trainer steps on (the offline draft, the DistillSpec cells, the online
updates): the teacher's stored top-k rows and the student's reduced-vocabulary rows, coarsened to the same
outcomes (``coarsen``), under one divergence.
"""
from __future__ import annotations

from typing import Callable

import torch

from ..engine.draft_model import ReducedVocabDraft
from .data import DistillBatch

EPS = 1e-12


def _safe_log(x: torch.Tensor) -> torch.Tensor:
    return torch.log(x.clamp_min(EPS))


def fkl(p: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """Forward KL(p || q) = Σ p log(p / q): mode covering."""
    logq = torch.where(p > 0, logq, torch.zeros_like(logq))
    return torch.where(p > 0, p * (_safe_log(p) - logq), torch.zeros_like(p)).sum(-1)


def rkl(p: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """Reverse KL(q || p) = Σ q log(q / p): mode seeking."""
    q = logq.exp()
    logq = torch.where(q > 0, logq, torch.zeros_like(logq))
    return torch.where(q > 0, q * (logq - _safe_log(p)), torch.zeros_like(q)).sum(-1)


def jsd(p: torch.Tensor, logq: torch.Tensor, beta: float = 0.5) -> torch.Tensor:
    """Generalised Jensen-Shannon: β KL(p || m) + (1 − β) KL(q || m), m = β p + (1 − β) q (GKD, DistillSpec)."""
    q = logq.exp()
    logm = _safe_log(beta * p + (1 - beta) * q)  # [..., M]
    logq = torch.where(q > 0, logq, torch.zeros_like(logq))
    kl_qm = torch.where(q > 0, q * (logq - logm), torch.zeros_like(q)).sum(-1)
    return beta * fkl(p, logm) + (1 - beta) * kl_qm


def tvd(p: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """Total variation ½ Σ |p − q|; the acceptance rate of q for p is α = Σ min(p, q) = 1 − TVD."""
    return 0.5 * (p - logq.exp()).abs().sum(-1)


DIVERGENCES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "fkl": fkl, "rkl": rkl, "jsd": jsd, "tvd": tvd}


def coarsen(logq_kept: torch.Tensor, token_map: torch.Tensor, top_ids: torch.Tensor, top_probs: torch.Tensor,
            tail: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher and student as distributions over the K teacher top ids + one "rest" outcome: (p, log q) [..., K+1].

    logq_kept [..., N] are the student's log-probs over its kept ids; token_map [V] maps a full id to its
    draft index (N = not kept). A teacher top id the draft cannot emit has q = 0, so its teacher mass moves
    into "rest" (a merge of outcomes never increases an f-divergence, so this is a lower bound of the full one).
    """
    n_kept = logq_kept.shape[-1]
    idx = token_map[top_ids]  # [..., K]
    kept = idx < n_kept
    p_top = torch.where(kept, top_probs, torch.zeros_like(top_probs))  # [..., K]
    p_rest = tail + (top_probs - p_top).sum(-1)  # [...]
    logq_top = logq_kept.gather(-1, idx.clamp(max=n_kept - 1)).masked_fill(~kept, float("-inf"))  # [..., K]
    q_rest = (1 - logq_top.exp().sum(-1)).clamp(min=EPS)  # [...]
    p = torch.cat([p_top, p_rest.clamp(min=0).unsqueeze(-1)], -1)  # [..., K+1]
    logq = torch.cat([logq_top, q_rest.log().unsqueeze(-1)], -1)  # [..., K+1]
    return p, logq


def student_rows(draft: ReducedVocabDraft, batch: DistillBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """At the R positions with a teacher row: the student's log q over its kept ids [R, N], and teacher and
    student coarsened to the teacher's top-k + "rest" (``coarsen``): (p, log q) [R, K+1] each."""
    batch = batch.to(draft.token_map.device)  # collated on the CPU; the student may be on a GPU
    z, _ = draft.reduced_logits(batch.input_ids, use_cache=False)  # [B, T, N]
    logq = z.float().log_softmax(-1)[batch.row_mask]  # [R, N]
    p, logq_c = coarsen(logq, draft.token_map, batch.top_ids[batch.row_mask], batch.top_probs[batch.row_mask],
                        batch.tail[batch.row_mask])  # [R, K+1] each
    return logq, p, logq_c


def batch_loss(draft: ReducedVocabDraft, batch: DistillBatch, divergence: str = "fkl") -> torch.Tensor:
    """Mean divergence(teacher, student) over the positions with a teacher row."""
    _, p, logq_c = student_rows(draft, batch)
    return DIVERGENCES[divergence](p, logq_c).mean()
