"""One warping pipeline, logits -> probabilities, applied identically to target (p) and draft (q).

The order is transformers' (temperature, then top-k, then top-p), so a distribution here equals the one
``model.generate(do_sample=True, temperature=..., top_k=..., top_p=...)`` samples from. At T = 0 the
distribution is one-hot on the argmax (slides §2.2: "argmax is sampling from the distribution with every
probability but the maximum set to zero"); speculative sampling then reduces to "accept while the draft
equals the target's argmax".
"""
from __future__ import annotations

import torch

from .config import SamplingConfig


def warp(logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """Turn logits [..., V] into float32 probabilities [..., V] under ``sampling``."""
    logits = logits.float()
    if sampling.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    x = logits / sampling.temperature
    if 0 < sampling.top_k < x.shape[-1]:
        kth = torch.topk(x, sampling.top_k, dim=-1).values[..., -1:]  # [..., 1]
        x = x.masked_fill(x < kth, float("-inf"))
    if sampling.top_p < 1.0:
        # As transformers' TopPLogitsWarper: drop the low tail whose cumulative mass is <= 1 - top_p,
        # always keeping the most likely token.
        sorted_x, order = torch.sort(x, dim=-1, descending=False)  # [..., V] ascending
        cum = sorted_x.softmax(-1).cumsum(-1)
        drop_sorted = cum <= (1.0 - sampling.top_p)
        drop_sorted[..., -1] = False
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        x = x.masked_fill(drop, float("-inf"))
    return x.softmax(-1)


def sample(probs: torch.Tensor, u: float | torch.Tensor) -> int:
    """Draw one token from probs [V] by inverse CDF with a given uniform u in [0, 1).

    Randomness is passed in, so the draw is a pure function. ``right=True`` means a token of
    probability 0 (a flat step of the CDF) can never be returned.
    """
    cdf = probs.double().cumsum(-1)  # [V]
    # u as a Python float: a host uniform is not copied onto the device for one multiplication (on a GPU that copy
    # waits for the queue); the product is the float64 u·cdf[-1] either way.
    target = cdf[-1:] * float(u)  # [1]
    idx = torch.searchsorted(cdf, target, right=True)
    return int(idx.clamp(max=probs.shape[-1] - 1))  # the one read: on a device, the token's wait


def one_hot(tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """q for a deterministic drafter: tokens [γ] -> probabilities [γ, V], 1 on each proposed token."""
    return torch.nn.functional.one_hot(tokens.long(), vocab_size).float()
