"""Measuring a device profile: ``python -m specrepro calibrate`` and the bench's sessions (``profile.Profile`` says
what one holds). Each dtype's L_fp(n) is timed with ``profile.forward_timer`` on a realistic context, interleaved
round by round across sizes so that drift hits every size alike; the prefill, one draft step (c), the memory
bandwidth and the GEMM roofline go beside it, so that a step is read against its floor.

``get_profile`` is the cached entry point: a profile is measured once per key (device, model pair, dtype, threads,
versions) and kept under ``$SPECREPRO_CACHE/profiles/``.
"""
from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import torch

from ..core.decoding import Clock, model_device
from ..core.deps import timed
from ..core.kvcache import CachedModel
from ..core.provenance import busy_cores, environment, git_revision, host_speed
from ..engine.disk import profiles_dir
from ..engine.llama import onednn_bf16
from .prefix import BatchedPrefix, batch_contexts
from .profile import (DEFAULT_NS, DTYPE_NAMES, LONG_NS, N_MAX, HostCost, Latency, Profile, ProfileKey,
                      calibration_context, cpu_info, dtype_name, forward_timer, load_profile, save_profile)


def memory_bandwidth(device: torch.device, megabytes: int = 256, repeats: int = 5) -> float:
    """Bytes per second the device moves in a large copy (read + write counted), the best of ``repeats``: what a
    memory-bound decode step is bounded by. Each copy is timed by ``Clock.interval`` (CUDA events on a GPU: a
    256 MB copy takes ~0.1 ms there, as long as a sync's round trip)."""
    clock = Clock(device)
    src = torch.empty(megabytes * 2 ** 20 // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    best = math.inf
    for _ in range(repeats + 1):
        with clock.interval() as span:
            dst.copy_(src)
        best = min(best, span.seconds)
    return 2 * src.numel() * src.element_size() / best


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's parameters: what one decode step has to read (tied weights counted once)."""
    return sum({id(p): p.numel() * p.element_size() for p in model.parameters()}.values())


def held_bytes(model: torch.nn.Module) -> int | None:
    """Bytes of the weights one decode step reads as the engine holds them (4-bit and 8-bit where it packs a GGUF's
    integers), None without an engine (then ``weight_bytes`` is what it reads)."""
    from ..engine import engine_of
    engine = engine_of(model)
    return None if engine is None else engine.held_bytes


def step_flops(model: torch.nn.Module) -> int:
    """FLOPs of the GEMMs of a one-token forward: 2 per weight of every linear layer, the LM head included (a tied
    head counts here though its bytes count once). Attention over the cache and the small ops are left out: at a few
    hundred cached tokens they are a few per cent of it."""
    return sum(2 * m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


def gemm_roofline(device: torch.device, dtype: torch.dtype, size: int | None = None, repeats: int = 3) -> float:
    """FLOP/s of a large square GEMM in ``dtype`` on ``device`` with torch's current threads, the best of ``repeats``
    after one warm-up: the compute roofline a forward over many tokens is bounded by. ``size`` defaults to 2048 on a
    CPU (near peak on a few cores, a fraction of a second) and 8192 on a GPU."""
    size = size or (8192 if device.type == "cuda" else 2048)
    clock = Clock(device)
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, generator=gen, device=device).to(dtype)  # [M, K]
    b = torch.randn(size, size, generator=gen, device=device).to(dtype)  # [K, N]
    best = math.inf
    for r in range(repeats + 1):
        t0 = clock.now()
        torch.mm(a, b)
        if r > 0:
            best = min(best, clock.now() - t0)
    return 2 * size ** 3 / best


def roofline(model: torch.nn.Module, dtype: str) -> dict:
    """What ``calibrate`` adds to a profile's ``machine``: the measured GEMM rate in ``dtype`` and the step's FLOPs.
    On a CPU where oneDNN has no bf16 GEMM (AVX2 only: ``llama.onednn_bf16``) torch's bf16 GEMM is emulated at a
    fraction of a GFLOP/s, while the engine's kernels sum bf16 inputs in fp32 FMAs: the fp32 GEMM's rate is the
    roofline there (``gemm_dtype`` says which)."""
    device = model_device(model)
    gemm = {v: k for k, v in DTYPE_NAMES.items()}[dtype_name(dtype)]
    if device.type == "cpu" and gemm == torch.bfloat16 and not onednn_bf16():
        gemm = torch.float32
    return {"gemm_flops_s": gemm_roofline(device, gemm), "gemm_dtype": DTYPE_NAMES[gemm],
            "gemm_threads": torch.get_num_threads(), "step_flops": step_flops(model)}


def measure(target: torch.nn.Module, draft: torch.nn.Module | None, context: list[int], key: ProfileKey,
            ns: Sequence[int] = DEFAULT_NS, repeats: int = 5, warmup: int = 1,
            progress: Callable[[int, int], None] | None = None) -> Profile:
    """Time L_fp(n) for every n in ``ns`` after ``context`` and one draft decode step, interleaved round by round so
    that a change in machine load hits every size alike; medians over ``repeats`` rounds after ``warmup``. Then,
    in the same rounds, L_fp(n) on the coarse grid ``LONG_NS`` (sizes up to max(ns)) after each of ``key.contexts`` (the
    context's tokens cycled to that length) and the prefill of each of ``key.prefill_sizes`` prompt tokens; a length
    the target's context cannot hold is left out (and so not in the profile)."""
    ns = sorted(set(int(n) for n in ns))
    if not ns or ns[0] != 1 or ns[-1] > N_MAX:
        raise ValueError(f"profile sizes must include 1 and stay within 1..{N_MAX}, got {ns}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if not context:
        raise ValueError("the calibration context is empty")
    context_length = int(getattr(target.config, "max_position_embeddings", 2048))
    if len(context) + ns[-1] > context_length:
        raise ValueError(f"a {len(context)}-token context + {ns[-1]} tokens exceeds the target's context of "
                         f"{context_length}")
    speed_start, t_start = host_speed(), time.perf_counter()
    cycled = context * (max([len(context), *key.contexts, *key.prefill_sizes]) // len(context) + 1)
    long_ns = sorted({n for n in LONG_NS if n <= ns[-1]} | {1})
    # context length -> (timer, the sizes timed after it); forward_timer prefills its context once, here
    timers = {len(context): (forward_timer(target, context, key.batch), ns)}
    for c in key.contexts:
        if len(context) < c and c + ns[-1] <= context_length:
            timers[c] = (forward_timer(target, cycled[:c], key.batch), long_ns)
    prefill_sizes = [p for p in key.prefill_sizes if p <= context_length]
    time_draft = forward_timer(draft, context, key.batch) if draft is not None else None
    times: dict[tuple[int, int], list[float]] = {(c, n): [] for c, (_, sizes) in timers.items() for n in sizes}
    prefill_times: dict[int, list[float]] = {p: [] for p in prefill_sizes}
    draft_times: list[float] = []
    rounds = warmup + repeats
    for r in range(rounds):
        with timed(r, warmup):  # a dependency trace (core/deps.py) sees the warm-up, not the timed rounds
            for c, (timer, sizes) in timers.items():
                for n in sizes:
                    t = timer(n)
                    if r >= warmup:
                        times[c, n].append(t)
            for p in prefill_sizes:
                t = prefill_time(target, cycled[:p], key.batch)
                if r >= warmup:
                    prefill_times[p].append(t)
            if time_draft is not None:
                t = time_draft(1)
                if r >= warmup:
                    draft_times.append(t)
        if progress is not None:
            progress(r + 1, rounds)
    device = model_device(target)
    machine = {"cpu": cpu_info(), "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
               "versions": environment(), "git_revision": git_revision(),
               "busy_cores": busy_cores(), "load_average": list(os.getloadavg()),
               "host_speed_start": speed_start, "host_speed_end": host_speed(),
               "bandwidth_bytes_s": memory_bandwidth(device), "weight_bytes": weight_bytes(target),
               "held_bytes": held_bytes(target),
               "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "seconds": round(time.perf_counter() - t_start, 2)}

    def curve(c: int) -> tuple[tuple[int, Latency], ...]:
        return tuple((n, Latency.of(times[c, n])) for n in timers[c][1])
    longer = sorted(set(timers) - {len(context)})
    return Profile(key=key, context_tokens=len(context), repeats=repeats, forward=curve(len(context)),
                   draft_decode=Latency.of(draft_times) if draft_times else None, machine=machine,
                   contexts=tuple((c, curve(c)) for c in longer),
                   prefill=tuple((p, Latency.of(prefill_times[p])) for p in prefill_sizes))


def prefill_time(model: torch.nn.Module, prompt: list[int], batch: int = 1) -> float:
    """Seconds of one forward over ``prompt`` from an empty cache (the prefill), device-synchronised; with ``batch``
    B > 1, over B rows of ``len(prompt)`` tokens (the prompt rotated per row) at once."""
    clock = Clock(model_device(model))
    if batch > 1:
        rows = batch_contexts(prompt, batch)  # [B, P]
        t0 = clock.now()
        BatchedPrefix(model, rows)
        return clock.now() - t0
    cm = CachedModel(model, prompt_len=len(prompt))  # (a run's prefill: its prompt in bulk)
    t0 = clock.now()
    cm.logits_for(prompt)
    return clock.now() - t0


def get_profile(target: str, draft: str | None, dtype: str, device: str | torch.device | None = None,
                threads: int | None = None, recalibrate: bool = False, context_tokens: int = 256,
                repeats: int = 5, out: str | Path | None = None, log=sys.stderr, compiled: bool = False,
                peer=None, host: Callable[[torch.nn.Module, list[int]], HostCost] | None = None) -> Profile:
    """The cached profile for this key, or a fresh calibration (models loaded at ``dtype``, their forwards compiled
    with ``compiled``: the warm-up round then pays the compilation) saved to the cache (and to ``out`` if given).

    ``calibrate`` also wants the compute roofline (``roofline``) in the profile's ``machine``, and, with ``peer`` (a
    ``specrepro.run.peers.LlamaCppPeer``: ``describe()`` and ``measure(context, ns, repeats)``), llama.cpp's forwards on
    the same context and sizes. A cached profile without them (written before they were measured, or under another
    llama.cpp or thread count) gets them added, its own timings kept, and is saved again. So does the host's work
    per step (``Profile.host``), with ``host(target, context) -> HostCost`` (``specrepro.run.host_cost``, which
    runs the decoding loops this layer may not import), on a CPU: on CUDA a step's parts cannot be split."""
    from ..engine.models import default_device
    device = torch.device(device) if device is not None else default_device()
    if threads is not None:
        torch.set_num_threads(threads)
    key = ProfileKey.here(device, target, draft, dtype, threads, context_tokens, repeats, compiled=compiled)
    path = profiles_dir() / key.filename()
    models = None  # (target, draft, calibration context), loaded only when something is measured
    if path.exists() and not recalibrate:
        profile = load_profile(path, key)
    else:
        models = _calibration_models(key, device)

        def show(done: int, total: int) -> None:
            print(f"\rcalibrate {key.dtype}: round {done}/{total}", end="" if done < total else "\n", file=log,
                  flush=True)
        t, d, context = models
        profile = measure(t.model, d.model if d else None, context, key, repeats=repeats, progress=show)
    stale_peer = peer is not None and (profile.peer is None or not profile.peer.same_setup(peer.describe()))
    no_host = host is not None and profile.host is None and device.type != "cuda"
    if models is not None or "gemm_flops_s" not in profile.machine or stale_peer or no_host:
        t, _, context = models or _calibration_models(dataclasses.replace(key, compiled=False), device)
        if "gemm_flops_s" not in profile.machine:
            profile = dataclasses.replace(profile, machine={**profile.machine, **roofline(t.model, key.dtype)})
        if stale_peer:
            print(f"calibrate: {peer.describe()['engine']} on the same context and sizes", file=log, flush=True)
            profile = dataclasses.replace(profile, peer=peer.measure(context, [n for n, _ in profile.forward],
                                                                     repeats=key.repeats))
        if no_host:
            print(f"calibrate {key.dtype}: the host's work per step (plain and prompt-lookup runs)", file=log,
                  flush=True)
            profile = dataclasses.replace(profile, host=host(t.model, context))
        save_profile(profile, path)
    if out is not None:
        save_profile(profile, out)
    return profile


def _calibration_models(key: ProfileKey, device: torch.device):
    """(target, draft or None, the calibration context) of ``key``, loaded at its dtype, compiled if it says so."""
    from ..engine.models import load_draft, load_model
    t = load_model(key.target, dtype=key.dtype, device=device)
    d = load_draft(key.draft, t) if key.draft is not None else None
    if key.compiled:
        from ..engine.compiled import compile_forward
        for m in (t, d):
            if m is not None:
                compile_forward(m.model)
    return t, d, calibration_context(t.tokenizer, t.vocab_size, key.context_tokens)
