"""The DistillSpec study (survey blog, "Draft Model Distillation"; Zhou et al. 2023, DistillSpec): which divergence
and which source of training outputs distil the best draft for speculative decoding.

The grid, as the blog's table: divergences FKL, JSD, RKL and TVD (``training.losses.DIVERGENCES``) × where the
outputs y of the training pairs (x, y) come from:

- ``fixed``: the dataset's own outputs (here: the written reference answers of the suites);
- ``draft``: sampled from the draft being trained (on-policy), drawn afresh at every step;
- ``target``: sampled from the target;
- ``mix``: half of every batch from the draft, half from the target (DistillSpec's student/teacher mixture).

The inputs x are always the prompts of the train split; whatever wrote y, the teacher's rows p(· | x, y_<j) at
every output position come from one forward of the target (kept as its top-k plus the tail mass, as
``training.data`` stores them), and every cell steps on ``training.losses.batch_loss`` in the trainer loop.

The baseline. DistillSpec distils pretrained drafts; ours is the shipped zoo draft (``smollm2-135m-draft``:
distilled once with FKL on generic target-written chats, never on these suites). Every cell starts from a copy of
it and gets the same budget (optimiser steps × sequences per step, learning rate, output length, the same
prompts in the same order, seeded samples), and the score is the blog's: the relative gain in τ, tokens per
target call, of speculative decoding on held-out prompts of the same suites (never trained on), against the
baseline draft with the same seeds. A paired bootstrap over prompts gives each gain an interval, and the
teacher-forced Σ min(p, q) on held-out target samples ranks the cells with much less noise than τ.

Resumable: each cell is written to its own file when it is done (atomically), the target's samples once.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm
from transformers import DynamicCache

from ..core.batch_cache import check_batchable
from ..core.config import DecodeConfig, SamplingConfig
from ..core.cost import tau
from ..core.decoding import eos_ids, model_device
from ..core.kvcache import drop_last
from ..drafters import LMDrafter
from ..core.executor import ExecutorConfig, executor_arg, run_cells
from ..core.prompts import encode_prompt, load_suite
from ..core.provenance import atomic_write_text
from ..core.record import alpha_of
from ..decode.autoregressive import autoregressive_generate
from ..decode.batched import batched_autoregressive, batched_generate
from .data import Example, collate, generate_with_rows
from .evaluate import data_agreement
from .loop import Trainer, train_loop
from .losses import DIVERGENCES, batch_loss

SOURCES = ("fixed", "draft", "target", "mix")  # where the outputs y come from (rows of the blog's table)
DIVERGENCE_ORDER = ("fkl", "jsd", "rkl", "tvd")  # columns, in the blog's order


@dataclass(frozen=True)
class StudyConfig:
    """One DistillSpec grid: its cells, their common budget and the evaluation."""

    divergences: tuple[str, ...] = DIVERGENCE_ORDER
    sources: tuple[str, ...] = SOURCES
    suites: tuple[str, ...] = ("instruct", "chat", "summarize")  # the suites with written reference answers
    held_out_per_suite: int = 4  # the first prompts of each suite: evaluation only, never trained on
    steps: int = 24  # optimiser steps per cell (the same budget for every cell)
    batch_size: int = 8  # sequences per step
    lr: float = 3e-4  # AdamW, constant: the draft is already trained
    max_new: int = 64  # tokens of each sampled output (draft, target); references are cut to this length too
    sample_temperature: float = 1.0  # the draft's and the target's samples
    top_k: int = 32  # teacher probabilities kept per position, plus the tail mass
    max_len: int = 1024  # positions per training sequence (a summarize prompt and its output fit)
    eval_max_new: int = 64
    eval_temperature: float = 1.0  # τ is measured by speculative sampling at this temperature
    eval_batch: int = 8  # held-out prompts decoded at once (each row its batch-1 run: only the time changes)
    gamma: int = 4
    held_out_samples: int = 2  # target samples per held-out prompt for the teacher-forced Σ min(p, q)
    bootstrap: int = 2000  # paired bootstrap resamples of the held-out prompts
    seed: int = 0

    def __post_init__(self) -> None:
        bad = [d for d in self.divergences if d not in DIVERGENCES]
        if bad or not self.divergences:
            raise ValueError(f"divergences must be a non-empty subset of {sorted(DIVERGENCES)}, got {self.divergences}")
        bad = [s for s in self.sources if s not in SOURCES]
        if bad or not self.sources:
            raise ValueError(f"sources must be a non-empty subset of {SOURCES}, got {self.sources}")
        for name in ("held_out_per_suite", "steps", "batch_size", "max_new", "top_k", "max_len", "eval_max_new",
                     "gamma", "held_out_samples", "bootstrap", "eval_batch"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if "mix" in self.sources and self.batch_size < 2:
            raise ValueError("the mix source needs batch_size >= 2 (half draft, half target)")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a finite number > 0, got {self.lr!r}")
        for name in ("sample_temperature", "eval_temperature"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {getattr(self, name)!r}")

    def cells(self) -> list[tuple[str, str]]:
        return [(s, d) for s in self.sources for d in self.divergences]

    def to_dict(self) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(self)))


@dataclass(frozen=True)
class StudyData:
    """Token ids of the study: train pairs (prompt, reference output) and held-out prompts with their suite."""

    train: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]  # (x, y_ref), chat-encoded prompt and answer
    held_out: tuple[tuple[str, tuple[int, ...]], ...]  # (suite, x)
    stop: int  # end-of-turn id: ends every sampled output, closes every reference
    eos: frozenset[int]

    def __post_init__(self) -> None:
        if not self.train:
            raise ValueError("the study needs at least one train pair")
        if not self.held_out:
            raise ValueError("the study needs at least one held-out prompt")


def suite_data(target, cfg: StudyConfig) -> StudyData:
    """The suites' prompts, chat-encoded for ``target`` (a ``LoadedModel``): the first ``held_out_per_suite`` of
    each held out, the rest with their reference answers (+ the end-of-turn id) as the train split."""
    tok = target.tokenizer
    stop = tok.convert_tokens_to_ids(tok.eos_token)
    train, held = [], []
    for suite in cfg.suites:
        for k, prompt in enumerate(load_suite(suite)):
            ids = tuple(encode_prompt(target, prompt.messages))
            if k < cfg.held_out_per_suite:
                held.append((suite, ids))
                continue
            reference = prompt.extra.get("reference")
            if not reference:
                raise ValueError(f"suite {suite!r} prompt {prompt.id} has no reference answer")
            answer = tok(reference, add_special_tokens=False)["input_ids"][: cfg.max_new - 1]
            train.append((ids, tuple(answer) + (stop,)))
    return StudyData(tuple(train), tuple(held), stop, frozenset(eos_ids(target.model, tok) or {stop}))


# ------------------------------------------------------------------------------------------------ data


def teacher_examples(target: torch.nn.Module, pairs: list[tuple[list[int], list[int]]], top_k: int,
                     chunk: int = 4) -> list[Example]:
    """(x, y) pairs as training examples: the target's top-k rows (raw, T = 1) at every position of y, from one
    forward over x + y (right-padded; causal attention never looks right)."""
    examples = []
    for i in range(0, len(pairs), chunk):
        part = pairs[i: i + chunk]
        seqs = [list(x) + list(y) for x, y in part]
        width = max(map(len, seqs))
        ids = torch.tensor([s + [0] * (width - len(s)) for s in seqs], device=model_device(target))  # [b, L]
        with torch.inference_mode():
            logits = target(input_ids=ids).logits  # [b, L, V]
        for b, ((x, y), s) in enumerate(zip(part, seqs)):
            n0, n = len(x), len(s)
            examples.append(_example(s, n0, logits[b, n0 - 1: n - 1], top_k))
    return examples


def _example(seq: list[int], n0: int, logits: torch.Tensor, top_k: int) -> Example:
    """``seq`` = x + y with the target's top-k rows ``logits`` [len(y), V] (raw, T = 1) at the positions of y."""
    top = torch.topk(logits.float().softmax(-1), top_k, dim=-1)  # [m, K]
    return Example.with_rows(seq, slice(n0, None), top.indices.cpu(), top.values.cpu())


class PrefixTeacher:
    """``teacher_examples`` for outputs written on a few prompts over and over (the draft and mix cells sample
    new outputs y on the same train prompts x at every step): each prompt's keys and values are computed once and
    kept, and every (x, y) pair runs only its own len(y) columns after them. The rows are the full forward's up
    to float rounding (tested). Keeps at most ``capacity`` prompts, the least recently used leaving first."""

    def __init__(self, target: torch.nn.Module, top_k: int, capacity: int = 32):
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be an integer >= 1, got {capacity!r}")
        self.target, self.top_k, self.capacity = target, top_k, capacity
        self._prefixes: dict[tuple[int, ...], DynamicCache] = {}  # x -> the cache of x[:-1], in use order

    def __getstate__(self) -> dict:  # a Ray task gets the target, not the caches: it fills its own
        return {**self.__dict__, "_prefixes": {}}

    def examples(self, pairs: list[tuple[list[int], list[int]]]) -> list[Example]:
        if any(len(x) < 1 or len(y) < 1 for x, y in pairs):
            raise ValueError("every (x, y) pair needs at least one prompt token and one output token")
        out = []
        with torch.inference_mode():
            for x, y in pairs:
                cache = self._prefix(tuple(x))
                ids = torch.tensor([[x[-1], *y[:-1]]], device=model_device(self.target))  # the rows of y_0..y_{m-1}
                logits = self.target(input_ids=ids, cache=cache, use_cache=True).logits[0]  # [m, V]
                drop_last(cache, len(y))  # back to the prompt alone, for the next output on it
                out.append(_example(list(x) + list(y), len(x), logits, self.top_k))
        return out

    def _prefix(self, x: tuple[int, ...]) -> DynamicCache:
        cache = self._prefixes.pop(x, None)
        if cache is None:
            cache = DynamicCache(config=self.target.config)
            if len(x) > 1:
                self.target(input_ids=torch.tensor([x[:-1]], device=model_device(self.target)),
                            cache=cache, use_cache=True)
            if len(self._prefixes) >= self.capacity:
                del self._prefixes[next(iter(self._prefixes))]
        self._prefixes[x] = cache
        return cache


def target_samples(target: torch.nn.Module, prompts: list[list[int]], cfg: StudyConfig, stop: int, seed: int,
                   chunk: int = 8) -> list[Example]:
    """One target sample per prompt (T = ``sample_temperature``, batched generation), with the target's rows."""
    torch.manual_seed(seed)  # HF generate samples from the global generator
    out = []
    for i in range(0, len(prompts), chunk):
        part = prompts[i: i + chunk]
        for x, (new, ids, probs) in zip(part, generate_with_rows(target, part, cfg.max_new, cfg.sample_temperature,
                                                                 stop, cfg.top_k)):
            out.append(Example.with_rows(list(x) + new, slice(len(x), None), ids, probs))
    return out


def draft_samples(draft: torch.nn.Module, prompts: list[list[int]], cfg: StudyConfig, eos: set[int],
                  seed: int) -> list[list[int]]:
    """One output per prompt sampled from the draft's own q, seeds seed + b: the package's batch-1 AR loop's output
    for each prompt and seed. The rows run together (``batched_autoregressive``) where the draft can be batched
    (the engine's drafts can), else one after the other."""
    draft.eval()
    config = DecodeConfig(method="ar", max_new_tokens=cfg.max_new,
                          sampling=SamplingConfig(temperature=cfg.sample_temperature))
    seeds = [seed + b for b in range(len(prompts))]
    try:
        check_batchable(draft)
    except ValueError:  # e.g. a reduced-vocabulary draft without the engine, whose forward takes no position ids
        return [autoregressive_generate(draft, list(x), dataclasses.replace(config, seed=s), eos).token_ids
                for x, s in zip(prompts, seeds)]
    return [rec.token_ids for rec in batched_autoregressive(draft, [list(x) for x in prompts], config, eos, seeds)]


def schedule(n_train: int, cfg: StudyConfig) -> list[list[int]]:
    """The train-pair indices of every step: seeded epochs, the same for every cell (common random numbers)."""
    rng, order, steps = random.Random(cfg.seed), [], []
    for _ in range(cfg.steps):
        batch = []
        while len(batch) < cfg.batch_size:
            if not order:
                order = list(range(n_train))
                rng.shuffle(order)
            batch.append(order.pop())
        steps.append(batch)
    return steps


# -------------------------------------------------------------------------------------------- one cell


def train_cell(target: torch.nn.Module, draft: torch.nn.Module, data: StudyData, source: str, divergence: str,
               cfg: StudyConfig, fixed: list[Example], pool: list[list[Example]],
               teacher: PrefixTeacher | None = None) -> tuple[torch.nn.Module, dict]:
    """A copy of ``draft`` (fp32) distilled for ``cfg.steps`` steps on outputs from ``source``. ``fixed`` holds the
    reference examples of the train pairs, ``pool[s]`` the target's samples for step s; ``teacher`` gives the
    target's rows of the draft's outputs (default: a new ``PrefixTeacher``; pass one to share its prompts' keys and
    values across cells). Returns (draft, log)."""
    teacher = teacher if teacher is not None else PrefixTeacher(target, cfg.top_k)
    student = copy.deepcopy(draft).float()
    student.requires_grad_(True)
    trainer = Trainer(student, cfg.lr, betas=(0.9, 0.95), max_grad_norm=1.0)  # constant lr: already trained
    steps = schedule(len(data.train), cfg)
    sample_s, drawn = 0.0, 0

    def loss(step: int) -> torch.Tensor:
        nonlocal sample_s, drawn
        t0, picked = time.perf_counter(), steps[step]
        if source == "fixed":
            batch = [fixed[i] for i in picked]
        elif source == "target":
            batch = pool[step]
        else:  # draft, mix: the draft writes (half of) the outputs now, with its current weights
            n_draft = cfg.batch_size if source == "draft" else cfg.batch_size // 2
            prompts = [list(data.train[i][0]) for i in picked[:n_draft]]
            outputs = draft_samples(student, prompts, cfg, set(data.eos), seed=cfg.seed * 1_000_003 + 1000 * step)
            drawn += len(outputs)
            batch = teacher.examples(list(zip(prompts, outputs))) + pool[step][n_draft:]
        sample_s += time.perf_counter() - t0
        student.train()
        return batch_loss(student, collate(batch, cfg.max_len), divergence)

    log = train_loop(trainer, len(steps), loss, progress=False)
    student.eval()
    return student, {"losses": [round(x, 5) for x in log.losses], "draft_outputs": drawn,
                     "sampling_s": round(sample_s, 1), "train_s": round(log.seconds - sample_s, 1)}


def measure_tau(target: torch.nn.Module, draft: torch.nn.Module, data: StudyData, cfg: StudyConfig) -> dict:
    """Speculative sampling with ``draft`` on every held-out prompt (seed cfg.seed + k): per prompt new tokens,
    target calls, accepted and tested draft tokens; pooled τ = Σ new / Σ calls and α. The prompts run
    ``cfg.eval_batch`` rows at a time (``decode.batched``): each row is its batch-1 run, tokens and acceptances
    alike (tests/test_batched.py), in fewer, wider forwards."""
    rows, records = [], []
    config = DecodeConfig(max_new_tokens=cfg.eval_max_new, gamma=cfg.gamma,
                          sampling=SamplingConfig(temperature=cfg.eval_temperature), seed=cfg.seed)
    held = list(data.held_out)
    for start in range(0, len(held), cfg.eval_batch):
        chunk = held[start:start + cfg.eval_batch]
        records += batched_generate(target, lambda b: LMDrafter(draft), [list(x) for _, x in chunk], config,
                                    set(data.eos), seeds=[cfg.seed + start + k for k in range(len(chunk))])
    for (suite, _), rec in zip(held, records):
        rows.append({"suite": suite, "new_tokens": rec.new_tokens, "target_calls": rec.target_calls,
                     "accepted": sum(rec.accept_lengths), "tested": rec.tested})
    new, calls = sum(r["new_tokens"] for r in rows), sum(r["target_calls"] for r in rows)
    return {"tau": new / calls, "alpha": alpha_of(records), "prompts": rows}


def relative_gain(cell: list[dict], base: list[dict], resamples: int, seed: int) -> dict:
    """τ_cell / τ_base − 1 on the same prompts, and a 90% paired bootstrap interval (prompts resampled)."""
    if len(cell) != len(base) or not cell:
        raise ValueError("the cell and the baseline must be measured on the same, non-empty prompts")
    arr = np.array([[c["new_tokens"], c["target_calls"], b["new_tokens"], b["target_calls"]]
                    for c, b in zip(cell, base)], dtype=float)  # [P, 4]

    def gain(a: np.ndarray) -> np.ndarray:  # a [..., P, 4]
        return (a[..., 0].sum(-1) / a[..., 1].sum(-1)) / (a[..., 2].sum(-1) / a[..., 3].sum(-1)) - 1

    idx = np.random.default_rng(seed).integers(0, len(arr), size=(resamples, len(arr)))  # [R, P]
    boot = gain(arr[idx])  # [R]
    return {"gain": float(gain(arr)), "lo90": float(np.quantile(boot, 0.05)), "hi90": float(np.quantile(boot, 0.95))}


def evaluate(target: torch.nn.Module, draft: torch.nn.Module, data: StudyData, cfg: StudyConfig,
             held_samples: list[Example]) -> dict:
    """τ by speculative sampling on the held-out prompts, and the teacher-forced Σ min(p, q) (over the teacher's
    top-k: a lower bound) and top-1 agreement on the target's samples of them."""
    t0 = time.perf_counter()
    measured = measure_tau(target, draft, data, cfg)
    agreement = data_agreement(draft, held_samples, cfg.max_len)
    a = agreement["overlap"]
    # E[tokens per call] of a chain with i.i.d. acceptance a (γ + 1 at a = 1); a float32 Σ min may pass 1 by rounding
    expected = tau(min(a, 1.0), cfg.gamma)
    return {**measured, "overlap": a, "top1": agreement["top1"], "expected_tau_from_overlap": expected,
            "eval_s": round(time.perf_counter() - t0, 1)}


# --------------------------------------------------------------------------------------------- the grid


def _write(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(obj, indent=2, default=str))


def distill_cell(target: torch.nn.Module, draft: torch.nn.Module, data: StudyData, cfg: StudyConfig,
                 fixed: list[Example], pool: list[list[Example]], held: list[Example], teacher: PrefixTeacher,
                 cell: tuple[str, str]) -> dict:
    """One cell of the grid, ``cell`` = (source, divergence): a copy of ``draft`` distilled (``train_cell``) and
    measured (``evaluate``), as the record its file keeps. Module-level, so that a Ray task can run it."""
    source, divergence = cell
    student, log = train_cell(target, draft, data, source, divergence, cfg, fixed, pool, teacher)
    return {"cell": f"{source}-{divergence}", "source": source, "divergence": divergence, **log,
            **evaluate(target, student, data, cfg, held)}


def run_study(target: torch.nn.Module, draft: torch.nn.Module, data: StudyData, cfg: StudyConfig,
              out: str | Path, cache: str | Path | None = None, progress: bool = True,
              executor: ExecutorConfig | str | None = None) -> dict:
    """Every cell of ``cfg`` (resumable: a cell whose file exists under ``out`` with this config is kept), then the
    table: per cell τ, α, Σ min(p, q) and the relative gain in τ over the baseline ``draft`` (never modified).

    ``executor`` (``specrepro.core.executor``; default local) runs the cells still to do: one after the other here, or
    as Ray tasks. The target's samples and the baseline are made here first; each cell's file is written here as
    the cells before it are done, so the files, and the resume keys, are the same whichever executor ran them.

    ``out`` gets small JSON files (the config, one per cell, ``study.json``); ``cache`` (default ``out``) the
    target's samples and rows as tensors, which are large."""
    out = Path(out)
    cache = Path(cache) if cache is not None else out
    spec = {"study": cfg.to_dict(), "train_pairs": len(data.train), "held_out": len(data.held_out)}
    config_file = out / "config.json"
    if config_file.exists() and json.loads(config_file.read_text()) != spec:
        raise ValueError(f"{out} holds a study with another configuration; choose another folder")
    _write(config_file, spec)
    target.eval()
    steps = schedule(len(data.train), cfg)

    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:10]

    def cached(name: str, make):  # tensors of this configuration only: the file name carries its digest
        path = cache / f"{name}-{digest}.pt"
        if not path.exists():
            cache.mkdir(parents=True, exist_ok=True)
            value = make()
            tmp = path.with_name(f".{path.name}.tmp")
            torch.save(value, tmp)
            tmp.replace(path)
        return torch.load(path, weights_only=False, map_location="cpu")  # examples live on the CPU

    t0 = time.perf_counter()
    fixed = cached("fixed", lambda: teacher_examples(target, [(list(x), list(y)) for x, y in data.train],
                                                        cfg.top_k))
    needs_pool = any(s in ("target", "mix") for s in cfg.sources)
    pool = cached("target_pool", lambda: [
        target_samples(target, [list(data.train[i][0]) for i in batch], cfg, data.stop, seed=cfg.seed * 7919 + s)
        for s, batch in enumerate(tqdm(steps, desc="target samples", disable=not progress))]) if needs_pool else []
    held = cached("held_out_samples", lambda: target_samples(
        target, [list(x) for _, x in data.held_out for _ in range(cfg.held_out_samples)], cfg, data.stop,
        seed=cfg.seed * 7919 - 1))
    data_s = time.perf_counter() - t0

    base_file = out / "cells" / "baseline.json"
    if not base_file.exists():
        _write(base_file, {"cell": "baseline", **evaluate(target, draft, data, cfg, held)})
    base = json.loads(base_file.read_text())
    cell_file = lambda source, divergence: out / "cells" / f"{source}-{divergence}.json"
    todo = [c for c in cfg.cells() if not cell_file(*c).exists()]  # the resume key: the cell's file
    # Each cell trained and measured by the executor (here, or as a Ray task); its file written here, in order.
    teacher = PrefixTeacher(target, cfg.top_k)  # the train prompts' keys and values, shared by the cells run here
    run_cells(functools.partial(distill_cell, target, draft, data, cfg, fixed, pool, held, teacher), todo, executor,
              progress="DistillSpec cells" if progress else False,
              on_result=lambda i, record: _write(cell_file(*todo[i]), record))
    rows = []
    for source, divergence in cfg.cells():
        cell = json.loads(cell_file(source, divergence).read_text())
        cell.update(relative_gain(cell["prompts"], base["prompts"], cfg.bootstrap, cfg.seed))
        cell["overlap_gain"] = cell["overlap"] - base["overlap"]
        rows.append(cell)
    result = {**spec, "baseline": base, "cells": rows, "data_s": round(data_s, 1)}
    _write(out / "study.json", result)
    return result


def gain_grid(result: dict, key: str = "gain") -> tuple[list[str], list[str], np.ndarray]:
    """The table's layout: (sources, divergences, values [S, D]) of ``key`` for every cell."""
    sources = list(result["study"]["sources"])
    divergences = list(result["study"]["divergences"])
    grid = np.full((len(sources), len(divergences)), np.nan)
    for cell in result["cells"]:
        grid[sources.index(cell["source"]), divergences.index(cell["divergence"])] = cell[key]
    return sources, divergences, grid


def main(argv: list[str] | None = None) -> None:
    """``python -m specrepro.training.distillspec --out DIR [--steps N ...]``: the grid on the zoo pair."""
    from ..core.cli import Parser, threads as threads_arg
    from ..engine.models import load_draft, load_model

    parser = Parser(prog="python -m specrepro.training.distillspec", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder of the cells (resumed when it holds this configuration)")
    parser.add_argument("--cache", default=None, help="folder of the target's samples as tensors (default: --out)")
    parser.add_argument("--target", default="smollm2-135m-instruct")
    parser.add_argument("--draft", default="smollm2-135m-draft")
    parser.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda when available)")
    parser.add_argument("--threads", type=threads_arg, default=None,
                        help="torch threads (here, and of each Ray task: the CPUs it reserves; default 1 there)")
    parser.add_argument("--executor", type=executor_arg, default="local",
                        help="where the cells run: local (default), ray (a local Ray cluster), ray://HOST:PORT or "
                             "HOST:PORT (a running one); see specrepro.core.executor")
    for f in dataclasses.fields(StudyConfig):
        if isinstance(f.default, tuple):
            parser.add_argument(f"--{f.name.replace('_', '-')}", default=",".join(f.default),
                                help=f"comma-separated (default {','.join(f.default)})")
        else:
            parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default)
    args = vars(parser.parse_args(argv))
    out, cache, names, threads = args.pop("out"), args.pop("cache"), (args.pop("target"), args.pop("draft")), \
        args.pop("threads")
    device = args.pop("device")
    executor = args.pop("executor")
    if executor.kind == "ray":
        executor = dataclasses.replace(executor, num_cpus=threads or 1)
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        cfg = StudyConfig(**{k: tuple(v.split(",")) if isinstance(getattr(StudyConfig, k, None), tuple) else v
                             for k, v in args.items()})
    except ValueError as e:
        parser.error(str(e))  # one line and exit status 2
    target = load_model(names[0], dtype="fp32", device=device)
    draft = load_draft(names[1], target, dtype="fp32")
    result = run_study(target.model, draft.model, suite_data(target, cfg), cfg, out, cache, executor=executor)
    print(json.dumps({"baseline_tau": result["baseline"]["tau"],
                      "cells": {c["cell"]: {"gain": round(c["gain"], 4), "overlap_gain": round(c["overlap_gain"], 4)}
                                for c in result["cells"]}}, indent=2))


if __name__ == "__main__":
    from ..core.cli import run_main
    run_main(main, "python -m specrepro.training.distillspec")
