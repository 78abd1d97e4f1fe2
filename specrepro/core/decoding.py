"""What every decoding loop shares: clocks, stopping, prompt checks."""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch

from ..engine import timing
from .config import DecodeConfig
from .kvcache import CachedModel
from .record import GenerationRecord


class Clock:
    """Wall-clock seconds of the run's device.

    ``now()`` on CUDA first waits for the kernels queued on that device (``cuda:N``, not the current one), so the
    difference of two reads counts them: two host syncs per interval. ``interval()`` times a block with two CUDA
    events on the device's current stream and one sync at its end: the device time from the first event to the
    last (on the CPU, perf_counter)."""

    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"

    def now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    @contextmanager
    def interval(self) -> Iterator[Interval]:
        """``with clock.interval() as t: ...`` then ``t.seconds``: the block's time, one host sync on CUDA."""
        span = Interval()
        if not self.cuda:
            t0 = time.perf_counter()
            yield span
            span.seconds = time.perf_counter() - t0
            return
        stream = torch.cuda.current_stream(self.device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        yield span
        end.record(stream)
        end.synchronize()  # the interval's one sync
        span.seconds = start.elapsed_time(end) / 1e3  # elapsed_time is in milliseconds


class StepSplit:
    """A generation's wall time split three ways: the target's forwards, the draft's forwards, and the host's work
    around them (drafting logic, trees and masks, acceptance, cache bookkeeping, sampling), with the first step
    (the prompt's prefill, target's and draft's) apart, so that the steady step can be read off.

    The loop calls :meth:`charge` at each border of a step's phases, naming whose the forwards since the last call
    were (``engine.timing`` counts every forward), and :meth:`step` at the end of each step. On CUDA a forward only
    queues kernels, so nothing is split there (``record`` gives None)."""

    WHO = ("target", "draft")

    def __init__(self, clock: Clock):
        self.on = not clock.cuda
        self.seconds = dict.fromkeys(self.WHO, 0.0)
        self.first: dict | None = None
        self._mark = timing.seconds()

    def charge(self, who: str) -> None:
        """The forward time since the last call was ``who``'s ("target" or "draft")."""
        now = timing.seconds()
        self.seconds[who] += now - self._mark
        self._mark = now

    def step(self, elapsed_s: float) -> None:
        """A step ended, ``elapsed_s`` after the generation started: the first one's parts are kept apart."""
        if self.first is None:
            self.first = {"wall_s": elapsed_s, **{f"{who}_forward_s": s for who, s in self.seconds.items()}}

    def record(self, wall_s: float) -> dict | None:
        """{target_forward_s, draft_forward_s, host_s, steps' first_step parts} of the whole run, or None on CUDA."""
        if not self.on:
            return None
        parts = {f"{who}_forward_s": s for who, s in self.seconds.items()}
        return {**parts, "host_s": wall_s - sum(parts.values()), "first_step": self.first}


@dataclass
class Interval:
    """What ``Clock.interval`` measured; seconds is None until its block ends."""

    seconds: float | None = None


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def eos_ids(model: torch.nn.Module, tokenizer=None) -> set[int]:
    """Every id that ends a generation: the generation config's eos ids and the tokenizer's."""
    ids: set[int] = set()
    for source in (getattr(getattr(model, "generation_config", None), "eos_token_id", None),
                   getattr(tokenizer, "eos_token_id", None)):
        if isinstance(source, int):
            ids.add(source)
        elif source is not None:
            ids.update(int(i) for i in source)
    return ids


def check_prompt(prompt_ids: list[int], config: DecodeConfig, context_length: int, where: str = "") -> None:
    """One clear error for a prompt that cannot be run: empty, or too long for the context with max_new_tokens;
    ``where`` names it (its file and line)."""
    where = f"{where}: " if where else ""
    if len(prompt_ids) == 0:
        raise ValueError(f"{where}the prompt is empty: give at least one token")
    if config.max_new_tokens >= context_length:
        raise ValueError(f"--max-new-tokens {config.max_new_tokens} leaves no room for a prompt in the model's "
                         f"context of {context_length} tokens")
    if len(prompt_ids) + config.max_new_tokens > context_length:
        raise ValueError(
            f"{where}prompt of {len(prompt_ids)} tokens + --max-new-tokens {config.max_new_tokens} exceeds the "
            f"model's context of {context_length} tokens"
        )


def commit(ids: list[int], out: list[int], new: list[int], config: DecodeConfig, eos: set[int]) -> str | None:
    """Append ``new`` to the committed sequence, stopping at EOS or max_new_tokens (never overshooting).

    Returns the stop reason, or None to continue.
    """
    for t in new:
        ids.append(t)
        out.append(t)
        if config.stop_at_eos and t in eos:
            return "eos"
        if len(out) >= config.max_new_tokens:
            return "max_new_tokens"
    return None


def draft_stream(seed: int) -> int:
    """The drafter's seed for a run seeded ``seed``: a stream independent of the acceptance rule's, so two methods
    (or two drafters) compared at one seed meet the same acceptance uniforms and target samples."""
    return int(np.random.SeedSequence([seed & (2**64 - 1), 1]).generate_state(1, dtype=np.uint64)[0] >> 1)


@dataclass
class Run:
    """What a decoding loop starts from: its seeded generator, clock, target cache, sequences and record."""

    generator: torch.Generator  # CPU, seeded: every uniform of the target side (sampling, acceptance) comes from here
    draft_generator: torch.Generator  # CPU, a separate stream for drafters that sample (``draft_stream``)
    clock: Clock
    p_model: CachedModel  # the target, cached
    ids: list[int]  # committed sequence: prompt + generated
    out: list[int]  # generated tokens only (the record's token_ids)
    rec: GenerationRecord


def start_run(target: torch.nn.Module, prompt_ids: list[int], config: DecodeConfig, method: str,
              context_length: int | None = None) -> Run:
    """Check the prompt against the context and set up one generation (batch size 1)."""
    check_prompt(prompt_ids, config, context_length or target.config.max_position_embeddings)
    out: list[int] = []
    p_model = CachedModel(target, prompt_len=len(prompt_ids))  # (a prompt's positions may run in bulk)
    rec = GenerationRecord(method=method, token_ids=out, prompt_tokens=len(prompt_ids), config=config.to_dict())
    rec.provenance["engine"] = p_model.backend  # which forward ran the target: the engine, or transformers'
    return Run(generator=torch.Generator().manual_seed(config.seed),
               draft_generator=torch.Generator().manual_seed(draft_stream(config.seed)),
               clock=Clock(model_device(target)), p_model=p_model, ids=list(prompt_ids), out=out, rec=rec)
