"""What a bench session measures and records before anything is timed: the machine it runs on, and the device
profile of every dtype in use (L_fp(n) for the forward sizes the variants need, and one draft decode step, so c and
β(n); ``specrepro.metrics.calibrate.measure``), timed on a context as long as a typical step of the run sees.

A session is one call of ``run_bench``; a resumed run has several, and the summary pools their profiles per dtype
(:func:`session_profiles`).
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Sequence

import torch

from ..core.decoding import model_device
from ..core.provenance import BUSY_CORES, busy_cores, environment, git_revision, host_speed
from ..methods import Cost
from ..metrics.calibrate import measure
from ..metrics.profile import DEFAULT_NS, Profile, ProfileKey, cpu_info
from .bench_summary import pooled_profile
from .bench_types import BenchPrompt
from .host_cost import with_host
from .loaded import Models
from .variants import BenchConfig, Variant


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    info = cpu_info()
    model = f", {info['model']}" if info["model"] else ""
    return f"cpu: {info['name']} ({info['logical_cores']} logical cores{model})"


def session_info(config: BenchConfig, device: torch.device) -> dict:
    """The provenance of one session: when, which code and versions, the device, the CPU's kernel flags, threads,
    the machine's load and the seeds."""
    return {
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git_revision": git_revision(),
        "versions": environment(),  # with the lock file's digest and any package not at its locked version
        "device": str(device), "device_name": _device_name(device),
        "cpu_kernel_flags": cpu_info()["kernel_flags"],  # what decides which bf16/fp16 kernels run
        "threads": torch.get_num_threads(),
        # Other processes on the machine skew every timing: the cores they kept busy as the session started (this
        # process asleep), and the 1/5/15-minute load (which also counts what this process did a minute before).
        "busy_cores": busy_cores(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        # The host's speed on a fixed workload as the session starts (and, host_speed_end, as it ends): a slower
        # host shows here where busy_cores cannot see it.
        "host_speed_start": host_speed(),
        "seeds": [config.seed + r for r in range(config.repeats)],
    }


def warn_if_busy(session: dict) -> None:
    """Say on stderr when other processes kept at least half a core busy as the session started (``busy_cores``;
    where that could not be read, when the 1-minute load leaves the bench less than a free core)."""
    cores, busy, load = os.cpu_count() or 1, session.get("busy_cores"), session["load_average"]
    if busy is not None:
        shared, what = busy >= BUSY_CORES, f"other processes kept {busy:.1f} of {cores} cores busy"
    else:
        shared, what = bool(load) and load[0] > cores - 0.5, f"load {load[0] if load else 0:.1f} on {cores} cores"
    if shared:
        advice = ("; with several torch threads on a shared CPU every parallel region waits for descheduled "
                  "threads (consider --threads 1)" if torch.get_num_threads() > 1 else "")
        print(f"specrepro bench: the machine is busy ({what}): timings will be noisy{advice}", file=sys.stderr)


def cost_context(prompts: Sequence[BenchPrompt], config: BenchConfig, context_length: int, n_max: int) -> list[int]:
    """A context as long as a typical step sees: the median prompt plus half the generation. At --batch-size > 1 a
    step attends over its batch's longest row (the shorter ones are padded to it): the median over the batches of
    their longest prompt, plus half the generation."""
    size = config.batch_size
    widths = [max(len(p.ids) for p in prompts[i:i + size]) for i in range(0, len(prompts), size)]
    typical = statistics.median(widths) if size > 1 else statistics.median(len(p.ids) for p in prompts)
    length = int(typical) + config.max_new_tokens // 2
    length = max(2, min(length, context_length - n_max - 1))
    longest = max(prompts, key=lambda p: len(p.ids)).ids
    return (longest * (length // len(longest) + 1))[:length]


def profile_n_max(variants: list[Variant], config: BenchConfig) -> int:
    """The largest forward a session's profile must time: γ+1 for the largest fixed γ, or γ_max+1."""
    gammas = [config.gamma_max if v.gamma == "auto" else v.gamma for v in variants if v.method.cost is not Cost.PLAIN]
    for v in variants:
        if v.method.token_tree:  # a tree's forward covers its nodes (and PPD's prompt tokens): the whole range
            gammas.append(63)
        elif v.method.nodes is not None and v.gamma != "auto":  # m chains of γ
            gammas.append(v.method.draft_nodes(v.gamma, config.decode_config(v, 0).params))
    return min(max(gammas, default=1) + 1, 64)


def profile_sizes(n_max: int) -> list[int]:
    """The forward sizes a bench times: the device profile's grid (every size to 17, then 20, 24, ..., 64) up to
    ``n_max``, and ``n_max`` itself. ``Profile.l_fp`` interpolates between them; timing every size up to 64 cost
    4.5x as many forward tokens for the same curve."""
    return sorted({n for n in DEFAULT_NS if n <= n_max} | {1, n_max})


def measure_profiles(models: Models, dtypes: Sequence[str], context: list[int], config: BenchConfig,
                     n_max: int) -> dict[str, Profile]:
    """dtype -> the device profile of the run's models at that dtype, forwards of 1..``n_max`` tokens timed on
    ``context`` over ``config.batch_size`` rows."""
    profiles = {}
    for dtype in dtypes:
        target, draft = models.at(dtype)
        # The bench times its steps at its own prompts' context already (``cost_context``): no longer contexts, and
        # the prefill (which --dtype auto weighs) at its median prompt length only.
        prompt = max(1, len(context) - config.max_new_tokens // 2)
        key = ProfileKey.here(model_device(target.model), config.target, config.draft if draft else None, dtype,
                              context_tokens=len(context), repeats=config.cost_repeats, contexts=(),
                              prefill_sizes=(prompt,), batch=config.batch_size)
        profile = measure(target.model, draft.model if draft else None, context, key, ns=profile_sizes(n_max),
                          repeats=config.cost_repeats, warmup=1)
        # the host's work per step beside the forwards (batch 1: the loops that split a step run one row)
        profiles[dtype] = with_host(profile, target.model, context) if config.batch_size == 1 else profile
    return profiles


def session_profiles(sessions: list[dict]) -> dict[str, Profile]:
    """Per dtype, the profile for the summary: pooled over the sessions that measured it (one, unless resumed)."""
    by_dtype: dict[str, list[Profile]] = {}
    for s in sessions:
        for dtype, d in (s.get("profiles") or {}).items():
            by_dtype.setdefault(dtype, []).append(Profile.from_dict(d))
    return {dtype: pooled_profile(ps) for dtype, ps in by_dtype.items()}
