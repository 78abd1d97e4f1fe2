"""Distil a small draft q from the target p on text the target writes itself (survey blog, "Draft Model
Distillation"; DistillSpec's divergences).

One command runs the whole recipe and writes a folder that describes itself::

    python -m specrepro.distill --out runs/draft --seed 0

1. Data (``DIR/data/shard_*.pt``, resumable): the target samples a user turn from its own chat template
   ("<|im_start|>user\\n" ... <|im_end|>), then answers it (greedy in even shards, T = 1 in odd ones). Every
   generated position keeps the target's top-k probabilities and the tail mass, not the full V-row.
   Task-style shards (``DIR/data/task_*.pt``) start the user turn with a generic opening (``distill_stems``:
   instructions, word problems, code, articles to summarise, two-turn chats) and let the target write the
   rest, so that the data covers the kinds of request the draft is evaluated on. No prompt of the
   evaluation suites (``specrepro.prompts``) is ever shown to the target here.
2. Train: a ``ReducedVocabDraft`` (the target's first layers, head over the N most likely tokens of that
   text) minimises a divergence between the coarsened teacher and student distributions.
3. Evaluate α at T = 0 and T = 1 (γ = 4) with the verification loop on held-out suite prompts, the draft's
   teacher-forced agreement with the target there, the same agreement on held-out and on training
   conversations of the data (how much the draft memorised), and the cost ratio c of one cached decode step.
4. Write ``DIR/config.json``, ``DIR/training_record.json`` and the draft in ``DIR/draft``.

The trainer is a function of (draft, batch, divergence), so on-policy batches (online speculative decoding,
built from the verification step's target rows) go through the same ``train_step``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from tqdm import tqdm

from . import distill_stems as stems
from .autoregressive import autoregressive_generate
from .config import DecodeConfig, SamplingConfig
from .decoding import eos_ids
from .draft_model import ReducedVocabDraft, draft_from_target, load_draft_model, save_draft
from .drafters import LMDrafter
from .models import LoadedModel, load_model
from .provenance import atomic_write_text
from .speculative import speculative_generate

EVAL_SUITES = ("instruct", "chat", "math", "summarize", "humaneval")  # held out: never used for training


@dataclass(frozen=True)
class DistillConfig:
    target: str = "smollm2-135m-instruct"
    seed: int = 0
    # data
    shards: int = 48  # one shard = one batch of target-written conversations
    gen_batch: int = 64  # sequences generated together (HF generate, batched)
    gen_dtype: str = "fp32"  # fp32 was faster than bf16 for batched generation on this CPU (no bf16 units)
    user_max_new: int = 48  # tokens for the sampled user turn
    answer_max_new: int = 128  # tokens for the target's answer
    top_k: int = 32  # teacher probabilities kept per position (plus the tail mass)
    task_shards: int = 32  # shards of task-style conversations (``distill_stems``), on top of ``shards``
    task_temperature: float = 0.7  # for the user turns and articles the target writes in task-style shards
    article_max_new: int = 160  # tokens of an article to be summarised (task-style shards)
    # draft
    n_layers: int = 3  # decoder layers, initialised from the target's first layers
    n_kept: int = 8192  # N: output vocabulary (the most likely tokens of the generated text)
    # training
    divergence: str = "fkl"  # fkl | rkl | jsd | tvd
    steps: int = 1200
    batch_size: int = 16  # sequences per step
    max_len: int = 384  # positions per training sequence (a two-turn chat or a summary fits)
    lr: float = 2e-3
    warmup: int = 20
    val_every: int = 50  # steps between validation losses; the best validated weights are kept
    # evaluation (held-out suite prompts)
    eval_per_suite: int = 3
    eval_max_new: int = 64
    gamma: int = 4
    cost_steps: int = 24  # decode steps timed for c
    threads: int = 2  # torch threads; when other jobs share the 2 cores, 1 thread ran 2-9x faster than 2

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# ------------------------------------------------------------------------------------- divergences
# Each takes the teacher p [..., M] (probabilities) and the student log q [..., M] over the same M outcomes
# and returns the divergence per row [...]. Terms with p = 0 (or q = 0) are dropped, as 0 log 0 = 0; logs
# are made finite before use so that masked entries never put NaN into gradients.

EPS = 1e-12


def _safe_log(x: torch.Tensor) -> torch.Tensor:
    return torch.log(x.clamp_min(EPS))


def fkl(p: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """Forward KL(p || q) = Σ p log(p / q): mode covering."""
    logq = torch.where(p > 0, logq, torch.zeros_like(logq))
    return torch.where(p > 0, p * (_safe_log(p) - logq), torch.zeros_like(p)).sum(-1)


def rkl(p: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """Reverse KL(q || p) = Σ q log(q / p): mode seeking."""
    q = logq.exp()
    logq = torch.where(q > 0, logq, torch.zeros_like(logq))
    return torch.where(q > 0, q * (logq - _safe_log(p)), torch.zeros_like(q)).sum(-1)


def jsd(p: torch.Tensor, logq: torch.Tensor, beta: float = 0.5) -> torch.Tensor:
    """Generalised Jensen-Shannon: β KL(p || m) + (1 − β) KL(q || m), m = β p + (1 − β) q (GKD, DistillSpec)."""
    q = logq.exp()
    logm = _safe_log(beta * p + (1 - beta) * q)  # [..., M]
    logq = torch.where(q > 0, logq, torch.zeros_like(logq))
    kl_qm = torch.where(q > 0, q * (logq - logm), torch.zeros_like(q)).sum(-1)
    return beta * fkl(p, logm) + (1 - beta) * kl_qm


def tvd(p: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """Total variation ½ Σ |p − q|; the acceptance rate of q for p is α = Σ min(p, q) = 1 − TVD."""
    return 0.5 * (p - logq.exp()).abs().sum(-1)


DIVERGENCES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "fkl": fkl, "rkl": rkl, "jsd": jsd, "tvd": tvd}


def coarsen(logq_kept: torch.Tensor, token_map: torch.Tensor, top_ids: torch.Tensor, top_probs: torch.Tensor,
            tail: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher and student as distributions over the K teacher top ids + one "rest" outcome: (p, log q) [..., K+1].

    logq_kept [..., N] are the student's log-probs over its kept ids; token_map [V] maps a full id to its
    draft index (N = not kept). A teacher top id the draft cannot emit has q = 0, so its teacher mass moves
    into "rest" (a merge of outcomes never increases an f-divergence, so this is a lower bound of the full one).
    """
    n_kept = logq_kept.shape[-1]
    idx = token_map[top_ids]  # [..., K]
    kept = idx < n_kept
    p_top = torch.where(kept, top_probs, torch.zeros_like(top_probs))  # [..., K]
    p_rest = tail + (top_probs - p_top).sum(-1)  # [...]
    logq_top = logq_kept.gather(-1, idx.clamp(max=n_kept - 1)).masked_fill(~kept, float("-inf"))  # [..., K]
    q_rest = (1 - logq_top.exp().sum(-1)).clamp(min=EPS)  # [...]
    p = torch.cat([p_top, p_rest.clamp(min=0).unsqueeze(-1)], -1)  # [..., K+1]
    logq = torch.cat([logq_top, q_rest.log().unsqueeze(-1)], -1)  # [..., K+1]
    return p, logq


# -------------------------------------------------------------------------------------------- data


@dataclass(frozen=True)
class ChatFormat:
    """Token ids that frame a target-written conversation: ``user_prefix`` + user turn + ``end`` +
    ``assistant_header`` + answer + ``end`` [+ ``user_header`` + user turn + ``end`` + ...]."""

    user_prefix: tuple[int, ...]  # e.g. system turn + "<|im_start|>user\n"
    end: int  # the end-of-turn id (<|im_end|>), also the stop id of both generations
    assistant_header: tuple[int, ...]  # e.g. "\n<|im_start|>assistant\n"
    user_header: tuple[int, ...] = ()  # a later user turn, e.g. "\n<|im_start|>user\n" (two-turn chats)


def chat_format(target: LoadedModel) -> ChatFormat:
    """Read the framing off the target's chat template (the same one ``encode_prompt`` applies)."""
    tok, mark = target.tokenizer, "\x00MARK\x00"
    turns = [{"role": r, "content": mark} for r in ("user", "assistant", "user")]
    text = tok.apply_chat_template(turns, add_generation_prompt=True, tokenize=False)
    before, after_user, after_answer, after = text.split(mark)
    end = tok.convert_tokens_to_ids(tok.eos_token) if tok.eos_token else None
    ids = [tok(part, add_special_tokens=False)["input_ids"] for part in (before, after_user, after_answer, after)]
    if end is None or any(not part or part[0] != end for part in ids[1:]):
        raise ValueError("the chat template does not close each turn with the tokenizer's eos token")
    if ids[1] != ids[3]:
        raise ValueError("the chat template frames the assistant's turn differently in the history")
    return ChatFormat(tuple(ids[0]), end, tuple(ids[3][1:]), tuple(ids[2][1:]))


def generate_with_rows(model: torch.nn.Module, prompts: list[list[int]], max_new: int, temperature: float,
                       stop: int, top_k: int) -> list[tuple[list[int], torch.Tensor, torch.Tensor]]:
    """Batched HF generation from left-padded prompts (greedy at temperature 0); per sequence (new ids up to and
    including ``stop``, teacher top-k ids [n, K] and probabilities [n, K] of the raw T = 1 distribution at each
    new position, whatever the sampling temperature)."""
    width = max(map(len, prompts))
    ids = torch.tensor([[stop] * (width - len(p)) + p for p in prompts])  # [B, L] left-padded
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])  # [B, L]
    kw = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 else dict(
        do_sample=False)
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=max_new, eos_token_id=stop, pad_token_id=stop,
                             output_logits=True, return_dict_in_generate=True, **kw)
    new = out.sequences[:, width:]  # [B, n]
    tops = [torch.topk(step.float().softmax(-1), top_k, dim=-1) for step in out.logits]  # n x ([B, K], [B, K])
    top_p = torch.stack([t.values for t in tops], 1)  # [B, n, K]
    top_i = torch.stack([t.indices for t in tops], 1)  # [B, n, K]
    result = []
    for b in range(len(prompts)):
        toks = new[b].tolist()
        n = toks.index(stop) + 1 if stop in toks else len(toks)
        result.append((toks[:n], top_i[b, :n], top_p[b, :n]))
    return result


Rows = dict[int, tuple[torch.Tensor, torch.Tensor]]  # position -> teacher (top ids [K], top probs [K])


def _turn(model: torch.nn.Module, convs: list[tuple[list[int], Rows]], max_new: int, temperature: float,
          chat: ChatFormat, top_k: int, close: bool = True, then: tuple[int, ...] = ()) -> list[list[int]]:
    """The target writes one turn after each conversation (tokens, rows), extending both in place. A turn cut at
    ``max_new`` is closed by hand when ``close`` (that closing id has no teacher row); ``then`` (the next turn's
    header) follows. Returns each turn's new ids (without the end-of-turn id)."""
    written = []
    outputs = generate_with_rows(model, [t for t, _ in convs], max_new, temperature, chat.end, top_k)
    for (toks, rows), (new, ids, probs) in zip(convs, outputs):
        ended = bool(new) and new[-1] == chat.end
        rows.update({len(toks) + j: (ids[j], probs[j]) for j in range(len(new))})
        toks += new + ([chat.end] if close and not ended else []) + list(then)
        written.append(new[:-1] if ended else new)
    return written


def _pack(convs: list[tuple[list[int], Rows]], top_k: int) -> dict:
    """Padded shard tensors: ``tokens`` [S, L]; ``length`` [S]; ``has_row`` [S, L] (a teacher row for predicting
    token j); ``top_ids`` [S, L, K] int32; ``top_probs`` [S, L, K] fp16; ``tail`` [S, L] (1 − Σ top_probs, fp32)."""
    S, L, K = len(convs), max(len(t) for t, _ in convs), top_k
    shard = {"tokens": torch.zeros(S, L, dtype=torch.int32), "length": torch.tensor([len(t) for t, _ in convs]),
             "has_row": torch.zeros(S, L, dtype=torch.bool), "top_ids": torch.zeros(S, L, K, dtype=torch.int32),
             "top_probs": torch.zeros(S, L, K, dtype=torch.float16), "tail": torch.zeros(S, L)}
    for s, (toks, rows) in enumerate(convs):
        shard["tokens"][s, : len(toks)] = torch.tensor(toks)
        for j, (i, p) in rows.items():
            shard["has_row"][s, j] = True
            shard["top_ids"][s, j] = i
            shard["top_probs"][s, j] = p.half()
            shard["tail"][s, j] = (1 - p.sum()).clamp(min=0)
    return shard


def generate_shard(model: torch.nn.Module, chat: ChatFormat, cfg: DistillConfig, index: int) -> dict:
    """One batch of target-written conversations (user turn sampled at T = 1 from the bare template; answers
    greedy in even shards, T = 1 in odd ones) with the teacher's top-k rows at every generated position."""
    torch.manual_seed(cfg.seed * 1_000_003 + index)  # HF generate samples from the global generator
    convs: list[tuple[list[int], Rows]] = [(list(chat.user_prefix), {}) for _ in range(cfg.gen_batch)]
    _turn(model, convs, cfg.user_max_new, 1.0, chat, cfg.top_k, then=chat.assistant_header)
    _turn(model, convs, cfg.answer_max_new, float(index % 2), chat, cfg.top_k, close=False)
    return _pack(convs, cfg.top_k)


@dataclass(frozen=True)
class TaskOpenings:
    """Token ids of the task-style openings of ``distill_stems``, encoded by the target's tokenizer."""

    user: dict[str, tuple[tuple[int, ...], ...]]  # kind -> openings of the first user turn
    summary_request: tuple[tuple[int, ...], ...]  # "\n\n" + a request to summarise the article above
    follow_up: tuple[tuple[int, ...], ...]  # openings of a chat's second user turn


def task_openings(tokenizer) -> TaskOpenings:
    def enc(texts: tuple[str, ...], before: str = "") -> tuple[tuple[int, ...], ...]:
        # A trailing space would be a token of its own; BPE glues it to the next word, which the target writes.
        return tuple(tuple(tokenizer(before + t.rstrip(" "), add_special_tokens=False)["input_ids"]) for t in texts)
    return TaskOpenings({k: enc(v) for k, v in stems.OPENINGS.items()}, enc(stems.SUMMARY_REQUEST, "\n\n"),
                        enc(stems.FOLLOW_UP))


def task_kind(index: int) -> str:
    return stems.TASK_KINDS[index % len(stems.TASK_KINDS)]


def generate_task_shard(model: torch.nn.Module, chat: ChatFormat, openings: TaskOpenings, cfg: DistillConfig,
                        index: int) -> dict:
    """One batch of task-style conversations of kind ``task_kind(index)``; answers are greedy in the first round of
    kinds, T = 1 in the next, and so on. User turns (and articles) are written at ``cfg.task_temperature``.

    - instruct, math, code: opening + the target's user turn, then its answer;
    - chat: the same, then a follow-up opening + user turn, then a second answer (one sequence);
    - summarize: "write an article about" + topic, the article (a sequence of its own), then a new conversation
      whose user turn is that article and a request to summarise it, and the summary (a second sequence).
    """
    kind, rng = task_kind(index), random.Random(cfg.seed * 1_000_003 + index)
    answer_t = float((index // len(stems.TASK_KINDS)) % 2)
    torch.manual_seed(cfg.seed * 1_000_003 + 700_001 + index)  # apart from the free shards' seeds
    user_t, K, B = cfg.task_temperature, cfg.top_k, cfg.gen_batch
    convs: list[tuple[list[int], Rows]] = [(list(chat.user_prefix) + list(rng.choice(openings.user[kind])), {})
                                           for _ in range(B)]
    user_max = 2 * cfg.user_max_new if kind == "code" else cfg.user_max_new
    _turn(model, convs, user_max, user_t, chat, K, then=chat.assistant_header)
    if kind == "summarize":
        articles = _turn(model, convs, cfg.article_max_new, user_t, chat, K, close=False)
        second = [(list(chat.user_prefix) + a + list(rng.choice(openings.summary_request)) + [chat.end]
                   + list(chat.assistant_header), {}) for a in articles]
        _turn(model, second, cfg.answer_max_new, answer_t, chat, K, close=False)
        convs += second
    elif kind == "chat":
        if not chat.user_header:
            raise ValueError("two-turn chats need ChatFormat.user_header")
        _turn(model, convs, cfg.answer_max_new, answer_t, chat, K)
        for toks, _ in convs:
            toks += list(chat.user_header) + list(rng.choice(openings.follow_up))
        _turn(model, convs, cfg.user_max_new // 2, user_t, chat, K, then=chat.assistant_header)
        _turn(model, convs, cfg.answer_max_new, answer_t, chat, K, close=False)
    else:
        _turn(model, convs, cfg.answer_max_new, answer_t, chat, K, close=False)
    return _pack(convs, K)


def shard_plan(cfg: DistillConfig) -> list[tuple[str, bool, int]]:
    """The data files of a run as (file name, task-style?, index): ``shard_*`` (free conversations), then
    ``task_*`` (task-style)."""
    return ([(f"shard_{i:05d}.pt", False, i) for i in range(cfg.shards)]
            + [(f"task_{i:05d}.pt", True, i) for i in range(cfg.task_shards)])


def generate_data(model: torch.nn.Module, chat: ChatFormat, cfg: DistillConfig, data_dir: Path,
                  openings: TaskOpenings | None = None) -> int:
    """Write the shards of ``shard_plan(cfg)``, skipping those already there (each is written to a temp file, then
    renamed). ``openings`` is needed when ``cfg.task_shards`` > 0. Returns how many shards were generated now."""
    if cfg.task_shards and openings is None:
        raise ValueError("task_shards > 0 needs the task openings (task_openings(tokenizer))")
    data_dir.mkdir(parents=True, exist_ok=True)
    plan = shard_plan(cfg)
    todo = [job for job in plan if not (data_dir / job[0]).exists()]
    for name, task, index in tqdm(todo, desc="distill data (shards)", initial=len(plan) - len(todo), total=len(plan)):
        shard = (generate_task_shard(model, chat, openings, cfg, index) if task
                 else generate_shard(model, chat, cfg, index))
        tmp = data_dir / f".{name}.tmp"
        torch.save(shard, tmp)
        os.replace(tmp, data_dir / name)
    return len(todo)


@dataclass
class Example:
    tokens: torch.Tensor  # [L] long
    has_row: torch.Tensor  # [L] bool
    top_ids: torch.Tensor  # [L, K] long
    top_probs: torch.Tensor  # [L, K] float
    tail: torch.Tensor  # [L] float

    @classmethod
    def with_rows(cls, tokens: list[int] | tuple[int, ...], positions: slice | torch.Tensor, top_ids: torch.Tensor,
                  top_probs: torch.Tensor, tail: torch.Tensor | None = None) -> "Example":
        """Tokens [L] with teacher rows [R, K] for the tokens at ``positions`` (a slice, or [R] indices) and none
        elsewhere; ``tail`` [R] defaults to 1 − Σ top_probs."""
        L, K = len(tokens), top_ids.shape[-1]
        ex = cls(torch.tensor(tokens), torch.zeros(L, dtype=torch.bool), torch.zeros(L, K, dtype=torch.long),
                 torch.zeros(L, K), torch.zeros(L))
        ex.has_row[positions] = True
        ex.top_ids[positions], ex.top_probs[positions] = top_ids.long(), top_probs.float()
        ex.tail[positions] = tail if tail is not None else (1 - top_probs.float().sum(-1)).clamp(min=0)
        return ex


def load_data(data_dir: Path, cfg: DistillConfig) -> list[Example]:
    seqs = []
    for name, _, _ in shard_plan(cfg):
        d = torch.load(data_dir / name)
        for s, n in enumerate(d["length"].tolist()):
            seqs.append(Example(d["tokens"][s, :n].long(), d["has_row"][s, :n], d["top_ids"][s, :n].long(),
                                  d["top_probs"][s, :n].float(), d["tail"][s, :n]))
    return seqs


def choose_vocab(seqs: list[Example], n_kept: int, vocab_size: int, always: set[int]) -> torch.Tensor:
    """The N ids with the most teacher probability mass (ties: most frequent as tokens) in the data, plus
    ``always`` (template and stop ids). Returns the kept ids [N], sorted."""
    mass = torch.zeros(vocab_size, dtype=torch.float64)
    for s in seqs:
        mass.index_add_(0, s.top_ids[s.has_row].flatten(), s.top_probs[s.has_row].flatten().double())
        mass.index_add_(0, s.tokens, torch.full(s.tokens.shape, 1e-6, dtype=torch.float64))
    mass[list(always)] = float("inf")
    n_kept = min(n_kept, vocab_size - 1)
    return torch.sort(torch.topk(mass, n_kept).indices).values


# ---------------------------------------------------------------------------------------- training


@dataclass
class DistillBatch:
    """Inputs and teacher rows, aligned: row t is the teacher's distribution for the token after position t."""

    input_ids: torch.Tensor  # [B, T] long, full-vocabulary ids
    row_mask: torch.Tensor  # [B, T] bool: a teacher row exists for position t
    top_ids: torch.Tensor  # [B, T, K] long
    top_probs: torch.Tensor  # [B, T, K] float
    tail: torch.Tensor  # [B, T] float: teacher mass outside top_ids

    @property
    def rows(self) -> int:
        return int(self.row_mask.sum())


def collate(examples: list[Example], max_len: int) -> DistillBatch:
    """Right-pad (causal attention never looks right, so padding needs no mask) and cut at ``max_len``."""
    T = min(max_len, max(len(e.tokens) for e in examples) - 1)
    B, K = len(examples), examples[0].top_ids.shape[-1]
    batch = DistillBatch(torch.zeros(B, T, dtype=torch.long), torch.zeros(B, T, dtype=torch.bool),
                         torch.zeros(B, T, K, dtype=torch.long), torch.zeros(B, T, K), torch.zeros(B, T))
    for b, e in enumerate(examples):
        n = min(T, len(e.tokens) - 1)
        batch.input_ids[b, :n] = e.tokens[:n]
        batch.row_mask[b, :n] = e.has_row[1: n + 1]  # position t predicts token t+1
        batch.top_ids[b, :n] = e.top_ids[1: n + 1]
        batch.top_probs[b, :n] = e.top_probs[1: n + 1]
        batch.tail[b, :n] = e.tail[1: n + 1]
    return batch


def student_rows(draft: ReducedVocabDraft, batch: DistillBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """At the R positions with a teacher row: the student's log q over its kept ids [R, N], and teacher and
    student coarsened to the teacher's top-k + "rest" (``coarsen``): (p, log q) [R, K+1] each."""
    z, _ = draft.reduced_logits(batch.input_ids, use_cache=False)  # [B, T, N]
    logq = z.float().log_softmax(-1)[batch.row_mask]  # [R, N]
    p, logq_c = coarsen(logq, draft.token_map, batch.top_ids[batch.row_mask], batch.top_probs[batch.row_mask],
                        batch.tail[batch.row_mask])  # [R, K+1] each
    return logq, p, logq_c


def batch_loss(draft: ReducedVocabDraft, batch: DistillBatch, divergence: str = "fkl") -> torch.Tensor:
    """Mean divergence(teacher, student) over the positions with a teacher row."""
    _, p, logq_c = student_rows(draft, batch)
    return DIVERGENCES[divergence](p, logq_c).mean()


def train_step(draft: ReducedVocabDraft, batch: DistillBatch, divergence: str,
               optimizer: torch.optim.Optimizer, max_grad_norm: float = 1.0) -> float:
    """One update on one batch (offline data or on-policy rows alike); returns the loss before the update."""
    draft.train()
    loss = batch_loss(draft, batch, divergence)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(draft.parameters(), max_grad_norm)
    optimizer.step()
    return loss.item()


def train(draft: ReducedVocabDraft, examples: list[Example], cfg: DistillConfig,
          val_batch: DistillBatch | None = None) -> tuple[list[float], list[tuple[int, float]]]:
    """AdamW with linear warm-up and cosine decay to 10%; batches drawn by a seeded generator.

    With ``val_batch``, the validation loss is measured every ``cfg.val_every`` steps and the draft ends with the
    weights of the best one (the data is small: later epochs can overfit). Returns (train losses, [(step, val)])."""
    opt = torch.optim.AdamW(draft.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, cfg.warmup)) * (
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / max(1, cfg.steps))))))
    gen = torch.Generator().manual_seed(cfg.seed)
    order: list[int] = []
    losses, vals, best = [], [], (math.inf, None)
    bar = tqdm(range(1, cfg.steps + 1), desc=f"distill train ({cfg.divergence})")
    for step in bar:
        if len(order) < cfg.batch_size:  # a new epoch: reshuffle
            order += torch.randperm(len(examples), generator=gen).tolist()
        picked, order = order[: cfg.batch_size], order[cfg.batch_size:]
        losses.append(train_step(draft, collate([examples[i] for i in picked], cfg.max_len), cfg.divergence, opt))
        sched.step()
        if val_batch is not None and (step % cfg.val_every == 0 or step == cfg.steps):
            with torch.no_grad():
                draft.eval()
                vals.append((step, float(batch_loss(draft, val_batch, cfg.divergence))))
            if vals[-1][1] < best[0]:
                best = (vals[-1][1], {k: v.detach().clone() for k, v in draft.state_dict().items()})
        bar.set_postfix(loss=f"{losses[-1]:.3f}", val=f"{vals[-1][1]:.3f}" if vals else "-")
    if best[1] is not None:
        draft.load_state_dict(best[1])
    draft.eval()
    return losses, vals


# -------------------------------------------------------------------------------------- evaluation


def held_out_prompts(target: LoadedModel, per_suite: int) -> dict[str, list[list[int]]]:
    """The first ``per_suite`` prompts of each evaluation suite, chat-encoded as the CLI would."""
    from .generate import encode_prompt
    from .prompts import load_suite
    return {s: [encode_prompt(target, p.messages) for p in load_suite(s, limit=per_suite)] for s in EVAL_SUITES}


def evaluate_alpha(target: torch.nn.Module, draft: torch.nn.Module, prompts: dict[str, list[list[int]]],
                   temperature: float, cfg: DistillConfig, eos: set[int]) -> dict:
    """α = accepted / tested draft tokens, pooled over prompts (and per suite), with the verification loop."""
    t0, pooled, per_suite, new_tokens = time.perf_counter(), [0, 0], {}, 0
    for suite, plist in prompts.items():
        acc = tested = 0
        for k, ids in enumerate(plist):
            config = DecodeConfig(max_new_tokens=cfg.eval_max_new, gamma=cfg.gamma,
                                  sampling=SamplingConfig(temperature=temperature), seed=cfg.seed + k)
            rec = speculative_generate(target, LMDrafter(draft), ids, config, eos)
            acc, tested, new_tokens = acc + sum(rec.accept_lengths), tested + rec.tested, new_tokens + rec.new_tokens
        per_suite[suite] = acc / tested if tested else None
        pooled[0] += acc
        pooled[1] += tested
    return {"temperature": temperature, "gamma": cfg.gamma, "alpha": pooled[0] / pooled[1] if pooled[1] else None,
            "per_suite": per_suite, "accepted": pooled[0], "tested": pooled[1], "new_tokens": new_tokens,
            "prompts": sum(map(len, prompts.values())), "seconds": round(time.perf_counter() - t0, 1)}


def teacher_forced_agreement(target: torch.nn.Module, draft: torch.nn.Module, prompts: dict[str, list[list[int]]],
                             max_new: int, eos: set[int]) -> dict:
    """How well q matches p on the target's own greedy continuations, per suite and pooled.

    For each prompt the target decodes ``max_new`` tokens greedily; one forward pass of each model over prompt +
    continuation then gives, at every continuation position, ``top1`` (the draft's argmax is the target's) and
    ``overlap`` (Σ min(p, q) at T = 1, the chance that a sampled draft token is accepted there). Unlike α from
    the loop, neither depends on where a draft block happened to start, so drafts compare position by position."""
    per_suite, pooled = {}, [0.0, 0.0, 0]
    for suite, plist in prompts.items():
        top1 = overlap = 0.0
        n = 0
        for ids in plist:
            cont = autoregressive_generate(target, ids, DecodeConfig(max_new_tokens=max_new), eos).token_ids
            seq = torch.tensor([ids + cont])  # [1, L]
            with torch.inference_mode():
                lp = target(input_ids=seq).logits[0, len(ids) - 1: -1].float()  # [n, V]
                lq = draft(input_ids=seq).logits[0, len(ids) - 1: -1].float()  # [n, V]
            top1 += float((lp.argmax(-1) == lq.argmax(-1)).sum())
            overlap += float(torch.minimum(lp.softmax(-1), lq.softmax(-1)).sum())
            n += lp.shape[0]
        per_suite[suite] = {"top1": top1 / n, "overlap": overlap / n, "positions": n} if n else None
        pooled = [pooled[0] + top1, pooled[1] + overlap, pooled[2] + n]
    return {"top1": pooled[0] / pooled[2] if pooled[2] else None,
            "overlap": pooled[1] / pooled[2] if pooled[2] else None, "positions": pooled[2], "per_suite": per_suite,
            "max_new": max_new}


def data_agreement(draft: ReducedVocabDraft, examples: list[Example], max_len: int, chunk: int = 32) -> dict:
    """Top-1 agreement and Σ min(p, q) of the draft on stored conversations, read off the teacher rows (no target
    call): the figures of ``teacher_forced_agreement`` at every position with a row.

    On training conversations against held-out ones of the same kind, the gap says how much the draft has
    memorised rather than learnt: a large gap means the draft is short of data. Σ min runs over the teacher's
    top-k ids only (the tail is not stored), so it is a lower bound."""
    top1 = overlap = 0.0
    rows = 0
    with torch.no_grad():
        for i in range(0, len(examples), chunk):
            b = collate(examples[i: i + chunk], max_len)
            logq, p, logq_c = student_rows(draft, b)  # [R, N], [R, K+1], [R, K+1]
            top1 += float((draft.kept_ids[logq.argmax(-1)] == b.top_ids[b.row_mask][:, 0]).sum())  # col 0: p's argmax
            overlap += float(torch.minimum(p[:, :-1], logq_c[:, :-1].exp()).sum())  # the top-k, not "rest"
            rows += int(logq.shape[0])
    return {"top1": top1 / rows if rows else None, "overlap": overlap / rows if rows else None,
            "rows": rows, "sequences": len(examples)}


def measure_cost_ratio(target: torch.nn.Module, draft: torch.nn.Module, prompt_ids: list[int], steps: int) -> dict:
    """c = draft / target time of one cached decode step after the same context, timed by the package's one
    timing primitive (``metrics.profile.forward_timer``: device-synchronised, rolled back after each call).

    Steps alternate between the two models so that load from other processes hits both alike; medians."""
    from .metrics.profile import forward_timer
    timers = {"target": forward_timer(target, list(prompt_ids)), "draft": forward_timer(draft, list(prompt_ids))}
    times: dict[str, list[float]] = {k: [] for k in timers}
    for _ in range(steps):
        for m, time_forward in timers.items():
            times[m].append(time_forward(1))
    t_ms, d_ms = (1e3 * statistics.median(times[m]) for m in ("target", "draft"))
    return {"c": d_ms / t_ms, "target_ms": t_ms, "draft_ms": d_ms, "steps": steps, "context": len(prompt_ids),
            "dtype": str(next(draft.parameters()).dtype)}


# ----------------------------------------------------------------------------------------- the run


def git_revision() -> dict:
    root = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "specrepro"], cwd=root, capture_output=True,
                               text=True).stdout.strip()
        return {"revision": rev or None, "dirty_files": dirty.splitlines()}
    except OSError:
        return {"revision": None, "dirty_files": []}


def _write_json(path: Path, obj: dict) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, default=str))


def distill(cfg: DistillConfig, out: str | Path, target: LoadedModel | None = None, chat: ChatFormat | None = None,
            eval_prompts: dict[str, list[list[int]]] | None = None, command: list[str] | None = None,
            openings: TaskOpenings | None = None) -> dict:
    """Data, training, evaluation, files. ``target``/``chat``/``eval_prompts``/``openings`` default to the zoo
    target, its chat template, the held-out suites and ``distill_stems`` in its tokenizer (tests pass a tiny model,
    a made-up framing, id prompts and id openings)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(cfg.threads)
    times, t_start = {}, time.perf_counter()
    command = command if command is not None else [sys.executable, "-m", "specrepro.distill", *sys.argv[1:]]
    _write_json(out / "config.json", {"command": command, **cfg.to_dict()})
    git = git_revision()  # at the start: the code that runs is the code imported now

    # 1. Data: the target writes conversations; we keep its top-k rows.
    t0 = time.perf_counter()
    gen = target if target is not None else load_model(cfg.target, dtype=cfg.gen_dtype, device="cpu")
    chat = chat or chat_format(gen)
    if cfg.task_shards and openings is None:
        openings = task_openings(gen.tokenizer)
    made = generate_data(gen.model, chat, cfg, out / "data", openings)
    examples = load_data(out / "data", cfg)
    times["data_s"] = time.perf_counter() - t0

    # 2. Train on all but every 20th conversation (their loss is the validation loss).
    t0 = time.perf_counter()
    val_ex = examples[::20]  # every 20th conversation, so that each kind of shard is validated
    train_ex = [e for i, e in enumerate(examples) if i % 20]
    always = set(chat.user_prefix) | set(chat.assistant_header) | {chat.end}
    kept = choose_vocab(train_ex, cfg.n_kept, gen.vocab_size, always)
    torch.manual_seed(cfg.seed)
    draft = draft_from_target(gen.model, kept, cfg.n_layers, torch.float32)
    val_batch = collate(val_ex, cfg.max_len)
    with torch.no_grad():
        val_before = float(batch_loss(draft, val_batch, cfg.divergence))
    losses, vals = train(draft, train_ex, cfg, val_batch)
    with torch.no_grad():
        val_after = float(batch_loss(draft, val_batch, cfg.divergence))
        val_div = {d: float(batch_loss(draft, val_batch, d)) for d in DIVERGENCES}
    times["train_s"] = time.perf_counter() - t0
    tokenizer = gen.tokenizer
    vocab_size = gen.vocab_size
    del gen

    # 3. Evaluate the saved (bf16) draft against the target in the engine's default dtype.
    t0 = time.perf_counter()
    save_draft(draft, out / "draft", tokenizer=tokenizer, target=cfg.target)
    ev_target = target if target is not None else load_model(cfg.target, device="cpu")
    dtype = next(ev_target.model.parameters()).dtype
    ev_draft, _ = load_draft_model(out / "draft", dtype=dtype)
    prompts = eval_prompts if eval_prompts is not None else held_out_prompts(ev_target, cfg.eval_per_suite)
    eos = eos_ids(ev_target.model, ev_target.tokenizer) or {chat.end}
    alpha = [evaluate_alpha(ev_target.model, ev_draft, prompts, t, cfg, eos) for t in (0.0, 1.0)]
    agreement = teacher_forced_agreement(ev_target.model, ev_draft, prompts, cfg.eval_max_new, eos)
    # The same figures on the data: held-out conversations against as many training ones (memorisation gap).
    on_data = {"held_out": data_agreement(ev_draft, val_ex, cfg.max_len),
               "train": data_agreement(ev_draft, train_ex[:: max(1, len(train_ex) // len(val_ex))][: len(val_ex)],
                                       cfg.max_len)}
    first = next(p for ps in prompts.values() for p in ps)
    cost = {}
    for n in sorted({cfg.threads, 2}):  # c depends on threads: the target gains more from a second core
        torch.set_num_threads(n)
        cost[f"threads={n}"] = measure_cost_ratio(ev_target.model, ev_draft, first, cfg.cost_steps)
    torch.set_num_threads(cfg.threads)
    cost["c"] = max(v["c"] for v in cost.values())  # the less favourable one
    times["eval_s"] = time.perf_counter() - t0
    times["total_s"] = time.perf_counter() - t_start

    # 4. The record: enough to rerun and to judge the draft.
    record = {
        "command": command, "seed": cfg.seed, "config": cfg.to_dict(), "git": git,
        "data": {"shards": cfg.shards, "task_shards": cfg.task_shards, "shards_generated_now": made,
                 "sequences": len(examples),
                 "tokens": int(sum(len(e.tokens) for e in examples)),
                 "teacher_rows": int(sum(int(e.has_row.sum()) for e in examples)),
                 "train_sequences": len(train_ex), "val_sequences": len(val_ex),
                 "held_out": f"suites {', '.join(EVAL_SUITES)} are never shown to the target during data generation"},
        "draft": {"n_layers": cfg.n_layers, "n_kept": int(kept.numel()), "full_vocab_size": vocab_size,
                  "parameters": sum(p.numel() for p in draft.parameters()),
                  "size_mb": round((out / "draft" / "model.safetensors").stat().st_size / 2**20, 2)},
        "train": {"steps": cfg.steps, "divergence": cfg.divergence, "losses": [round(x, 5) for x in losses],
                  "val_loss_before": val_before, "val_loss_after": val_after, "val_divergences_after": val_div,
                  "val_losses": vals, "kept_step": min(vals, key=lambda v: v[1])[0] if vals else cfg.steps},
        "alpha": {f"T={a['temperature']:g}": a for a in alpha},
        "agreement": agreement,
        "agreement_on_data": on_data,
        "cost": cost,
        "times_s": {k: round(v, 1) for k, v in times.items()},
        "versions": {"torch": torch.__version__, "python": sys.version.split()[0]},
    }
    _write_json(out / "training_record.json", record)
    _write_json(out / "draft" / "training_record.json", record)
    _write_json(out / "draft" / "distill_config.json", {"command": command, **cfg.to_dict()})
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m specrepro.distill", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="run folder (data shards are reused if present)")
    for f in dataclasses.fields(DistillConfig):
        kw = {"choices": sorted(DIVERGENCES)} if f.name == "divergence" else {}
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default, **kw)
    args = vars(parser.parse_args(argv))
    out = args.pop("out")
    record = distill(DistillConfig(**args), out)
    summary = {k: record["alpha"][k]["alpha"] for k in record["alpha"]}
    print(json.dumps({"alpha": summary, "c": record["cost"]["c"], "steps": record["train"]["steps"],
                      "teacher_rows": record["data"]["teacher_rows"], "times_s": record["times_s"]}, indent=2))


if __name__ == "__main__":
    main()
