"""A causal LM with its KV cache and the token ids that cache holds.

This is the one place a cache is rolled back. Callers say which sequence they want scored; the wrapper
keeps the longest common prefix of what it holds and that sequence (``DynamicCache.crop`` takes the
negative count of tokens to drop) and runs the model on the rest. Rejected draft entries therefore
disappear at the next call, or at once when the decoding loop calls ``rollback``.

Invariant, checked by ``check()``: cache length == len(self.ids).
"""
from __future__ import annotations

import torch
from transformers import DynamicCache


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class CachedModel:
    """Batch size 1: ``ids`` is one sequence. Batched decoding is a later goal."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.device = next(model.parameters()).device
        self.reset()

    def reset(self) -> None:
        self.cache = DynamicCache(config=self.model.config)
        self.ids: list[int] = []  # tokens whose keys/values are in the cache

    @property
    def cache_len(self) -> int:
        return self.cache.get_seq_length()

    def rollback(self, keep: int) -> None:
        """Drop every cached position from ``keep`` on."""
        drop = len(self.ids) - keep
        if drop > 0:
            self.cache.crop(-drop)
            del self.ids[keep:]

    def logits_for(self, ids: list[int], n_last: int = 1) -> torch.Tensor:
        """Score ``ids``: returns logits [n_new, V] for the positions not already cached, n_new >= n_last.

        Row i is the next-token distribution after ids[: len(ids) - n_new + i + 1], so the final row is
        the next-token logits after all of ``ids``. At least the last ``n_last`` positions are computed.
        """
        if not 1 <= n_last <= len(ids):
            raise ValueError(f"n_last must be in [1, {len(ids)}], got {n_last}")
        keep = min(common_prefix(self.ids, ids), len(ids) - n_last)
        self.rollback(keep)
        new = torch.tensor([ids[keep:]], dtype=torch.long, device=self.device)  # [1, n_new]
        with torch.inference_mode():
            out = self.model(input_ids=new, past_key_values=self.cache, use_cache=True)
        self.ids.extend(ids[keep:])
        return out.logits[0]  # [n_new, V]

    def check(self) -> None:
        if self.cache_len != len(self.ids):
            raise AssertionError(f"cache holds {self.cache_len} positions but {len(self.ids)} token ids")
