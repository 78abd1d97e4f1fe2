"""Distillation data: conversations the target writes itself, kept with its top-k probabilities at every generated
position (survey blog, "Draft Model Distillation"), and the batches every draft trainer steps on.

- ``DataConfig``: the recipe (shards, batch, turn lengths, teacher top-k, task-style shards).
- ``generate_data`` (resumable, ``DIR/shard_*.pt`` and ``DIR/task_*.pt``): the target samples a user turn from its
  own chat template ("<|im_start|>user\\n" ... <|im_end|>), then answers it (greedy in even shards, T = 1 in odd
  ones). Every generated position keeps the target's top-k probabilities and the tail mass, not the full V-row.
  Task-style shards start the user turn with a generic opening (``training.stems``: instructions, word problems,
  code, articles to summarise, two-turn chats) and let the target write the rest, so that the data covers the
  kinds of request the draft is evaluated on. No prompt of the evaluation suites (``specrepro.core.prompts``) is ever
  shown to the target here.
- ``Example`` (one sequence with its teacher rows), ``load_data``, ``choose_vocab``; ``DistillBatch`` and
  ``collate``: examples padded into one batch, teacher rows aligned with the positions that predict them.

The Medusa heads and the PPD prompt tokens train on the same shards (``training.medusa``, ``training.ppd``); the
DistillSpec study and the online updates build ``Example``s of their own (``Example.with_rows``).
"""
from __future__ import annotations

import dataclasses
import os
import random
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from ..core.batch_cache import BatchCache
from ..engine import engine_of
from ..engine.models import LoadedModel
from . import stems


@dataclass(frozen=True)
class DataConfig:
    """The data recipe: which conversations the target writes, and how much of each row is kept."""

    target: str = "smollm2-135m-instruct"
    seed: int = 0
    shards: int = 48  # one shard = one batch of target-written conversations
    gen_batch: int = 64  # sequences generated together (HF generate, batched)
    gen_dtype: str = "fp32"  # the shipped draft's recipe (on an AVX2-only CPU, fp32 was the faster); where the CPU
    # has bf16 units, bf16 on the engine's kernels writes 1.4x faster (training/README.md)
    user_max_new: int = 48  # tokens for the sampled user turn
    answer_max_new: int = 128  # tokens for the target's answer
    top_k: int = 32  # teacher probabilities kept per position (plus the tail mass)
    task_shards: int = 32  # shards of task-style conversations (``training.stems``), on top of ``shards``
    task_temperature: float = 0.7  # for the user turns and articles the target writes in task-style shards
    article_max_new: int = 160  # tokens of an article to be summarised (task-style shards)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# ------------------------------------------------------------------------------- target-written text

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
    """Batched generation (greedy at temperature 0, else sampled at ``temperature`` with draws from torch's global
    generator); per sequence (new ids up to and including ``stop``, teacher top-k ids [n, K] and probabilities
    [n, K] of the raw T = 1 distribution at each new position, whatever the sampling temperature). On the engine
    where the model has one (``_engine_generate``), else transformers' ``generate`` from left-padded prompts."""
    if engine_of(model) is not None:
        return _engine_generate(model, prompts, max_new, temperature, stop, top_k)
    width, device = max(map(len, prompts)), next(model.parameters()).device
    ids = torch.tensor([[stop] * (width - len(p)) + p for p in prompts], device=device)  # [B, L] left-padded
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)  # [B, L]
    kw = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 else dict(
        do_sample=False)
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=max_new, eos_token_id=stop, pad_token_id=stop,
                             output_logits=True, return_dict_in_generate=True, **kw)
    new = out.sequences[:, width:].cpu()  # [B, n]
    tops = [torch.topk(step.float().softmax(-1), top_k, dim=-1) for step in out.logits]  # n x ([B, K], [B, K])
    top_p = torch.stack([t.values for t in tops], 1).cpu()  # [B, n, K]: rows are kept (and saved) on the CPU
    top_i = torch.stack([t.indices for t in tops], 1).cpu()  # [B, n, K]
    result = []
    for b in range(len(prompts)):
        toks = new[b].tolist()
        n = toks.index(stop) + 1 if stop in toks else len(toks)
        result.append((toks[:n], top_i[b, :n], top_p[b, :n]))
    return result


def _engine_generate(model: torch.nn.Module, prompts: list[list[int]], max_new: int, temperature: float,
                     stop: int, top_k: int) -> list[tuple[list[int], torch.Tensor, torch.Tensor]]:
    """``generate_with_rows`` on the engine: the prompts as the rows of one ``BatchCache`` (ragged, no padding
    column read), one forward a token for every row still writing; a row leaves the batch once it writes ``stop``.
    Sampled rows draw from one generator seeded from torch's global one (so ``torch.manual_seed`` fixes them)."""
    draws = torch.Generator().manual_seed(int(torch.randint(2 ** 62, (1,))))
    cache, live = BatchCache(model, len(prompts), [len(p) for p in prompts]), list(range(len(prompts)))
    seqs = [list(p) for p in prompts]
    new: list[list[int]] = [[] for _ in prompts]
    tops: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in prompts]
    for _ in range(max_new):
        logits = cache.score([seqs[b] for b in live])[0][:, 0].float().cpu()  # [B', V]
        cache.keep([[] for _ in live])
        top = torch.topk(logits.softmax(-1), top_k, dim=-1)  # [B', K]
        chosen = (torch.multinomial((logits / temperature).softmax(-1), 1, generator=draws)[:, 0]
                  if temperature > 0 else logits.argmax(-1))  # [B']
        for i, b in enumerate(live):
            seqs[b].append(int(chosen[i]))
            new[b].append(int(chosen[i]))
            tops[b].append((top.indices[i], top.values[i]))
        still = [i for i, b in enumerate(live) if new[b][-1] != stop]
        if not still:
            break
        if len(still) < len(live):
            cache.select(still)
            live = [live[i] for i in still]
    return [(new[b], torch.stack([i for i, _ in tops[b]]), torch.stack([p for _, p in tops[b]]))
            for b in range(len(prompts))]


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


def generate_shard(model: torch.nn.Module, chat: ChatFormat, cfg: DataConfig, index: int) -> dict:
    """One batch of target-written conversations (user turn sampled at T = 1 from the bare template; answers
    greedy in even shards, T = 1 in odd ones) with the teacher's top-k rows at every generated position."""
    torch.manual_seed(cfg.seed * 1_000_003 + index)  # HF generate samples from the global generator
    convs: list[tuple[list[int], Rows]] = [(list(chat.user_prefix), {}) for _ in range(cfg.gen_batch)]
    _turn(model, convs, cfg.user_max_new, 1.0, chat, cfg.top_k, then=chat.assistant_header)
    _turn(model, convs, cfg.answer_max_new, float(index % 2), chat, cfg.top_k, close=False)
    return _pack(convs, cfg.top_k)


@dataclass(frozen=True)
class TaskOpenings:
    """Token ids of the task-style openings of ``training.stems``, encoded by the target's tokenizer."""

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


def generate_task_shard(model: torch.nn.Module, chat: ChatFormat, openings: TaskOpenings, cfg: DataConfig,
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


def shard_plan(cfg: DataConfig) -> list[tuple[str, bool, int]]:
    """The data files of a run as (file name, task-style?, index): ``shard_*`` (free conversations), then
    ``task_*`` (task-style)."""
    return ([(f"shard_{i:05d}.pt", False, i) for i in range(cfg.shards)]
            + [(f"task_{i:05d}.pt", True, i) for i in range(cfg.task_shards)])


def generate_data(model: torch.nn.Module, chat: ChatFormat, cfg: DataConfig, data_dir: Path,
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


def load_data(data_dir: Path, cfg: DataConfig) -> list[Example]:
    seqs = []
    for name, _, _ in shard_plan(cfg):
        d = torch.load(data_dir / name, map_location="cpu")
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


# ------------------------------------------------------------------------------------------ batches


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

    def to(self, device: torch.device | str) -> "DistillBatch":
        """The same batch on ``device`` (the student's): ``collate`` builds it on the CPU."""
        return DistillBatch(*(getattr(self, f.name).to(device) for f in dataclasses.fields(self)))


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

