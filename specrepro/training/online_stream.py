"""The online speculative decoding study: α over a stream whose task mix shifts, online draft against frozen draft
(survey blog, *Variants: Online Speculative Decoding*; issue 15 item 4).

The blog: "the user query distributions shift. Since the draft model is small, it behooves us ... to allocate its
limited capacity to the exact distribution of user queries." The study serves one stream of prompts in task blocks
(chat, then code, then math by default) twice, interleaved prompt by prompt, with the same per-sequence seeds:

- with the draft frozen (``LMDrafter``), the baseline;
- with an ``OnlineDrafter`` that distils the draft on the target's rows every L sequences while it serves;

then measures α of the frozen draft and of the online draft's final weights on held-out prompts of every task
(prompts the stream never served, the same seeds for both). Both drafts are fp32 copies of the caller's draft, so
neither the caller's draft nor the target changes, and the only difference between the two runs is the updates.

- ``StreamSpec``: which tasks, how many stream and held-out prompts per task, and the decoding settings.
- ``build_stream``: the stream (task blocks, in order) and the held-out prompts (the last k of each suite).
- ``run_stream_study``: the four runs (stream and held-out, frozen and online) as one JSON-ready dict.
- ``alpha_by_task``, ``rolling_alpha``, ``held_out_table``, ``paired_difference``, ``update_cost``: the figures'
  and tables' numbers.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from ..core.config import DecodeConfig, SamplingConfig
from ..drafters.base import Drafter
from ..drafters.lm import LMDrafter
from ..core.prompts import Prompt, load_suite
from ..core.provenance import atomic_write_text
from .online import OnlineConfig, online_drafter, serve_stream

DRAFTERS = ("frozen", "online")  # the two runs of every study, in the order they are served


@dataclass(frozen=True)
class StreamSpec:
    """A stream whose task mix shifts: ``per_task`` prompts of each task in turn, and held-out prompts to score."""

    tasks: tuple[str, ...] = ("chat", "humaneval", "math")  # suites of specrepro.core.prompts, served in this order
    per_task: int = 8  # stream prompts per task: the first ``per_task`` of its suite
    held_out_per_task: int = 3  # the last k prompts of each suite: never served in the stream, α measured on them
    max_new_tokens: int = 48  # per generation
    temperature: float = 1.0  # the target's and draft's sampling temperature (no top-k, no top-p)
    gamma: int = 4  # γ, draft tokens per step
    seed: int = 0  # stream sequence i is seeded seed + i, held-out sequence j seed + (stream length) + j

    def __post_init__(self) -> None:
        if not isinstance(self.tasks, tuple) or not all(isinstance(t, str) and t for t in self.tasks):
            raise ValueError(f"tasks must be a tuple of suite names, got {self.tasks!r}")
        if not self.tasks:
            raise ValueError("tasks is empty: the stream needs at least one task")
        if len(set(self.tasks)) != len(self.tasks):
            raise ValueError(f"tasks must not repeat (one block per task), got {self.tasks!r}")
        for name in ("per_task", "held_out_per_task", "max_new_tokens", "gamma"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not isinstance(self.temperature, (int, float)) or not math.isfinite(self.temperature) \
                or self.temperature < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")

    def decode_config(self) -> DecodeConfig:
        """The stream's decoding settings (serve_stream seeds sequence i with ``seed + i``)."""
        return DecodeConfig(method="speculative", max_new_tokens=self.max_new_tokens, gamma=self.gamma,
                            sampling=SamplingConfig(temperature=float(self.temperature)), seed=self.seed)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class StudyPrompt:
    task: str  # the suite it comes from
    id: str  # the suite's prompt id
    ids: tuple[int, ...]  # encoded (chat template) token ids


@dataclass(frozen=True)
class TaskStream:
    stream: tuple[StudyPrompt, ...]  # served in this order: task blocks
    held_out: tuple[StudyPrompt, ...]  # scored after the stream, task by task

    def to_dict(self) -> dict:
        """Which prompts, without their token ids."""
        return {part: [{"task": p.task, "id": p.id, "prompt_tokens": len(p.ids)} for p in getattr(self, part)]
                for part in ("stream", "held_out")}


def build_stream(spec: StreamSpec, encode: Callable[[Prompt], Sequence[int]],
                 suites: Mapping[str, Sequence[Prompt]] | None = None) -> TaskStream:
    """The stream (the first ``per_task`` prompts of each task, in task blocks) and the held-out prompts (the last
    ``held_out_per_task`` of each task), disjoint by construction. ``encode`` turns a prompt into token ids (the CLI's
    ``encode_prompt`` with the chat template); ``suites`` maps a task to its prompts (default: ``load_suite``)."""
    stream, held_out = [], []
    for task in spec.tasks:
        prompts = list(suites[task] if suites is not None else load_suite(task))
        need = spec.per_task + spec.held_out_per_task
        if len(prompts) < need:
            raise ValueError(f"task {task!r} has {len(prompts)} prompts; per_task + held_out_per_task = {need} "
                             f"would overlap stream and held-out prompts")
        served, kept = prompts[: spec.per_task], prompts[len(prompts) - spec.held_out_per_task:]
        if {p.id for p in served} & {p.id for p in kept}:
            raise ValueError(f"task {task!r}: a prompt id is both in the stream and held out (repeated ids?)")
        stream += [StudyPrompt(task, p.id, tuple(int(t) for t in encode(p))) for p in served]
        held_out += [StudyPrompt(task, p.id, tuple(int(t) for t in encode(p))) for p in kept]
    return TaskStream(tuple(stream), tuple(held_out))


# ------------------------------------------------------------------------------------------- serving


def serve_one(target: torch.nn.Module, drafter: Drafter, item: StudyPrompt, index: int, config: DecodeConfig,
              eos: set[int], context_length: int | None) -> dict:
    """Sequence ``index`` of a list served by ``serve_stream``: seeded ``config.seed + index`` exactly as one
    ``serve_stream`` call over the whole list would seed it; an online drafter's learner counts sequences across
    calls, so its updates still come every L sequences."""
    stats = serve_stream(target, drafter, [list(item.ids)], dataclasses.replace(config, seed=config.seed + index),
                         eos, context_length=context_length).sequences[0]
    return {**dataclasses.asdict(stats), "index": index, "task": item.task, "prompt_id": item.id}


def serve_interleaved(target: torch.nn.Module, drafters: Mapping[str, Drafter], items: Sequence[StudyPrompt],
                      config: DecodeConfig, eos: set[int], context_length: int | None, bar: tqdm) -> dict[str, list]:
    """Each item served by every drafter in turn before the next item (so a drift in machine load hits them alike),
    with the same seed; returns each drafter's rows in item order."""
    rows = {name: [] for name in drafters}
    for i, item in enumerate(items):
        for name, drafter in drafters.items():
            bar.set_postfix_str(f"{item.task} {i}: {name}")
            rows[name].append(serve_one(target, drafter, item, i, config, eos, context_length))
            bar.update(1)
    return rows


def trainable_copy(draft: torch.nn.Module) -> torch.nn.Module:
    """An fp32 copy of the draft in eval mode: the online draft trains it, the frozen draft serves an equal one."""
    return copy.deepcopy(draft).float().eval()


def run_stream_study(target: torch.nn.Module, draft: torch.nn.Module, spec: StreamSpec, online: OnlineConfig,
                     encode: Callable[[Prompt], Sequence[int]], *, eos: set[int] = frozenset(),
                     context_length: int | None = None, suites: Mapping[str, Sequence[Prompt]] | None = None,
                     progress: bool = True) -> dict:
    """Serve the stream frozen and online, then score both drafts on the held-out prompts (module docstring).

    Returns a JSON-ready dict: the configs (``spec``, ``online``, ``decode``), the prompts, per-sequence rows for
    each drafter on the stream (``stream[drafter]``) and on the held-out prompts (``held_out[drafter]``), each row
    with task, α, accepted/tested draft tokens, new tokens, target calls, generation time and the cost of the update
    that followed it, the update reports, and the wall time of the stream and of the held-out part (each served
    interleaved: a prompt by both drafters before the next). The caller's draft and the target are
    never trained: both runs use fp32 copies of the draft."""
    prompts = build_stream(spec, encode, suites)
    config = spec.decode_config()
    held_config = dataclasses.replace(config, seed=spec.seed + len(prompts.stream))  # no seed served twice
    frozen_model, online_model = trainable_copy(draft), trainable_copy(draft)
    drafters = {"frozen": LMDrafter(frozen_model), "online": online_drafter(online_model, online)}
    result = {"spec": spec.to_dict(), "online": online.to_dict(), "decode": config.to_dict(),
              "held_out_decode": held_config.to_dict(), "draft_dtype": "float32", "prompts": prompts.to_dict(),
              "stream": {}, "held_out": {}, "seconds": {}}
    total = len(DRAFTERS) * (len(prompts.stream) + len(prompts.held_out))
    with tqdm(total=total, desc="online stream study", unit="seq", disable=not progress) as bar:
        t0 = time.perf_counter()
        result["stream"] = serve_interleaved(target, drafters, prompts.stream, config, eos, context_length, bar)
        result["seconds"]["stream"] = time.perf_counter() - t0
        # The online draft's final weights, served frozen from here on: the held-out prompts teach it nothing.
        final = {"frozen": drafters["frozen"], "online": LMDrafter(online_model.eval())}
        t0 = time.perf_counter()
        result["held_out"] = serve_interleaved(target, final, prompts.held_out, held_config, eos, context_length, bar)
        result["seconds"]["held_out"] = time.perf_counter() - t0
    result["updates"] = [report.to_dict() for report in drafters["online"].learner.reports]
    return result


# ------------------------------------------------------------------------------------------- summaries


def pooled(rows: Sequence[dict]) -> float | None:
    """α pooled over sequences: accepted / tested draft tokens (``record.pooled_alpha`` over their steps)."""
    tested = sum(r["tested"] for r in rows)
    return sum(r["accepted"] for r in rows) / tested if tested else None


def alpha_by_task(rows: Sequence[dict]) -> dict[str, float | None]:
    """Pooled α of each task (in the order tasks first appear) and of all rows (``"pooled"``)."""
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    return {**{t: pooled([r for r in rows if r["task"] == t]) for t in tasks}, "pooled": pooled(rows)}


def rolling_alpha(rows: Sequence[dict], window: int) -> list[float | None]:
    """For each sequence, α pooled over it and the ``window − 1`` sequences before it (fewer at the start)."""
    if not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an integer >= 1, got {window!r}")
    return [pooled(rows[max(0, i + 1 - window): i + 1]) for i in range(len(rows))]


def held_out_table(result: dict) -> list[dict]:
    """Held-out α per task and pooled: frozen, online, their difference, and the prompts and tests behind them."""
    frozen, online = (alpha_by_task(result["held_out"][name]) for name in DRAFTERS)
    table = []
    for task in frozen:
        rows = [r for r in result["held_out"]["online"] if task == "pooled" or r["task"] == task]
        table.append({"task": task, "prompts": len(rows), "alpha_frozen": frozen[task], "alpha_online": online[task],
                      "difference": None if frozen[task] is None or online[task] is None
                      else online[task] - frozen[task],
                      "tested_frozen": sum(r["tested"] for r in result["held_out"]["frozen"]
                                           if task == "pooled" or r["task"] == task),
                      "tested_online": sum(r["tested"] for r in rows)})
    return table


def paired_difference(result: dict) -> dict:
    """Held-out α difference prompt by prompt (online − frozen, the same prompt and seed): its mean over prompts and
    the standard error of that mean, a noise scale for the pooled difference (which weights prompts by tested
    tokens). Prompts where either draft tested nothing are left out."""
    pairs = [(f["alpha"], o["alpha"]) for f, o in zip(result["held_out"]["frozen"], result["held_out"]["online"])
             if f["alpha"] is not None and o["alpha"] is not None]
    diffs = [o - f for f, o in pairs]
    n = len(diffs)
    mean = sum(diffs) / n if n else None
    se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1) / n) if n > 1 else None
    return {"prompts": n, "mean_difference": mean, "standard_error": se,
            "prompts_online_better": sum(d > 0 for d in diffs), "prompts_online_worse": sum(d < 0 for d in diffs)}


def update_cost(result: dict) -> dict:
    """What the updates cost the online run: seconds per update, in total, and as a fraction of its serving time
    (the generations' own wall time, updates excluded), beside the frozen run's serving time."""
    online, frozen = result["stream"]["online"], result["stream"]["frozen"]
    seconds = [u["seconds"] for u in result["updates"]]
    serving = sum(r["wall_time_s"] for r in online)
    return {"updates": len(seconds), "seconds_per_update": sum(seconds) / len(seconds) if seconds else 0.0,
            "update_s_total": sum(seconds), "serving_s_online": serving,
            "serving_s_frozen": sum(r["wall_time_s"] for r in frozen),
            "update_over_serving": sum(seconds) / serving if serving else None,
            "rows_per_update": sum(u["rows"] for u in result["updates"]) / len(seconds) if seconds else 0.0}


def save_result(result: dict, path: str | Path) -> Path:
    """The study's dict as JSON, written atomically."""
    return atomic_write_text(Path(path), json.dumps(result, indent=1) + "\n")
