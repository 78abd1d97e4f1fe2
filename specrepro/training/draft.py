"""Distil a small draft q from the target p on text the target writes itself (survey blog, "Draft Model
Distillation"; DistillSpec's divergences).

One command runs the whole recipe and writes a folder that describes itself::

    python -m specrepro.training.draft --out runs/draft --seed 0

1. Data (``DIR/data/shard_*.pt`` and ``task_*.pt``, resumable): conversations the target writes, with its top-k
   rows at every generated position (``training.data``). No prompt of the evaluation suites is ever shown to it.
2. Train: a ``ReducedVocabDraft`` (the target's first layers, head over the N most likely tokens of that
   text) minimises a divergence (``training.losses``) between the coarsened teacher and student distributions,
   in the package's trainer loop (``training.loop``: AdamW, warm-up and cosine decay to 10%, the best validated
   weights kept).
3. Evaluate α at T = 0 and T = 1 (γ = 4) with the verification loop on held-out suite prompts, the draft's
   teacher-forced agreement with the target there, the same agreement on held-out and on training
   conversations of the data (how much the draft memorised), and the cost ratio c of one cached decode step
   (``training.evaluate``).
4. Write ``DIR/config.json``, ``DIR/training_record.json`` and the draft in ``DIR/draft``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from ..core.decoding import eos_ids
from ..engine.draft_model import ReducedVocabDraft, draft_from_target, load_draft_model, save_draft
from ..engine.models import LoadedModel, load_model, resolve_device
from ..core.provenance import atomic_write_text, git_state
from .data import (ChatFormat, DataConfig, DistillBatch, Example, TaskOpenings, chat_format, choose_vocab, collate,
                   generate_data, load_data, task_openings)
from .evaluate import (EVAL_SUITES, data_agreement, evaluate_alpha, held_out_prompts, measure_cost_ratio,
                       teacher_forced_agreement)
from .features import generating_target
from .loop import Trainer, begin_run, train_loop, warmup_cosine
from .losses import DIVERGENCES, batch_loss
from .provenance import machine, tokens_digest


@dataclass(frozen=True)
class DistillConfig(DataConfig):
    """The data recipe (``DataConfig``'s fields first), then the draft, its training and its evaluation."""

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


def train(draft: ReducedVocabDraft, examples: list[Example], cfg: DistillConfig,
          val_batch: DistillBatch | None = None) -> tuple[list[float], list[tuple[int, float]]]:
    """AdamW with linear warm-up and cosine decay to 10%; batches of ``cfg.batch_size`` drawn epoch by epoch by a
    seeded generator.

    With ``val_batch``, the validation loss is measured every ``cfg.val_every`` steps and the draft ends with the
    weights of the best one (the data is small: later epochs can overfit). Returns (train losses, [(step, val)])."""
    trainer = Trainer(draft, cfg.lr, betas=(0.9, 0.95), max_grad_norm=1.0,
                      schedule=lambda s: warmup_cosine(s, cfg.steps, cfg.warmup, floor=0.1))
    gen = torch.Generator().manual_seed(cfg.seed)
    order: list[int] = []

    def loss(step: int) -> torch.Tensor:
        nonlocal order
        if len(order) < cfg.batch_size:  # a new epoch: reshuffle
            order += torch.randperm(len(examples), generator=gen).tolist()
        picked, order = order[: cfg.batch_size], order[cfg.batch_size:]
        draft.train()
        return batch_loss(draft, collate([examples[i] for i in picked], cfg.max_len), cfg.divergence)

    def validate() -> float:
        draft.eval()
        return float(batch_loss(draft, val_batch, cfg.divergence))

    log = train_loop(trainer, cfg.steps, loss, validate=validate if val_batch is not None else None,
                     val_every=cfg.val_every, keep_best=True, desc=f"distill train ({cfg.divergence})")
    draft.eval()
    return log.losses, log.vals


def distill(cfg: DistillConfig, out: str | Path, target: LoadedModel | None = None, chat: ChatFormat | None = None,
            eval_prompts: dict[str, list[list[int]]] | None = None, command: list[str] | None = None,
            openings: TaskOpenings | None = None, device: str | torch.device | None = None) -> dict:
    """Data, training, evaluation, files. ``target``/``chat``/``eval_prompts``/``openings`` default to the zoo
    target, its chat template, the held-out suites and ``training.stems`` in its tokenizer (tests pass a tiny
    model, a made-up framing, id prompts and id openings)."""
    run = begin_run(out, cfg, "specrepro.training.draft", command, provenance={"seed": cfg.seed, "git": git_state()})
    out, timer = run.out, run.timer

    # 1. Data: the target writes conversations; we keep its top-k rows.
    with timer.phase("data"):
        gen = generating_target(target, cfg.target, cfg.gen_dtype, device)
        chat = chat or chat_format(gen)
        if cfg.task_shards and openings is None:
            openings = task_openings(gen.tokenizer)
        made = generate_data(gen.model, chat, cfg, out / "data", openings)
        examples = load_data(out / "data", cfg)

    # 2. Train on all but every 20th conversation (their loss is the validation loss).
    with timer.phase("train"):
        val_ex = examples[::20]  # every 20th conversation, so that each kind of shard is validated
        train_ex = [e for i, e in enumerate(examples) if i % 20]
        always = set(chat.user_prefix) | set(chat.assistant_header) | {chat.end}
        kept = choose_vocab(train_ex, cfg.n_kept, gen.vocab_size, always)
        torch.manual_seed(cfg.seed)
        draft = draft_from_target(gen.model, kept, cfg.n_layers, torch.float32).to(next(gen.model.parameters()).device)
        val_batch = collate(val_ex, cfg.max_len)
        with torch.no_grad():
            val_before = float(batch_loss(draft, val_batch, cfg.divergence))
        losses, vals = train(draft, train_ex, cfg, val_batch)
        with torch.no_grad():
            val_after = float(batch_loss(draft, val_batch, cfg.divergence))
            val_div = {d: float(batch_loss(draft, val_batch, d)) for d in DIVERGENCES}
    tokenizer, vocab_size = gen.tokenizer, gen.vocab_size
    del gen

    # 3. Evaluate the saved (bf16) draft against the target in the engine's default dtype.
    with timer.phase("eval"):
        save_draft(draft, out / "draft", tokenizer=tokenizer, target=cfg.target)
        ev_target = target if target is not None else load_model(cfg.target, device=resolve_device(device))
        ev_draft, _ = load_draft_model(out / "draft", dtype=next(ev_target.model.parameters()).dtype,
                                       device=next(ev_target.model.parameters()).device)
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

    # 4. The record: enough to rerun and to judge the draft.
    record = run.record(
        machine=machine(),
        data={"tokens_digest": tokens_digest(examples),
              "shards": cfg.shards, "task_shards": cfg.task_shards, "shards_generated_now": made,
              "sequences": len(examples), "tokens": int(sum(len(e.tokens) for e in examples)),
              "teacher_rows": int(sum(int(e.has_row.sum()) for e in examples)),
              "train_sequences": len(train_ex), "val_sequences": len(val_ex),
              "held_out": f"suites {', '.join(EVAL_SUITES)} are never shown to the target during data generation"},
        draft={"n_layers": cfg.n_layers, "n_kept": int(kept.numel()), "full_vocab_size": vocab_size,
               "parameters": sum(p.numel() for p in draft.parameters()),
               "size_mb": round((out / "draft" / "model.safetensors").stat().st_size / 2**20, 2)},
        train={"steps": cfg.steps, "divergence": cfg.divergence, "losses": [round(x, 5) for x in losses],
               "val_loss_before": val_before, "val_loss_after": val_after, "val_divergences_after": val_div,
               "val_losses": vals, "kept_step": min(vals, key=lambda v: v[1])[0] if vals else cfg.steps},
        alpha={f"T={a['temperature']:g}": a for a in alpha}, agreement=agreement, agreement_on_data=on_data,
        cost=cost)
    run.write(record, out / "draft", indent=2)
    atomic_write_text(out / "draft" / "distill_config.json",
                      json.dumps({"command": run.command, **cfg.to_dict()}, indent=2, default=str))
    return record


def main(argv: list[str] | None = None, prog: str = "python -m specrepro.training.draft") -> None:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="run folder (data shards are reused if present)")
    for f in dataclasses.fields(DistillConfig):
        kw = {"choices": sorted(DIVERGENCES)} if f.name == "divergence" else {}
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default, **kw)
    parser.add_argument("--device", default="auto", help="where the target runs: auto (cuda when available), cpu, "
                                                          "cuda or cuda:N")
    args = vars(parser.parse_args(argv))
    out, device = args.pop("out"), resolve_device(args.pop("device"))
    record = distill(DistillConfig(**args), out, device=device)
    summary = {k: record["alpha"][k]["alpha"] for k in record["alpha"]}
    print(json.dumps({"alpha": summary, "c": record["cost"]["c"], "steps": record["train"]["steps"],
                      "teacher_rows": record["data"]["teacher_rows"], "times_s": record["times_s"]}, indent=2))


if __name__ == "__main__":
    from ..core.cli import run_main
    run_main(main, "python -m specrepro.training.draft")
