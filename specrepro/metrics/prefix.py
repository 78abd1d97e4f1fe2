"""B different sequences of one length, cached once, scored n new tokens at a time.

``BatchedPrefix`` is what a batched forward is timed on, by the device profile (``profile.forward_timer``,
``calibrate.prefill_time`` at B > 1) and by the batching measurement (``batching.measure_batching``): it runs
through the package's batch cache, so on the engine where the model carries one, exactly as batched decoding's
verification does. Its own module so that every reader takes it and none imports another's measuring code.
"""
from __future__ import annotations

from typing import Sequence

import torch

from ..core.batch_cache import BatchCache


def batch_contexts(context: Sequence[int], batch: int) -> torch.Tensor:
    """B different sequences of len(context) tokens: row b is ``context`` rotated left by b·stride. -> [B, L]"""
    if batch < 1:
        raise ValueError(f"batch size B must be >= 1, got {batch}")
    if len(context) < 1:
        raise ValueError("the context is empty: give at least one token")
    ids = torch.as_tensor(list(context), dtype=torch.long)  # [L]
    stride = max(1, len(context) // batch)
    return torch.stack([ids.roll(-b * stride) for b in range(batch)])  # [B, L]


class BatchedPrefix:
    """B sequences of L tokens each, prefilled once into the package's batch cache (``core.batch_cache``: the
    engine's static cache where the model carries an engine); ``forward(new)`` scores n new tokens in every sequence
    as a batched verification scores a chain (the first as the root, the rest as its nodes: n columns, logits for
    all n) and leaves them pending, so that the next call keeps none of them and every call follows the same
    L-token prefix. Construction is the batched prefill."""

    def __init__(self, model: torch.nn.Module, contexts: torch.Tensor):
        if contexts.dim() != 2 or contexts.shape[0] < 1 or contexts.shape[1] < 1:
            raise ValueError(f"contexts must be [B, L] with B, L >= 1, got {tuple(contexts.shape)}")
        self.batch, self.prefix_len = contexts.shape
        self.rows = [row.tolist() for row in contexts]
        self.cache = BatchCache(model, self.batch)
        self.cache.score(self.rows)  # the prefill: every row's L tokens cached
        self.cache.keep([[] for _ in self.rows])

    def forward(self, new: torch.Tensor) -> torch.Tensor:
        """new [B, n] -> logits [B, n, V]: row (b, i) is the next-token logits after prefix b and new[b, :i+1]."""
        if new.dim() != 2 or new.shape[0] != self.batch or new.shape[1] < 1:
            raise ValueError(f"new tokens must be [{self.batch}, n] with n >= 1, got {tuple(new.shape)}")
        new = new.cpu()
        chain = torch.arange(-1, new.shape[1] - 2, dtype=torch.long)  # node i's parent: node i − 1 (the root for 0)
        logits, _ = self.cache.score([row + [int(t[0])] for row, t in zip(self.rows, new)],
                                     [(t[1:], chain) for t in new])
        return logits  # [B, n, V]
