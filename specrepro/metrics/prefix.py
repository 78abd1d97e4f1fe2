"""B different sequences of one length, cached once, scored n new tokens at a time: what a batched forward is timed
on, by the device profile (``profile.forward_timer``, ``calibrate.prefill_time`` at B > 1) and by the batching
measurement (``batching.measure_batching``). Its own module so that both read it and neither imports the other's
measuring code.
"""
from __future__ import annotations

from typing import Sequence

import torch
from transformers import DynamicCache

from ..core.decoding import model_device
from ..core.kvcache import drop_last


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
    """B sequences of L tokens each, cached once; ``forward(new)`` scores n new tokens in every sequence in one
    forward and drops them again, so that every call follows the same L-token prefix.

    The cache is this object's own (built by the model's forward over the B prefixes and cut back to L after each
    call by ``kvcache.drop_last``, the package's one crop); it is never a decoding cache.
    """

    def __init__(self, model: torch.nn.Module, contexts: torch.Tensor):
        if contexts.dim() != 2 or contexts.shape[0] < 1 or contexts.shape[1] < 1:
            raise ValueError(f"contexts must be [B, L] with B, L >= 1, got {tuple(contexts.shape)}")
        self.model = model
        self.device = model_device(model)
        self.batch, self.prefix_len = contexts.shape
        self.cache = DynamicCache(config=model.config)
        with torch.inference_mode():
            model(input_ids=contexts.to(self.device), cache=self.cache, use_cache=True,
                  logits_to_keep=1)  # input [B, L]; only the cache is kept

    def forward(self, new: torch.Tensor) -> torch.Tensor:
        """new [B, n] -> logits [B, n, V]: row (b, i) is the next-token logits after prefix b and new[b, :i+1]."""
        if new.dim() != 2 or new.shape[0] != self.batch or new.shape[1] < 1:
            raise ValueError(f"new tokens must be [{self.batch}, n] with n >= 1, got {tuple(new.shape)}")
        with torch.inference_mode():
            out = self.model(input_ids=new.to(self.device), cache=self.cache, use_cache=True)
        drop_last(self.cache, new.shape[1])  # back to the L-token prefix
        return out.logits  # [B, n, V]
