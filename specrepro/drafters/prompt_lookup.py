"""Prompt-lookup drafting: copy what followed the last occurrence of the current suffix.

The survey blog (*Non-LM Draft Models*): "use n-grams, but only if they exist in your prompt — this
gives Prompt Lookup Decoding. If the n-gram does not exist in your prompt, fall back to standard
decoding"; the slides (§3.6) list "a model that copies tokens from the context" among the drafts.

For n = ``max_ngram`` down to ``min_ngram``: find the most recent earlier position where the last n
committed tokens (prompt + generated so far) occurred, and propose the up-to-γ tokens that followed it.
With no match the proposal is empty and the loop takes one ordinary decoding step; a token is never
invented. The draft is deterministic (``probs=None``), so the loop verifies it with a one-hot q and the
output distribution stays exactly p.

transformers' ``prompt_lookup_num_tokens`` does the same search but takes the *first* (leftmost)
match and tries n = 2 then 1 by default; here the most recent match wins, since recent text tends to be
the one being repeated.
"""
from __future__ import annotations

import numpy as np
import torch

from ..core.config import SamplingConfig
from .base import Drafter, Proposal


def lookup(ids: list[int], gamma: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """The up-to-γ tokens that followed the latest earlier match of the longest suffix n-gram, or []."""
    seq = np.asarray(ids, dtype=np.int64)  # [T]
    T = seq.shape[0]
    for n in range(min(max_ngram, T - 1), min_ngram - 1, -1):
        # windows[i] = seq[i : i+n] for i = 0 .. T-n-1: every start whose n-gram has a successor.
        windows = np.lib.stride_tricks.sliding_window_view(seq[:-1], n)  # [T-n, n]
        hits = np.flatnonzero((windows == seq[T - n:]).all(axis=1))
        if hits.size:
            start = int(hits[-1]) + n  # the most recent match; start <= T-1, so at least one token
            return seq[start:start + gamma].tolist()
    return []


class PromptLookupDrafter(Drafter):
    name = "prompt-lookup"
    batching = "prompt lookup: a chain copied from the row's own context"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got min_ngram={min_ngram}, max_ngram={max_ngram}")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram

    def propose(self, ids: list[int], gamma: int, sampling: SamplingConfig,
                generator: torch.Generator) -> Proposal:
        tokens = lookup(ids, gamma, self.max_ngram, self.min_ngram)
        return Proposal(tokens=torch.tensor(tokens, dtype=torch.long), probs=None, calls=0)
