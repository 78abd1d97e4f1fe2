"""How long the process has spent in model forwards: one counter, read by the decoding loops at the borders of a
step's phases (drafting, verifying, feeding back) to split a step's wall time into the target's forwards, the
draft's forwards and the host's work around them (``core.decoding.StepSplit``).

Every forward the package runs passes through :func:`forward`: the engine's stack and head (``runner.Engine``),
transformers' forward where a model has no engine (``kvcache.CachedModel``), and the small modules a drafter runs
itself (EAGLE's draft layer, Medusa's heads). Only the outermost region counts, so a forward inside another (a
drafter's head on the engine) is never counted twice. The clock is the host's: on a CPU that is the forward's time;
on CUDA a forward only queues kernels, so the loops do not split a step there (``StepSplit``).
"""
from __future__ import annotations

import contextlib
import time
from typing import Iterator

_seconds = 0.0  # in outermost forward regions, since the process started
_depth = 0


@contextlib.contextmanager
def forward() -> Iterator[None]:
    """Count the block's wall time as forward time (once, when regions nest)."""
    global _seconds, _depth
    if _depth:
        yield
        return
    _depth = 1
    start = time.perf_counter()
    try:
        yield
    finally:
        _seconds += time.perf_counter() - start
        _depth = 0


def seconds() -> float:
    """Forward seconds so far (a difference of two reads is the forward time between them)."""
    return _seconds
