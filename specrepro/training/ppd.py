"""Train PPD prompt tokens on the frozen target (PPD paper 002, §3.3), on text the target writes itself.

    python -m specrepro.training.ppd --out runs/ppd --seed 0

1. Data (``DIR/data``, resumable): the conversations ``training.data`` writes, the same recipe and shards as
   ``specrepro.training.medusa`` (so the two share their held-out conversations, every 20th).
2. Each step takes one training conversation x (≤ ``max_len`` tokens) and runs the frozen target over it once,
   without gradients: its KV cache and its logits at every position (the teacher). Nothing the prompt tokens do
   can change those (no real token attends to a prompt token), so the cache is reused as it is.
3. Random insertion (§3.3): R anchors t are drawn throughout x; after each, the m prompt tokens × e EPTs sit at
   positions t+1..t+m and see x[:t+1] and their own group (the EPT attention mask, ``drafters.ppd.ept_block_mask``).
   All R groups run in one forward over the cached x, so a step costs R·m·e rows, not a pass over x with grads.
4. Loss (Eq. 1, knowledge distillation): prompt token d's guess (its EPTs' logits averaged) against the teacher's
   distribution of the token d+1 after the anchor, KL(p_teacher ‖ q_d) · decay^(d−1), averaged. Without KD
   (``--no-kd``, Table 3) the target is the token the data holds there (cross-entropy).
5. Held-out conversations: top-1..top-k_max accuracy of each prompt token against the teacher's argmax at every
   anchor, which gives the rank probabilities the dynamic sparse tree is built from.
6. ``DIR/prompt_tokens`` gets the embeddings, their config (with the rank probabilities) and the training record;
   a run that stops keeps ``DIR/checkpoint.pt`` and resumes from it (the package's trainer loop, ``training.loop``).

The paper's ablations are settings here: EPT count (Table 2), KD or not (Table 3), prefix tuning (Table 4: one
trained key/value per layer for each prompt token, seen by that prompt token only), a custom decoding head for the
prompt tokens (Table 5: a copy of the LM head trained with them, in one stage or after the prompt tokens alone),
the EPT attention mask (Table 6), learned EPT weights instead of the average (Table 7) and the multi-exit ensemble
(Table 8: the prompt token's normed states of the last k layers averaged before the LM head). Only the default
recipe (no prefix, no head, one exit, ensemble mask, averaged EPTs) is saved as an inference folder.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import DynamicCache

from ..drafters.ppd import (EPT_MASKS, PPDConfig, PromptTokens, ept_block_mask, load_prompt_tokens,
                            save_prompt_tokens)
from ..core.decoding import model_device
from ..core.kvcache import drop_last
from ..engine.models import LoadedModel, load_model, resolve_device
from ..core.provenance import atomic_write_text, git_revision
from .data import DataConfig, Example, chat_format, generate_data, load_data, task_openings
from .loop import Checkpoint, Trainer, begin_run, train_loop, warmup_cosine
from .features import generating_target, training_target
from .medusa import GEN_DTYPES, MedusaTrainConfig, data_config
from .provenance import machine, tokens_digest

AGGREGATIONS = ("average", "learned")
HEADS = ("none", "1-stage", "2-stage")


@dataclass(frozen=True)
class PPDTrainConfig:
    target: str = "smollm2-135m-instruct"
    seed: int = 0
    prompt_tokens: int = 3  # m (the paper uses 3)
    epts: int = 1  # e, EPTs per prompt token (the paper's inference experiments use 1)
    shards: int = 4  # free target-written conversation shards (training.data), as Medusa's
    task_shards: int = 4  # task-style shards on top
    gen_dtype: str = "fp32"  # the target that writes the data (bf16: as the engine decodes, the EAGLE draft's data)
    gen_batch: int = 64  # conversations per shard
    max_len: int = 320  # positions per conversation kept
    steps: int = 1500  # optimizer steps
    batch: int = 1  # conversations per optimizer step, their losses averaged (Table 3's batch size)
    anchors: int = 48  # R: random insertion points per conversation and step
    lr: float = 1e-2  # the paper's: cosine from 0.01, no warm-up
    decay: float = 0.8  # α of Eq. 1: weight decay^(d−1) on prompt token d
    kd: bool = True  # knowledge distillation (Eq. 1) or hard labels (Table 3's "No")
    mask: str = "ensemble"  # EPT attention mask (Table 6): ensemble | decoder | encoder
    aggregation: str = "average"  # EPT logits: average | learned (Table 7: learned scalar weights)
    exits: int = 1  # multi-exit ensemble (Table 8): average the last k layers' normed states; 1 = off
    prefix: bool = False  # prefix tuning (Table 4): one trained key/value per layer for each prompt token
    head: str = "none"  # custom decoding head for the prompt tokens (Table 5): none | 1-stage | 2-stage
    k_max: int = 10  # top-k accuracies measured on held-out data (the tree's ranks)
    val_conversations: int = 0  # held-out conversations evaluated; 0 = all (every 20th)
    val_every: int = 100  # steps between held-out losses (on 4 conversations)
    curve_every: int = 0  # steps between held-out top-k accuracies on every held-out conversation (the learning
    # curve; a multiple of val_every); 0 = only at the end
    threads: int = 2

    def __post_init__(self):
        if self.mask not in EPT_MASKS:
            raise ValueError(f"mask must be one of {EPT_MASKS}, got {self.mask!r}")
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {self.aggregation!r}")
        if self.gen_dtype not in GEN_DTYPES:
            raise ValueError(f"gen_dtype must be one of {GEN_DTYPES}, got {self.gen_dtype!r}")
        if self.head not in HEADS:
            raise ValueError(f"head must be one of {HEADS}, got {self.head!r}")
        if self.curve_every < 0 or (self.curve_every and self.curve_every % max(1, self.val_every)):
            raise ValueError(f"curve_every must be 0 or a multiple of val_every ({self.val_every}), "
                             f"got {self.curve_every}")
        if min(self.prompt_tokens, self.epts, self.exits, self.anchors, self.batch) < 1 or self.steps < 0:
            raise ValueError("prompt_tokens, epts, exits, anchors and batch must be >= 1 and steps >= 0")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class Student(torch.nn.Module):
    """What trains: the prompt tokens; the EPT weights when aggregation is "learned" (Table 7); with ``model``
    given, a key/value prefix per layer and prompt token (``cfg.prefix``, Table 4) and a decoding head of the
    prompt tokens' own, initialised as the target's LM head (``cfg.head``, Table 5)."""

    def __init__(self, cfg: PPDTrainConfig, init: torch.Tensor, model: torch.nn.Module | None = None):
        super().__init__()
        self.tokens = PromptTokens(init.shape[-1], cfg.prompt_tokens, cfg.epts, init=init)
        self.weights = torch.nn.Parameter(torch.full((cfg.epts,), 1.0 / cfg.epts)) if cfg.aggregation == "learned" else None
        self.prefix_kv = self.head = None
        if cfg.prefix:
            c = model.config
            shape = (c.num_hidden_layers, 2, c.num_key_value_heads, cfg.prompt_tokens, c.hidden_size // c.num_attention_heads)
            self.prefix_kv = torch.nn.Parameter(torch.zeros(shape))  # [layers, k|v, KV heads, m, head dim]
        if cfg.head != "none":
            lm = model.get_output_embeddings()
            self.head = torch.nn.Linear(lm.in_features, lm.out_features, bias=False)
            self.head.weight.data.copy_(lm.weight.detach().float())

    def aggregate(self, logits: torch.Tensor) -> torch.Tensor:
        """EPT logits [..., e, V] -> one guess per prompt token [..., V]: the mean (§3.2) or Σ_j w_j logits_j (B.6)."""
        if self.weights is None:
            return logits.mean(dim=-2)
        return (logits * self.weights[:, None]).sum(dim=-2)


def init_embeddings(model: torch.nn.Module, cfg: PPDTrainConfig) -> torch.Tensor:
    """[m·e, H] ordinary token embeddings to start from (§5: "initialized with normal text token embeddings"),
    drawn at random (seeded) from the embedding table."""
    table = model.get_input_embeddings().weight.detach().float()
    g = torch.Generator().manual_seed(cfg.seed)
    return table[torch.randint(0, table.shape[0], (cfg.prompt_tokens * cfg.epts,), generator=g)].clone()


@dataclass
class Prefix:
    """One conversation after the frozen forward: its cache, the teacher's logits and its tokens."""

    cache: DynamicCache
    logits: torch.Tensor  # [L, V] teacher logits (row t: the distribution of token t+1)
    tokens: torch.Tensor  # [L]
    generated: torch.Tensor  # [L] bool: the target wrote this token (not a template or a task opening)
    usable: torch.Tensor  # [A] anchors t whose distance-1 target (token t+2) the target generated


def run_prefix(model: torch.nn.Module, ex: Example, cfg: PPDTrainConfig) -> Prefix:
    tokens = ex.tokens[: cfg.max_len]
    cache = DynamicCache(config=model.config)
    with torch.no_grad():  # tokens and the index tensors stay on the CPU; the logits are on the model's device
        logits = model(input_ids=tokens[None].to(model_device(model)), cache=cache,
                       use_cache=True).logits[0].float()  # [L, V]
    rows = ex.has_row[: cfg.max_len]
    t = torch.arange(max(0, tokens.numel() - 2))
    return Prefix(cache, logits, tokens, rows, t[rows[t + 2]] if t.numel() else t)


def group_inputs(anchors: torch.Tensor, n_cached: int, cfg: PPDTrainConfig, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """position ids [1, Q] and the additive mask [1, 1, Q, L+Q] for R anchor groups of m·e prompt nodes each
    (Q = R·m·e, distance-major within a group): a node sees x[:t+1] and its group under the EPT mask. The mask is
    in the model's ``dtype`` (SDPA takes no other; its minimum, since fp32's overflows fp16) on its ``device``."""
    m, e, r = cfg.prompt_tokens, cfg.epts, anchors.numel()
    d = torch.arange(1, m + 1).repeat_interleave(e)  # [m·e] distance of each node
    positions = (anchors[:, None] + d[None, :]).reshape(1, -1)  # [1, Q]
    q = r * m * e
    allowed = torch.zeros(q, n_cached + q, dtype=torch.bool)
    allowed[:, :n_cached] = (torch.arange(n_cached)[None, :] <= anchors.repeat_interleave(m * e)[:, None])
    allowed[:, n_cached:] = torch.block_diag(*[ept_block_mask(m, e, cfg.mask)] * r)
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, torch.finfo(dtype).min)
    return positions.to(device), mask[None, None].to(device)


def prefix_mask(mask: torch.Tensor, n_cached: int, cfg: PPDTrainConfig) -> torch.Tensor:
    """Insert m prefix columns after x[:L] into a group mask [1, 1, Q, L+Q]: the prompt nodes of distance d see
    prefix d only (Fig. 10); no real token ever sees a prefix."""
    m, e = cfg.prompt_tokens, cfg.epts
    q = mask.shape[2]
    d = torch.arange(m).repeat_interleave(e).repeat(q // (m * e))  # [Q] distance index of each node
    extra = torch.full((q, m), torch.finfo(mask.dtype).min, dtype=mask.dtype)
    extra[torch.arange(q), d] = 0.0
    extra = extra.to(mask.device)
    return torch.cat([mask[..., :n_cached], extra[None, None], mask[..., n_cached:]], dim=-1)


def student_logits(model: torch.nn.Module, student: Student, prefix: Prefix, anchors: torch.Tensor,
                   cfg: PPDTrainConfig) -> torch.Tensor:
    """Each anchor's prompt-token guesses [R, m, V] (log-probabilities) from one forward over the cached prefix."""
    m, e, h = cfg.prompt_tokens, cfg.epts, student.tokens.embeds.shape[-1]
    n_cached = prefix.tokens.numel()
    weight = model.get_input_embeddings().weight
    positions, mask = group_inputs(anchors, n_cached, cfg, dtype=weight.dtype, device=weight.device)
    embeds = student.tokens.embeds.reshape(1, m * e, h).expand(anchors.numel(), -1, -1).reshape(1, -1, h)  # [1, Q, H]
    embeds = embeds.to(weight.dtype)  # the student trains in fp32; a bf16/fp16 target reads its own dtype
    added = positions.shape[1]
    if student.prefix_kv is not None:  # prefix tuning: m trained positions after x in every layer (Fig. 10)
        for i, layer in enumerate(prefix.cache.layers):
            layer.keys = torch.cat([layer.keys, student.prefix_kv[i, 0][None].to(layer.keys)], dim=2)  # [1, KV, L+m, D]
            layer.values = torch.cat([layer.values, student.prefix_kv[i, 1][None].to(layer.values)], dim=2)
        mask = prefix_mask(mask, n_cached, cfg)
        added += m
    custom = student.head is not None
    out = model(inputs_embeds=embeds, attention_mask=mask, position_ids=positions, cache=prefix.cache,
                use_cache=True, output_hidden_states=cfg.exits > 1 or custom,
                logits_to_keep=1 if cfg.exits > 1 or custom else 0)
    drop_last(prefix.cache, added)  # the prompt nodes' (and prefixes') entries: the next forward sees x alone again
    for layer in prefix.cache.layers:  # (and no autograd history through the kept slices)
        layer.keys, layer.values = layer.keys.detach(), layer.values.detach()
    head = student.head if custom else model.get_output_embeddings()
    if cfg.exits == 1:
        logits = out.logits[0] if not custom else head(out.hidden_states[-1][0])  # [Q, V]
    else:  # multi-exit: the last k layers' states through the final norm, averaged (Table 8). hidden_states is
        # (embeddings, layer 1, …, layer N−1, norm(layer N)): the last entry is already normed.
        norm = model.get_decoder().norm
        states = [out.hidden_states[-1][0]] + [norm(s[0]) for s in out.hidden_states[-cfg.exits:-1]]  # k × [Q, H]
        logits = head(torch.stack(states).mean(0))  # [Q, V]
    logits = logits.float().reshape(anchors.numel(), m, e, -1)  # [R, m, e, V]
    return student.aggregate(logits).log_softmax(-1)  # [R, m, V]


def targets(prefix: Prefix, anchors: torch.Tensor, d: int) -> torch.Tensor:
    """[R] bool: whether prompt token d after each anchor t has a target, token t+d+1 inside the sequence and
    written by the target."""
    at = anchors + d + 1
    ok = at < prefix.tokens.numel()
    ok[ok.clone()] = prefix.generated[at[ok]]
    return ok


def loss_for(logq: torch.Tensor, prefix: Prefix, anchors: torch.Tensor, cfg: PPDTrainConfig) -> torch.Tensor:
    """Eq. 1: (1/m) Σ_d decay^(d−1) · mean over anchors of KL(teacher ‖ q_d), teacher = the target's row at t+d
    (the distribution of token t+d+1); without KD, −log q_d(x_{t+d+1}). Targets past the sequence end, or on
    tokens the target did not write (templates, task openings), drop out (``targets``)."""
    total = logq.new_zeros(())
    length = prefix.tokens.numel()
    for d in range(1, cfg.prompt_tokens + 1):
        ok = targets(prefix, anchors, d)
        if not ok.any():
            continue
        rows, lq = anchors[ok] + d, logq[ok, d - 1]  # [R'], [R', V]
        if cfg.kd:
            p = prefix.logits[rows].softmax(-1)  # [R', V]
            loss = (p * (p.clamp_min(1e-12).log() - lq)).sum(-1).mean()
        else:
            loss = -lq.gather(-1, prefix.tokens[rows + 1][:, None].to(lq.device)).mean()
        total = total + cfg.decay ** (d - 1) * loss
    return total / cfg.prompt_tokens


def topk_accuracy(model: torch.nn.Module, student: Student, examples: list[Example], cfg: PPDTrainConfig,
                  chunk: int = 64) -> tuple[np.ndarray, int]:
    """acc [m, k_max]: over every usable anchor of the held-out conversations, the fraction where the teacher's
    argmax d+1 tokens after the anchor is in prompt token d's top-i; and the number of anchors."""
    hits, counts = np.zeros((cfg.prompt_tokens, cfg.k_max)), np.zeros(cfg.prompt_tokens)
    with torch.no_grad():
        for ex in examples:
            prefix = run_prefix(model, ex, cfg)
            for s in range(0, prefix.usable.numel(), chunk):
                anchors = prefix.usable[s:s + chunk]
                logq = student_logits(model, student, prefix, anchors, cfg)  # [R, m, V]
                for d in range(1, cfg.prompt_tokens + 1):
                    ok = targets(prefix, anchors, d)
                    truth = prefix.logits[anchors[ok] + d].argmax(-1)  # [R']
                    lq = logq[ok, d - 1]
                    rank = (lq > lq.gather(-1, truth[:, None])).sum(-1)  # [R'] 0 = top-1
                    for r in rank[rank < cfg.k_max].tolist():
                        hits[d - 1, r:] += 1
                    counts[d - 1] += int(ok.sum())
    return hits / np.maximum(counts, 1)[:, None], int(counts[0])


def accuracy_dict(acc: np.ndarray) -> dict[str, list[float]]:
    """acc [m, k_max] as the records keep it: {"distance_d": top-1..top-k_max}, to 4 decimals."""
    return {f"distance_{d + 1}": [round(float(x), 4) for x in row] for d, row in enumerate(acc)}


class LearningCurve:
    """Held-out top-k accuracies against the conversations seen (steps × batch), every ``cfg.curve_every`` steps
    and at the end, kept in a JSON file beside the checkpoint so that a resumed run keeps the points before it."""

    def __init__(self, path: Path, cfg: PPDTrainConfig):
        self.path, self.cfg = path, cfg
        self.points: list[dict] = json.loads(path.read_text()) if path.exists() else []

    def maybe_measure(self, step: int, measure) -> None:
        """At a ``curve_every`` step before the last (the last is the final evaluation), ``measure()`` → acc."""
        every = self.cfg.curve_every
        if every and step % every == 0 and step < self.cfg.steps and all(p["step"] != step for p in self.points):
            self.add(step, measure())

    def add(self, step: int, acc: np.ndarray) -> None:
        self.points = [p for p in self.points if p["step"] != step] + [
            {"step": step, "conversations_seen": step * self.cfg.batch, "topk_accuracy": accuracy_dict(acc)}]
        self.points.sort(key=lambda p: p["step"])
        atomic_write_text(self.path, json.dumps(self.points, indent=1) + "\n")


def shared_data(cfg: PPDTrainConfig) -> DataConfig:
    """The data recipe: ``training.data``'s generator with the Medusa heads' shards (so both share data)."""
    return data_config(MedusaTrainConfig(target=cfg.target, seed=0, shards=cfg.shards, task_shards=cfg.task_shards,
                                         gen_batch=cfg.gen_batch))


def split(n_examples: int, cfg: PPDTrainConfig) -> tuple[list[int], list[int]]:
    """(training, held-out) conversation indices: every 20th is held out, as for the Medusa heads; the first
    ``val_conversations`` of them when that is set."""
    val = [i for i in range(n_examples) if i % 20 == 0]
    return [i for i in range(n_examples) if i % 20], val[: cfg.val_conversations or None]


def stored_rank_probs(acc: np.ndarray) -> tuple[tuple[float, ...], ...]:
    """The rank probabilities a config stores: ``simulations.ppd.rank_probabilities`` of the accumulative top-k
    accuracies [m, k_max], to 6 decimals."""
    from simulations.ppd import rank_probabilities
    return tuple(tuple(round(float(x), 6) for x in row) for row in rank_probabilities(acc))


HEAD_LR_SCALE = 0.1  # the custom head's learning rate relative to the prompt tokens' (and stage 2's for both)


def trainer(student: Student, cfg: PPDTrainConfig) -> Trainer:
    """AdamW with the paper's cosine schedule from ``lr`` (no warm-up). A custom head (Table 5) trains at
    lr·HEAD_LR_SCALE; "2-stage": the head waits for the first half, then both go on at the smaller rate."""
    head = list(student.head.parameters()) if student.head is not None else []
    rest = [p for p in student.parameters() if all(p is not h for h in head)]
    groups = [{"params": rest, "lr": cfg.lr}] + ([{"params": head, "lr": cfg.lr * HEAD_LR_SCALE}] if head else [])
    half = cfg.steps // 2

    def rest_lr(s: int) -> float:
        return warmup_cosine(s, cfg.steps) * (HEAD_LR_SCALE if cfg.head == "2-stage" and s >= half else 1.0)

    def head_lr(s: int) -> float:
        return 0.0 if cfg.head == "2-stage" and s < half else warmup_cosine(s, cfg.steps)
    return Trainer(student, cfg.lr, params=groups, schedule=[rest_lr, head_lr][:len(groups)])


def optimizer(student: Student, cfg: PPDTrainConfig):
    """(optimizer, scheduler) of ``trainer(student, cfg)``."""
    t = trainer(student, cfg)
    return t.optimizer, t.scheduler


def train_ppd(cfg: PPDTrainConfig, out: str | Path, target: LoadedModel | None = None,
              command: list[str] | None = None, progress: bool = True, data: str | Path | None = None,
              device: str | torch.device | None = None) -> dict:
    """The whole recipe (module docstring); ``target`` defaults to the zoo target in fp32 (tests pass a tiny one);
    ``data`` is the data folder (default ``out/data``; runs that share one make it once)."""
    run = begin_run(out, cfg, "specrepro.training.ppd", command)
    out, timer = run.out, run.timer
    data = Path(data) if data is not None else out / "data"

    # 1. Data, as training.data writes it (Medusa's recipe).
    with timer.phase("data"):
        gen = generating_target(target, cfg.target, cfg.gen_dtype, device)
        made = generate_data(gen.model, chat_format(gen), shared_data(cfg), data, task_openings(gen.tokenizer))
        examples = load_data(data, shared_data(cfg))
        train_ids, val_ids = split(len(examples), cfg)
        target = training_target(target, gen, cfg.gen_dtype, device)  # the losses run through the fp32 target
        model = target.model.eval().requires_grad_(False)

    # 2-4. Train the prompt tokens (and EPT weights); resumable from DIR/checkpoint.pt.
    torch.manual_seed(cfg.seed)
    student = Student(cfg, init_embeddings(model, cfg), model).to(model_device(model))
    g = torch.Generator().manual_seed(cfg.seed)
    val_small = [examples[i] for i in val_ids[:4]]

    def conversation_losses(step: int):
        """The batch's conversations one at a time (their gradients accumulate, each weighted 1/batch)."""
        for _ in range(cfg.batch):
            prefix = run_prefix(model, examples[train_ids[int(torch.randint(0, len(train_ids), (), generator=g))]], cfg)
            if prefix.usable.numel() == 0:
                continue
            anchors = prefix.usable[torch.randperm(prefix.usable.numel(), generator=g)[: cfg.anchors]].sort().values
            yield loss_for(student_logits(model, student, prefix, anchors, cfg), prefix, anchors, cfg)

    t = trainer(student, cfg)
    curve = LearningCurve(out / "learning_curve.json", cfg)

    def validate() -> float:
        losses = []
        for ex in val_small:
            p = run_prefix(model, ex, cfg)
            losses.append(float(loss_for(student_logits(model, student, p, p.usable, cfg), p, p.usable, cfg)))
        curve.maybe_measure(t.scheduler.last_epoch, lambda: topk_accuracy(model, student, val, cfg)[0])
        return round(float(np.mean(losses)), 5)

    val = [examples[i] for i in val_ids]
    log = train_loop(t, cfg.steps, conversation_losses, accumulate=cfg.batch, validate=validate,
                     val_every=cfg.val_every, checkpoint=Checkpoint(out / "checkpoint.pt", cfg.to_dict()),
                     generator=g, desc="ppd: prompt tokens", progress=progress)
    student.eval().requires_grad_(False)
    timer.add("train", log.seconds)

    # 5. Held-out top-k accuracies -> rank probabilities for the dynamic sparse tree.
    with timer.phase("eval"):
        acc, n_anchors = topk_accuracy(model, student, val, cfg)
        rank_probs = stored_rank_probs(acc)
        curve.add(cfg.steps, acc)

    # 6. Files. An inference folder holds the averaged-EPT, final-layer recipe the drafter runs.
    trainable = sum(p.numel() for p in student.parameters())
    backbone = sum(p.numel() for p in model.parameters())
    record = run.record(
        machine=machine(),
        data={"tokens_digest": tokens_digest(examples),
              "recipe": "specrepro.training.data.generate_data (Medusa's shards)", "shards": cfg.shards,
              "written_in": cfg.gen_dtype,
              "task_shards": cfg.task_shards, "shards_generated_now": made, "conversations": len(examples),
              "train_conversations": len(train_ids), "val_conversations": len(val_ids), "val_anchors": n_anchors},
        prompt_tokens={"m": cfg.prompt_tokens, "epts": cfg.epts, "trainable_parameters": trainable,
                       "target_parameters": backbone, "trainable_fraction": trainable / backbone},
        train={"losses": [round(x, 5) for x in log.losses], "val_losses": log.vals},
        held_out_topk_accuracy=accuracy_dict(acc),
        learning_curve=curve.points)
    folders = []
    if (cfg.aggregation, cfg.exits, cfg.mask, cfg.prefix, cfg.head) == ("average", 1, "ensemble", False, "none"):
        config = PPDConfig(hidden_size=model.config.hidden_size, prompt_tokens=cfg.prompt_tokens, epts=cfg.epts,
                           target=cfg.target, rank_probs=rank_probs)
        save_prompt_tokens(student.tokens, config, out / "prompt_tokens")
        folders.append(out / "prompt_tokens")
    run.write(record, *folders)
    return record


def remeasure(out: str | Path, data: str | Path | None = None, device: str | torch.device | None = None,
              **recipe) -> dict:
    """Measure the held-out accuracies of a finished run's prompt tokens (``out/prompt_tokens``) again with this
    revision's evaluation, and rewrite their rank probabilities and record; the earlier numbers stay in the
    record under ``held_out_topk_accuracy_before``. ``recipe`` (shards, task_shards) measures them on another data
    recipe's held-out conversations (every 20th of those shards), e.g. a larger run's, for a same-split comparison."""
    out = Path(out)
    folder = out / "prompt_tokens"
    record = json.loads((folder / "training_record.json").read_text())
    cfg = dataclasses.replace(PPDTrainConfig(**record["config"]), **recipe)
    tokens, config = load_prompt_tokens(folder)
    target = load_model(cfg.target, dtype="fp32", device=resolve_device(device))
    model = target.model.eval().requires_grad_(False)
    examples = load_data(Path(data) if data is not None else out / "data", shared_data(cfg))
    _, val_ids = split(len(examples), cfg)
    student = Student(cfg, tokens.embeds.detach().reshape(-1, tokens.embeds.shape[-1])).to(model_device(model))
    acc, n_anchors = topk_accuracy(model, student, [examples[i] for i in val_ids], cfg)
    rank_probs = stored_rank_probs(acc)
    record["held_out_topk_accuracy_before"] = record["held_out_topk_accuracy"]
    record["held_out_topk_accuracy"] = accuracy_dict(acc)
    record["data"]["val_anchors"] = n_anchors
    record["remeasured"] = {"git_revision": git_revision(), "command": ["python", "-m", "specrepro.training.ppd",
                                                                       *sys.argv[1:]],
                            "split": {"shards": cfg.shards, "task_shards": cfg.task_shards,
                                      "val_conversations": len(val_ids)}}
    config = dataclasses.replace(config, rank_probs=rank_probs)
    save_prompt_tokens(tokens, config, folder)
    for path in (folder / "training_record.json", out / "training_record.json"):
        atomic_write_text(path, json.dumps(record, indent=1) + "\n")
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m specrepro.training.ppd", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="run folder (data shards and a checkpoint are reused if present)")
    parser.add_argument("--data", default=None, help="data folder shared between runs (default: OUT/data)")
    parser.add_argument("--remeasure", action="store_true",
                        help="only measure the held-out accuracies of OUT/prompt_tokens again (see remeasure); with "
                             "--shards/--task-shards, on those shards' held-out conversations")
    for f in dataclasses.fields(PPDTrainConfig):
        flag = f"--{f.name.replace('_', '-')}"
        if isinstance(f.default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default)
        else:
            parser.add_argument(flag, type=type(f.default), default=f.default,
                                choices=GEN_DTYPES if f.name == "gen_dtype" else None)
    parser.add_argument("--device", default="auto", help="where the target runs: auto (cuda when available), cpu, "
                                                          "cuda or cuda:N")
    parser.set_defaults(shards=None, task_shards=None)  # with --remeasure: the held-out split of these shards
    args = vars(parser.parse_args(argv))
    out, data, device = args.pop("out"), args.pop("data"), resolve_device(args.pop("device"))
    recipe = {k: args.pop(k) for k in ("shards", "task_shards")}
    if args.pop("remeasure"):
        record = remeasure(out, data, device, **{k: v for k, v in recipe.items() if v is not None})
        print(json.dumps(record["held_out_topk_accuracy"], indent=1))
        return
    recipe = {k: v if v is not None else getattr(PPDTrainConfig, k) for k, v in recipe.items()}
    record = train_ppd(PPDTrainConfig(**args, **recipe), out, data=data, device=device)
    print(json.dumps({"held_out_topk_accuracy": record["held_out_topk_accuracy"],
                      "prompt_tokens": record["prompt_tokens"], "times_s": record["times_s"]}, indent=1))


if __name__ == "__main__":
    from ..core.cli import run_main
    run_main(main, "python -m specrepro.training.ppd")
