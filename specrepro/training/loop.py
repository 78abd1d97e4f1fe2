"""The one trainer loop of the package: every trainer hands it a loss and gets back losses, validations and times.

- ``warmup_cosine``: the learning-rate factor (linear warm-up, then a cosine down to a floor);
- ``Trainer``: AdamW (no weight decay), that schedule, gradient clipping; ``step`` takes one optimiser step on a
  loss, or on several pieces whose gradients accumulate (a batch of conversations run one at a time);
- ``train_loop``: the steps themselves, with a progress bar, a validation every ``val_every`` steps, the best
  validated weights kept on request, and a checkpoint that a stopped run resumes from;
- ``PhaseTimer``, ``begin_run`` and ``Run.record``: a run folder that says which command and settings made it, and
  the record every trainer writes (command, config, git revision, its own sections, phase times, versions).

Who hands what: the draft (``training.draft``: the divergence of its rows on a batch of target-written text),
the Medusa heads (``training.medusa``: cross-entropy of each head against the teacher row ahead), the PPD prompt
tokens (``training.ppd``: Eq. 1 over random anchors, conversations accumulated), the DistillSpec cells
(``training.distillspec``) and the online updates (``training.online``), which take one ``Trainer.step`` at a time.

Written by hand rather than with a training framework: each trainer is a few dozen steps of AdamW on CPU, and the
records must keep the keys the zoo's committed ``training_record.json`` files carry.
"""
from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from ..core.provenance import atomic_write_text, git_revision


def warmup_cosine(step: int, steps: int, warmup: int = 0, floor: float = 0.0) -> float:
    """The learning-rate factor at optimiser step ``step`` (0-based): a linear warm-up over the first ``warmup``
    steps, times a cosine from 1 down to ``floor`` at ``steps`` (flat after it). ``warmup = 0``: no warm-up."""
    ramp = min(1.0, (step + 1) / max(1, warmup))
    return ramp * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(step, steps) / max(1, steps))))


class Trainer:
    """AdamW over ``model``'s parameters (or the param groups given), with an optional learning-rate schedule (a
    factor function of the step, or one per group, as ``torch.optim.lr_scheduler.LambdaLR`` takes) and optional
    gradient clipping. The model is trained in place."""

    def __init__(self, model: torch.nn.Module, lr: float, *, params: Iterable | None = None,
                 betas: tuple[float, float] = (0.9, 0.999), schedule: Callable | list[Callable] | None = None,
                 max_grad_norm: float | None = None):
        self.model = model
        groups = list(params if params is not None else model.parameters())
        self.params = [p for g in groups for p in (g["params"] if isinstance(g, dict) else [g])]  # for clipping
        self.optimizer = torch.optim.AdamW(groups, lr=lr, betas=betas, weight_decay=0.0)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, schedule) if schedule is not None else None
        self.max_grad_norm = max_grad_norm

    def step(self, losses: torch.Tensor | Iterable[torch.Tensor], accumulate: int = 1) -> float | None:
        """One optimiser step. ``losses`` is one loss, or pieces whose gradients accumulate, each divided by
        ``accumulate`` (each piece's graph is freed by its backward before the next is built). Returns the loss
        (the mean of the pieces), or None, taking no step, when there was no piece."""
        self.optimizer.zero_grad(set_to_none=True)
        values = []
        for loss in [losses] if isinstance(losses, torch.Tensor) else losses:
            (loss / accumulate).backward()
            values.append(float(loss.detach()))
        if not values:
            return None
        if self.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        return values[0] if len(values) == 1 else float(np.mean(values))

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None:
            self.scheduler.load_state_dict(state["scheduler"])


@dataclass(frozen=True)
class Checkpoint:
    """Where a run keeps its training state; a checkpoint written under another config is ignored."""

    path: Path
    config: dict  # the run's config (``cfg.to_dict()``)

    def load(self) -> dict | None:
        if not self.path.is_file():
            return None
        # on the CPU whoever saved it: load_state_dict then copies into the model's and optimiser's devices
        state = torch.load(self.path, weights_only=False, map_location="cpu")
        return state if state.get("config") == self.config and "trainer" in state else None

    def save(self, state: dict) -> None:
        tmp = self.path.with_suffix(".tmp")
        torch.save({"config": self.config, **state}, tmp)
        tmp.replace(self.path)  # atomic: a run stopped while saving keeps the previous checkpoint


@dataclass
class LoopLog:
    losses: list[float] = field(default_factory=list)  # one per optimiser step taken
    vals: list[tuple[int, float]] = field(default_factory=list)  # (steps done, validation loss)
    seconds: float = 0.0  # training wall time, the earlier part of a resumed run included


def train_loop(trainer: Trainer, steps: int, loss: Callable[[int], torch.Tensor | Iterable[torch.Tensor]], *,
               accumulate: int = 1, validate: Callable[[], float] | None = None, val_every: int = 0,
               keep_best: bool = False, checkpoint: Checkpoint | None = None,
               generator: torch.Generator | None = None, desc: str = "train", progress: bool = True) -> LoopLog:
    """``steps`` optimiser steps of ``trainer`` on ``loss(step)`` (0-based step; see ``Trainer.step`` for pieces).

    After every ``val_every``-th step taken and after the last one, ``validate()`` (run without gradients) is
    logged as (steps done, value); with ``keep_best`` the model ends with the weights of the best validation (small
    data: later epochs can overfit). With a ``checkpoint``, each validation also saves the trainer, the batch
    ``generator`` and the log, and a later call with the same config resumes from there."""
    log, start = LoopLog(), 0
    state = checkpoint.load() if checkpoint is not None else None
    if state is not None:
        trainer.load_state_dict(state["trainer"])
        if generator is not None:
            generator.set_state(state["generator"])
        log = LoopLog(state["losses"], state["vals"], state["seconds"])
        start = state["step"]
    best, t0, done = (math.inf, None), time.perf_counter(), log.seconds
    bar = tqdm(range(start, steps), desc=desc, file=sys.stderr, disable=not progress, initial=start, total=steps)
    for step in bar:
        value = trainer.step(loss(step), accumulate)
        if value is None:  # nothing to learn from in this batch: no step, no validation
            continue
        log.losses.append(value)
        if validate is not None and ((step + 1) % max(1, val_every) == 0 or step + 1 == steps):
            with torch.no_grad():
                log.vals.append((step + 1, validate()))
            if keep_best and log.vals[-1][1] < best[0]:
                best = (log.vals[-1][1], {k: v.detach().clone() for k, v in trainer.model.state_dict().items()})
            if checkpoint is not None:
                checkpoint.save({"trainer": trainer.state_dict(), "generator": generator.get_state()
                                 if generator is not None else None, "losses": log.losses, "vals": log.vals,
                                 "step": step + 1, "seconds": done + time.perf_counter() - t0})
        bar.set_postfix(loss=f"{value:.3f}", val=f"{log.vals[-1][1]:.3f}" if log.vals else "-")
    if best[1] is not None:
        trainer.model.load_state_dict(best[1])
    log.seconds = done + time.perf_counter() - t0
    return log


# ----------------------------------------------------------------------------------------- the run


class PhaseTimer:
    """Wall time of a run's phases: ``with timer.phase("data"):`` adds to ``data_s``; ``seconds()`` adds
    ``total_s`` (since the timer was made) and rounds to 0.1 s, as the records keep them."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.times: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0)

    def add(self, name: str, seconds: float) -> None:
        self.times[f"{name}_s"] = self.times.get(f"{name}_s", 0.0) + seconds

    def seconds(self) -> dict[str, float]:
        times = {**self.times, "total_s": time.perf_counter() - self.start}
        return {k: round(v, 1) for k, v in times.items()}


def versions() -> dict:
    return {"torch": torch.__version__, "python": sys.version.split()[0]}


@dataclass
class Run:
    """A run folder and what its record says about where the run came from."""

    out: Path
    command: list[str]
    config: Any  # a frozen dataclass with ``to_dict()``
    provenance: dict  # by default {"git_revision": the commit when the run began}
    timer: PhaseTimer

    def record(self, **sections) -> dict:
        """The run record: command, config, provenance, the trainer's own sections, phase times, versions."""
        return {"command": self.command, "config": self.config.to_dict(), **self.provenance, **sections,
                "times_s": self.timer.seconds(), "versions": versions()}

    def write(self, record: dict, *folders: Path, indent: int = 1) -> None:
        """``training_record.json`` in the run folder and in each of ``folders`` (the saved weights' own)."""
        for folder in (self.out, *folders):
            atomic_write_text(folder / "training_record.json", json.dumps(record, indent=indent, default=str) + "\n")


def begin_run(out: str | Path, cfg, module: str, command: list[str] | None = None,
              provenance: dict | None = None) -> Run:
    """Create ``out``, set the torch threads to ``cfg.threads`` and write ``out/config.json`` (the command, by
    default this process's ``python -m module ...``, and ``cfg``); the run's provenance defaults to the git
    revision now (the code that runs is the code imported now)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(cfg.threads)
    command = command if command is not None else ["python", "-m", module, *sys.argv[1:]]  # (as one types it)
    atomic_write_text(out / "config.json", json.dumps({"command": command, **cfg.to_dict()}, indent=1) + "\n")
    return Run(out, command, cfg, provenance if provenance is not None else {"git_revision": git_revision()},
               PhaseTimer())
