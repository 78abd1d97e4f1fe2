"""What one target forward over a batch costs: B sequences × n new tokens each, after a cached prefix of L tokens.

Two questions read this measurement:

- the MJSD paper's Table 1 (seed 000, §4): a fixed number of target runs at batch size b ∈ {1, 2, 4, 8, 16}, the
  time and energy per run and per input. Its Eq. (2), E = PW_flop·T_flop + PW_mem·T_mem, argues that memory
  traffic dominates a small batch, so a run of b inputs costs little more time and energy than a run of one;
- β against batch size (issue 15): β(B, n) = L(B, n) / L(B, 1), what verifying n = γ+1 tokens in each of B
  sequences costs relative to decoding one token in each.

Timed like the device profile's L_fp(n) (``calibrate.measure``): warm-up rounds first, then rounds in which every
(B, n) cell is timed in turn, each after one untimed forward of its own shape, so that a change in machine load hits
every cell alike; medians over the rounds; clocks synchronised with the device (``decoding.Clock``). A timed sample
is ``forwards`` consecutive forwards of one cell, read as seconds (and joules, from the ``EnergyMeter`` where a
counter exists) per forward; a cell's totals over all its timed forwards are the paper's "Energy (J)" and "Time (s)" columns.

The B sequences are different token sequences of the same length L (the context rotated), so no padding or mask
is involved; the n new tokens of each are scored with the full causal mask over its own prefix, as a batched
verification step scores γ+1 tokens.
"""
from __future__ import annotations

import dataclasses
import os
import statistics
import time
from dataclasses import dataclass
from typing import Sequence

import torch

from ..core.decoding import Clock, model_device
from ..core.deps import timed
from ..core.provenance import busy_cores, environment
from .energy import EnergyMeter, open_meter
from .prefix import BatchedPrefix, batch_contexts
from .profile import Latency, cpu_info, dtype_name

FORMAT = "specrepro-batch-cost/1"
TABLE1_BATCHES = (1, 2, 4, 8, 16)  # the MJSD paper's Table 1


@dataclass(frozen=True)
class BatchCost:
    """One (B, n) cell: a target forward over B sequences × n new tokens after the L-token prefix."""

    batch: int  # B sequences in the forward
    new_tokens: int  # n new tokens per sequence
    latency: Latency  # seconds of one forward: median and spread over the timed samples
    energy_j: float | None  # median joules of one forward, None without a counter
    runs: int  # forwards timed (rounds × forwards per sample)
    total_s: float  # seconds of all ``runs`` forwards together
    total_j: float | None  # joules of all ``runs`` forwards together, None without a counter


@dataclass(frozen=True)
class BatchingResult:
    """Every (B, n) cell measured on one model, device, dtype and thread count."""

    model: str  # the model's name (zoo name, folder) or a label
    device: str  # GPU name, or the CPU model
    dtype: str  # bf16 | fp16 | fp32
    threads: int  # torch.get_num_threads() during the measurement
    context_tokens: int  # L, the cached prefix of every sequence
    rounds: int  # timed rounds; each times every cell once
    forwards: int  # consecutive forwards per timed sample
    warmup: int  # untimed rounds before the first timed one
    energy_source: str  # "nvml", "rapl" or "none"
    energy_reason: str | None  # why there is no energy, when there is none
    cells: tuple[BatchCost, ...]  # batch ascending, then n ascending
    machine: dict  # load average, when, how long

    def cell(self, batch: int, new_tokens: int = 1) -> BatchCost:
        for c in self.cells:
            if (c.batch, c.new_tokens) == (batch, new_tokens):
                return c
        raise ValueError(f"no cell B = {batch}, n = {new_tokens}; measured {[(c.batch, c.new_tokens) for c in self.cells]}")

    @property
    def batches(self) -> tuple[int, ...]:
        return tuple(sorted({c.batch for c in self.cells}))

    @property
    def new_tokens(self) -> tuple[int, ...]:
        return tuple(sorted({c.new_tokens for c in self.cells}))

    def beta(self, batch: int, new_tokens: int) -> float:
        """β(B, n) = L(B, n) / L(B, 1): n tokens per sequence relative to one, at the same B (issue 15)."""
        return self.cell(batch, new_tokens).latency.median_s / self.cell(batch, 1).latency.median_s

    def table1(self, new_tokens: int = 1) -> list[dict]:
        """The MJSD paper's Table 1 columns at n new tokens per sequence: one row per batch size; an input is one
        sequence of the batch (runs × B inputs in all)."""
        rows = []
        for b in self.batches:
            c = self.cell(b, new_tokens)
            per_run_j = c.energy_j
            rows.append({"batch_size": b, "runs": c.runs, "energy_j": c.total_j, "energy_per_run_j": per_run_j,
                         "energy_per_input_j": None if per_run_j is None else per_run_j / b, "time_s": c.total_s,
                         "time_per_run_s": c.latency.median_s, "time_per_input_s": c.latency.median_s / b})
        return rows

    def to_dict(self) -> dict:
        return {"format": FORMAT, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, d: dict) -> "BatchingResult":
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ValueError(f"not a specrepro batch-cost measurement (expected format {FORMAT!r})")
        fields = {k: v for k, v in d.items() if k not in ("format", "cells")}
        cells = tuple(BatchCost(**{**c, "latency": Latency(**c["latency"])}) for c in d["cells"])
        return cls(**fields, cells=cells)


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_info()["name"]


def measure_batching(model: torch.nn.Module, context: Sequence[int], batches: Sequence[int] = TABLE1_BATCHES,
                     new_tokens: Sequence[int] = (1,), rounds: int = 5, forwards: int = 4, warmup: int = 1,
                     meter: EnergyMeter | None = None, label: str = "model") -> BatchingResult:
    """Time (and meter) one forward over B sequences × n new tokens after ``context`` (L tokens) for every B in
    ``batches`` and n in ``new_tokens``; ``rounds`` × ``forwards`` timed forwards per cell (a fixed number of
    target runs, as the MJSD paper's Table 1 fixes it), interleaved round by round after ``warmup`` rounds.

    ``meter`` defaults to ``open_meter`` on the model's device (NVML on CUDA, RAPL on a CPU that exposes it).
    """
    batches, ns = sorted(set(int(b) for b in batches)), sorted(set(int(n) for n in new_tokens))
    if not batches or batches[0] < 1:
        raise ValueError(f"batch sizes B must be >= 1, got {batches}")
    if not ns or ns[0] < 1:
        raise ValueError(f"new tokens per sequence n must be >= 1, got {ns}")
    for name, value, least in (("rounds", rounds, 1), ("forwards", forwards, 1), ("warmup", warmup, 0)):
        if not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    context_length = int(getattr(model.config, "max_position_embeddings", 2048))
    if len(context) < 1 or len(context) + ns[-1] > context_length:
        raise ValueError(f"a {len(context)}-token context + {ns[-1]} new tokens must fit the model's context of "
                         f"{context_length} (and the context must not be empty)")
    device = model_device(model)
    meter = meter if meter is not None else open_meter(device)
    clock = Clock(device)
    t_start = time.perf_counter()

    # One cached prefix per B; the new tokens of sequence b continue it with tokens of its own.
    prefixes = {b: BatchedPrefix(model, batch_contexts(context, b)) for b in batches}
    new = {(b, n): batch_contexts(context, b)[:, :n].to(device) for b in batches for n in ns}  # [B, n]
    seconds: dict[tuple[int, int], list[float]] = {cell: [] for cell in new}
    joules: dict[tuple[int, int], list[float]] = {cell: [] for cell in new}
    below = None  # why a sample of a working counter read no joules (shorter than NVML's update period)
    for r in range(warmup + rounds):
        for b, n in new:
            # One untimed forward of the cell's own shape first: the first forward after another cell's (a larger B
            # or n) runs cold, and at one timed forward per sample that cost lands in every round (a Zen 4 read
            # L(1, 1) at 15.4 ms against L(1, 2) at 10.3 over 8 rounds); a decode step follows one of its own shape.
            prefixes[b].forward(new[b, n])
            with timed(r, warmup), meter.measure() as m:  # a dependency trace (core/deps.py) sees the warm-up only
                t0 = clock.now()
                for _ in range(forwards):
                    prefixes[b].forward(new[b, n])
                elapsed = clock.now() - t0
            if r >= warmup:
                seconds[b, n].append(elapsed / forwards)
                if m.joules is not None:
                    joules[b, n].append(m.joules / forwards)
                elif meter.available:
                    below = m.reason
    cells = []
    for (b, n), ts in seconds.items():
        js = joules[b, n] if len(joules[b, n]) == len(ts) else None
        cells.append(BatchCost(batch=b, new_tokens=n, latency=Latency.of(ts),
                               energy_j=None if js is None else statistics.median(js),
                               runs=rounds * forwards, total_s=sum(ts) * forwards,
                               total_j=None if js is None else sum(js) * forwards))
    machine = {"busy_cores": busy_cores(),
               "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
               "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "seconds": round(time.perf_counter() - t_start, 2), "versions": environment(),
               "energy_scope": getattr(meter, "scope", None)}
    return BatchingResult(model=label, device=_device_name(device), dtype=dtype_name(next(model.parameters()).dtype),
                          threads=torch.get_num_threads(), context_tokens=len(context), rounds=rounds,
                          forwards=forwards, warmup=warmup, energy_source=meter.source, energy_reason=meter.reason or below,
                          cells=tuple(sorted(cells, key=lambda c: (c.batch, c.new_tokens))), machine=machine)
