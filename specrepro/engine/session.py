"""One forward's inputs for the engine, from what the caches know: which slots each new column may see.

Both caches of the package (``kvcache.CachedModel`` for one sequence, ``batch_cache.BatchCache`` for B rows) say
what a forward is with one boolean matrix ``allowed [B, Q, start + Q]``: column q (written into slot start + q) may
attend slot j. ``run`` turns it into the engine's static shapes: the Q columns in chunks of at most 64, each padded
to a bucket, each padding column attending to its own slot only; the attended slots rounded up to a multiple of
``SLOT_BLOCK``; the boolean matrix into the additive mask the graph takes (0 = attend, the dtype's min = not).
Columns are run in order and a column only sees earlier slots or itself, so chunking never changes a result.
"""
from __future__ import annotations

import torch

from .runner import BUCKETS, Engine, StaticKV, _round, bucket


def run(engine: Engine, kv: StaticKV, x: torch.Tensor, positions: torch.Tensor, allowed: torch.Tensor,
        start: int) -> torch.Tensor:
    """x [B, Q, H], positions [B, Q], allowed [B, Q, start + Q] (bool, on the CPU) -> hidden [L+1, B, Q, H].

    Column q's key and value go to slot start + q of every row."""
    b, q_len, _ = x.shape
    kv.reserve(_round(start + q_len + BUCKETS[-1]))  # room for the padding columns of the last chunk
    out = []
    for lo in range(0, q_len, BUCKETS[-1]):
        hi = min(q_len, lo + BUCKETS[-1])
        out.append(_chunk(engine, kv, x[:, lo:hi], positions[:, lo:hi], allowed[:, lo:hi, :start + hi], start + lo))
    return out[0] if len(out) == 1 else torch.cat(out, dim=2)


def _chunk(engine: Engine, kv: StaticKV, x: torch.Tensor, positions: torch.Tensor, allowed: torch.Tensor,
           first: int) -> torch.Tensor:
    """One bucket: columns written at slots first, first + 1, …; allowed [B, n, first + n]."""
    b, n, h = x.shape
    size = bucket(n)
    attended = _round(first + size)
    device = engine.device
    mask = torch.zeros(b, size, attended, dtype=torch.bool)  # [B, Qb, S]
    mask[:, :n, :first + n] = allowed
    pad = torch.arange(n, size)
    mask[:, pad, first + pad] = True  # a padding column sees itself only (its output is dropped)
    additive = torch.zeros(mask.shape, dtype=engine.dtype).masked_fill_(~mask, torch.finfo(engine.dtype).min)
    if size != n:
        x = torch.cat([x, x.new_zeros(b, size - n, h)], dim=1)  # [B, Qb, H]
        positions = torch.cat([positions, positions[:, -1:].expand(b, size - n)], dim=1)
    slots = torch.arange(first, first + size)
    hidden = engine.forward(x, positions.to(device), slots.to(device), additive[:, None].to(device), kv)
    return hidden[:, :, :n]  # [L+1, B, n, H]
