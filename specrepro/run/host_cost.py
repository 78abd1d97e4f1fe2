"""The host's work per decode step, measured by running the loops (issue 64): what a device profile's forward curve
does not hold.

A step is the target's forward, the draft's forwards and the host's work around them: sampling, acceptance, the
proposal and its tree, the cache's bookkeeping. The loops split every generation's wall time that way
(``core.decoding.StepSplit``, in ``GenerationRecord.time_split``). Here a plain run and a prompt-lookup run at
γ = 4 (a model-free drafter: the loop's own work, which every drafter pays) each decode ``steps`` tokens after the
context's last ``PROMPT`` tokens twice over (so that the lookup finds a match and proposes at nearly every step),
T = 0, after one warm-up run; the host's seconds per steady step (the first step, with the prefill, left out) are
the median over ``repeats`` runs. A short prompt keeps the prefills cheap (a bf16 prefill takes seconds on a CPU
without bf16 units); the host's work hardly depends on the context's length.

This sits in ``run`` because it runs the decoding loops, which ``metrics`` (where profiles are measured) may not
import; the bench and the ``calibrate`` command add it to each profile they measure (``with_host``).
"""
from __future__ import annotations

import dataclasses
import statistics

import torch

from ..core.config import DecodeConfig, SamplingConfig
from ..core.record import GenerationRecord
from ..decode.autoregressive import autoregressive_generate
from ..decode.speculative import speculative_generate
from ..drafters.prompt_lookup import PromptLookupDrafter
from ..metrics.profile import HostCost, Profile

GAMMA = 4  # the speculative run's γ
PROMPT = 48  # tokens of the context repeated to make the prompt
WARMUP = 4  # tokens of the warm-up runs


def steady_host_s(rec: GenerationRecord) -> float:
    """The host's seconds per step of ``rec`` after its first step (one target call a step, in both loops)."""
    split = rec.time_split
    if split is None:
        raise ValueError("this run has no time split (a CUDA run: forwards only queue kernels there)")
    if rec.target_calls < 2:
        raise ValueError(f"need at least 2 steps to leave the first out, the run made {rec.target_calls}")
    first = split["first_step"]
    first_host = first["wall_s"] - first["target_forward_s"] - first["draft_forward_s"]
    return (split["host_s"] - first_host) / (rec.target_calls - 1)


def measure_host(target: torch.nn.Module, context: list[int], steps: int = 32, repeats: int = 2) -> HostCost:
    """``HostCost`` of ``target`` here: see the module docstring."""
    if steps < 2 or repeats < 1:
        raise ValueError(f"need steps >= 2 and repeats >= 1, got steps={steps}, repeats={repeats}")
    if not context:
        raise ValueError("the calibration context is empty")
    prompt = list(context[-PROMPT:]) * 2
    greedy = SamplingConfig(temperature=0.0)
    ar = DecodeConfig(method="ar", max_new_tokens=steps + 1, sampling=greedy)
    spec = DecodeConfig(method="prompt-lookup", max_new_tokens=steps + 1, gamma=GAMMA, sampling=greedy)

    def runs(tokens: int) -> tuple[GenerationRecord, GenerationRecord]:
        return (autoregressive_generate(target, prompt, dataclasses.replace(ar, max_new_tokens=tokens)),
                speculative_generate(target, PromptLookupDrafter(), prompt,
                                     dataclasses.replace(spec, max_new_tokens=tokens), method="prompt-lookup"))

    runs(WARMUP)
    timed = [runs(steps + 1) for _ in range(repeats)]
    return HostCost(ar_step_s=statistics.median(steady_host_s(a) for a, _ in timed),
                    spec_step_s=statistics.median(steady_host_s(s) for _, s in timed),
                    method="prompt-lookup", gamma=GAMMA, steps=steps)


def with_host(profile: Profile, target: torch.nn.Module, context: list[int], repeats: int = 2) -> Profile:
    """``profile`` with the host's work measured on ``target`` after ``context`` (on CUDA, where the loops cannot
    split a step, the profile as it is)."""
    if next(target.parameters()).device.type == "cuda":
        return profile
    return dataclasses.replace(profile, host=measure_host(target, context, repeats=repeats))
