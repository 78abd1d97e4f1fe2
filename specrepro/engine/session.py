"""One forward's inputs for the engine, from what the caches know: which slots each new column may see.

Both caches of the package (``kvcache.CachedModel`` for one sequence, ``batch_cache.BatchCache`` for B rows) say
what a forward is with one boolean matrix ``allowed [B, Q, start + Q]``: column q (written into slot start + q) may
attend slot j. ``run`` turns it into the engine's shapes: the Q columns in chunks of at most 64 (``Engine.columns``: when compiled
each chunk is padded to a bucket, each padding column attending to its own slot only; eager runs the exact
columns); the attended slots rounded up (``Engine.attended``: to a multiple of ``SLOT_BLOCK`` compiled, of
``EAGER_SLOTS`` eager); the boolean matrix into the additive mask the graph takes (0 = attend, the dtype's min = not).
Columns are run in order and a column only sees earlier slots or itself, so chunking never changes a result.

Host and device: the ids, positions and the boolean matrix travel to the device in ONE copy per call (packed into
one int64 buffer, pinned and asynchronous on CUDA), and everything after it is built there, so a forward makes no
host sync of its own.
"""
from __future__ import annotations

import torch

from .runner import BUCKETS, Engine, StaticKV, _round


def run(engine: Engine, kv: StaticKV, ids: torch.Tensor, positions: torch.Tensor, allowed: torch.Tensor,
        start: int, extra: torch.Tensor | None = None) -> torch.Tensor:
    """ids [B, Q'] and positions [B, Q] (host, long), allowed [B, Q, start + Q] (host, bool), ``extra`` [B, P, H]
    embeddings (on the device) for the last P = Q − Q' columns (PPD's prompt nodes) -> hidden [L+1, B, Q, H].

    Column q's key and value go to slot start + q of every row."""
    b, q_len = positions.shape
    kv.reserve(_round(start + q_len + BUCKETS[-1]))  # room for the padding columns of the last chunk
    ids_dev, pos_dev, allowed_dev = _upload(engine, ids, positions, allowed)
    x = engine.embed(ids_dev)  # [B, Q', H]
    if extra is not None:
        x = torch.cat([x, extra.to(x)], dim=1)  # [B, Q, H]
    out = []
    for lo in range(0, q_len, BUCKETS[-1]):
        hi = min(q_len, lo + BUCKETS[-1])
        out.append(_chunk(engine, kv, x[:, lo:hi], pos_dev[:, lo:hi], allowed_dev[:, lo:hi, :start + hi], start + lo))
    return out[0] if len(out) == 1 else torch.cat(out, dim=2)


def run_rows(engine: Engine, kv: StaticKV, ids: torch.Tensor, positions: torch.Tensor, allowed: torch.Tensor,
             start: int, spans: list[tuple[int, int] | None]) -> torch.Tensor:
    """``run``'s columns row by row, over each row's real columns ``spans[b]`` = [first, end) alone (None: row b
    sits out), each written into the slot ``run`` would write it to -> the final-norm output [B, Q, H], zeros
    outside the spans. A prefill of ragged prompts together pads every row to the longest; this reads no padding
    column. The same numbers as ``run``'s in the spans: a padding column's output and slot are never read, and
    every kernel's row is the same whatever rows share its forward."""
    b_size, q_len = positions.shape
    kv.reserve(_round(start + q_len + BUCKETS[-1]))
    states = None
    for b, span in enumerate(spans):
        if span is None:
            continue
        cols = slice(*span)
        hidden = run(engine, kv.row(b), ids[b:b + 1, cols], positions[b:b + 1, cols],
                     allowed[b:b + 1, cols, :start + span[1]], start + span[0])[-1]  # [1, Q_b, H]
        if states is None:
            states = hidden.new_zeros(b_size, q_len, hidden.shape[-1])
        states[b, cols] = hidden[0]
    return states


def _upload(engine: Engine, ids: torch.Tensor, positions: torch.Tensor,
            allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The three host tensors on the engine's device, through one int64 buffer (one copy)."""
    parts = (ids.long(), positions.long(), allowed.long())
    flat = torch.cat([p.reshape(-1) for p in parts])
    if engine.device.type == "cuda":
        flat = flat.pin_memory().to(engine.device, non_blocking=True)
    elif flat.device != engine.device:
        flat = flat.to(engine.device)
    out, at = [], 0
    for p in parts:
        out.append(flat[at:at + p.numel()].view(p.shape))
        at += p.numel()
    return out[0], out[1], out[2].bool()


def _chunk(engine: Engine, kv: StaticKV, x: torch.Tensor, positions: torch.Tensor, allowed: torch.Tensor,
           first: int) -> torch.Tensor:
    """One bucket, on the device: columns written at slots first, first + 1, …; allowed [B, n, first + n]."""
    b, n, h = x.shape
    size = engine.columns(n)
    attended = engine.attended(first + size)
    device = x.device
    mask = torch.zeros(b, size, attended, dtype=torch.bool, device=device)  # [B, Qb, S]
    mask[:, :n, :first + n] = allowed
    # A padding column sees itself only (its output is dropped); built by comparison, not by an indexed write of a
    # host scalar, which would wait for the device.
    column = torch.arange(size, device=device)[:, None]  # [Qb, 1]
    mask |= (column >= n) & (torch.arange(attended, device=device)[None, :] == column + first)  # [Qb, S]
    additive = torch.zeros(mask.shape, dtype=engine.dtype, device=device).masked_fill_(
        ~mask, torch.finfo(engine.dtype).min)
    if size != n:
        x = torch.cat([x, x.new_zeros(b, size - n, h)], dim=1)  # [B, Qb, H]
        positions = torch.cat([positions, positions[:, -1:].expand(b, size - n)], dim=1)
    slots = torch.arange(first, first + size, device=device)
    hidden = engine.forward(x, positions, slots, additive[:, None], kv)
    return hidden[:, :, :n]  # [L+1, B, n, H]
