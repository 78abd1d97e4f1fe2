"""Train Medusa heads on the frozen target (Cai et al. 2024, Medusa-1), on text the target writes itself.

    python -m specrepro.training.medusa --out runs/medusa --seed 0

1. Data (``DIR/data``, resumable): conversations written by the target with its top-k rows at every generated
   position, exactly as ``training.data`` makes them for the draft (free and task-style shards; no suite prompt is shown).
2. The frozen backbone runs once over every conversation; its final hidden states are kept in memory and cached in
   the data folder (``training.features``, shared with the EAGLE draft; the heads are all that trains, so this makes
   CPU training cheap). ``--gen-dtype bf16`` writes the data and the states on the engine's bf16 kernels.
3. Head k (1-based) at position t learns the teacher's distribution of the token k+1 positions ahead (its top-k
   row, renormalised; the base LM head already gives the next one): −Σ_j p_j log q_k(id_j), through the target's
   frozen LM head, in the package's trainer loop (``training.loop``). Every 20th conversation is held out.
4. On the held-out conversations: each head's top-1..top-k_max accuracy against the teacher's argmax, which
   gives the rank probabilities the sparse tree is built from (``drafters.medusa.sparse_tree``).
5. ``DIR/heads`` gets the heads, their config (with the rank probabilities) and ``training_record.json``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..drafters.medusa import MedusaConfig, MedusaHeads, save_heads
from ..engine.models import LoadedModel, resolve_device
from .data import DataConfig, Example, chat_format, generate_data, load_data, task_openings
from .features import cached_features, generating_target, training_target
from .loop import Trainer, begin_run, train_loop, warmup_cosine
from .provenance import machine, tokens_digest


GEN_DTYPES = ("fp32", "bf16")  # the target that writes the data and gives the hidden states


@dataclass(frozen=True)
class MedusaTrainConfig:
    target: str = "smollm2-135m-instruct"
    seed: int = 0
    num_heads: int = 3  # K
    shards: int = 4  # free target-written conversation shards (training.data, 64 conversations each)
    task_shards: int = 4  # task-style shards on top
    gen_batch: int = 64  # conversations per shard
    max_len: int = 320  # positions per conversation kept
    steps: int = 2000
    batch_positions: int = 256  # hidden states per step
    lr: float = 2e-3
    warmup: int = 20
    k_max: int = 10  # top-k accuracies measured on held-out data (the tree's ranks)
    # the target that writes the data and gives the hidden states: fp32, or bf16 on the engine's kernels (the states
    # the heads read at decoding time with --dtype auto); the heads train on the fp32 target's LM head either way
    gen_dtype: str = "fp32"
    threads: int = 2

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def data_config(cfg: MedusaTrainConfig) -> DataConfig:
    """The distillation data recipe, reused: same generator, fewer shards."""
    return DataConfig(target=cfg.target, seed=cfg.seed, shards=cfg.shards, task_shards=cfg.task_shards,
                         gen_batch=cfg.gen_batch)


def ahead(k: int) -> int:
    """Head k (0-based) at hidden position t predicts token t + ahead(k): the base LM head gives t+1, the
    first Medusa head t+2 (``drafters.medusa``: depth-1 nodes follow the token the target itself emits)."""
    return k + 2


@dataclass
class Positions:
    """Every (conversation, position, head) whose target row exists: head k at t learns row t + ahead(k)."""

    conv: torch.Tensor  # [P]
    pos: torch.Tensor  # [P]
    head: torch.Tensor  # [P]


def positions(examples: list[Example], num_heads: int, max_len: int) -> Positions:
    conv, pos, head = [], [], []
    for c, ex in enumerate(examples):
        rows = ex.has_row[:max_len]
        length = rows.numel()
        for k in range(num_heads):
            target = torch.arange(ahead(k), length)  # token index t + ahead(k) for t = 0..length−1−ahead(k)
            ok = rows[target].nonzero().flatten()
            conv.append(torch.full((ok.numel(),), c))
            pos.append(target[ok] - ahead(k))
            head.append(torch.full((ok.numel(),), k))
    return Positions(torch.cat(conv), torch.cat(pos), torch.cat(head))


def one_head_logits(heads: MedusaHeads, lm_head: torch.nn.Module, hidden: torch.Tensor,
                    head: torch.Tensor) -> torch.Tensor:
    """Logits [B, V] of head ``head[b]`` at ``hidden[b]`` (hidden [B, H], head [B]): each head runs only on its
    own rows, so a batch costs one LM-head product per row, not K."""
    out = hidden.new_empty(hidden.shape[0], lm_head.weight.shape[0])  # [B, V]
    for k, block in enumerate(heads.blocks):
        rows = (head == k).nonzero().flatten()
        if rows.numel():
            h = hidden[rows]  # [b_k, H]
            out[rows] = lm_head(h + torch.nn.functional.silu(block(h)))
    return out


def batch_loss(heads: MedusaHeads, lm_head: torch.nn.Module, hidden: list[torch.Tensor], examples: list[Example],
               idx: Positions, num_heads: int) -> torch.Tensor:
    """Mean of −Σ_j p_j log q_k(id_j) over the batch, p the teacher's renormalised top-k row at t + ahead(k)."""
    device = lm_head.weight.device
    h = torch.stack([hidden[c][t] for c, t in zip(idx.conv.tolist(), idx.pos.tolist())]).float().to(device)  # [B, H]
    logq = one_head_logits(heads, lm_head, h, idx.head.to(device)).log_softmax(-1)  # [B, V]
    rows = [(examples[c].top_ids[t + ahead(k)], examples[c].top_probs[t + ahead(k)])
            for c, t, k in zip(idx.conv.tolist(), idx.pos.tolist(), idx.head.tolist())]
    ids = torch.stack([r[0] for r in rows]).to(device)  # [B, K_teacher]
    p = torch.stack([r[1] for r in rows]).to(device)  # [B, K_teacher]
    p = p / p.sum(-1, keepdim=True)
    return -(p * logq.gather(-1, ids)).sum(-1).mean()


def topk_accuracy(heads: MedusaHeads, lm_head: torch.nn.Module, hidden: list[torch.Tensor], examples: list[Example],
                  idx: Positions, num_heads: int, k_max: int, chunk: int = 512) -> np.ndarray:
    """acc [K, k_max]: fraction of held-out positions where the teacher's argmax at t + ahead(k) is in head k's
    top-i."""
    hits = np.zeros((num_heads, k_max))
    counts = np.zeros(num_heads)
    with torch.inference_mode():
        for s in range(0, idx.conv.numel(), chunk):
            part = Positions(idx.conv[s:s + chunk], idx.pos[s:s + chunk], idx.head[s:s + chunk])
            h = torch.stack([hidden[c][t] for c, t in zip(part.conv.tolist(), part.pos.tolist())]).float()
            logits = one_head_logits(heads, lm_head, h.to(lm_head.weight.device),
                                     part.head.to(lm_head.weight.device)).cpu()  # [B, V]
            for b, (c, t, k) in enumerate(zip(part.conv.tolist(), part.pos.tolist(), part.head.tolist())):
                truth = int(examples[c].top_ids[t + ahead(k), 0])
                rank = int((logits[b] > logits[b, truth]).sum())  # 0 = top-1
                if rank < k_max:
                    hits[k, rank:] += 1
                counts[k] += 1
    return hits / np.maximum(counts, 1)[:, None]


def train_medusa(cfg: MedusaTrainConfig, out: str | Path, target: LoadedModel | None = None,
                 command: list[str] | None = None, data: str | Path | None = None,
                 device: str | torch.device | None = None) -> dict:
    """The whole recipe (module docstring); ``target`` defaults to the zoo target in fp32 on ``device`` (None:
    cuda when available); tests pass a tiny one. The heads train on the target's device. ``data`` is the data
    folder (default ``out/data``): the EAGLE draft's, with its cached final-norm states, serves as it is."""
    run = begin_run(out, cfg, "specrepro.training.medusa", command)
    out, timer = run.out, run.timer
    data = Path(data) if data is not None else out / "data"

    # 1. Data, as training.data writes it.
    with timer.phase("data"):
        gen = generating_target(target, cfg.target, cfg.gen_dtype, device)
        dcfg = data_config(cfg)
        made = generate_data(gen.model, chat_format(gen), dcfg, data, task_openings(gen.tokenizer))
        examples = load_data(data, dcfg)

    # 2. Backbone hidden states (the final-norm state), once per data folder.
    with timer.phase("hidden"):
        hidden = [x.f for x in cached_features(gen.model, examples, (-1,), cfg.max_len, data)]
        target = training_target(target, gen, cfg.gen_dtype, device)
    val_ids = [i for i in range(len(examples)) if i % 20 == 0]
    train_ids = [i for i in range(len(examples)) if i % 20]
    all_pos = positions(examples, cfg.num_heads, cfg.max_len)
    is_val = torch.tensor([i % 20 == 0 for i in range(len(examples))])[all_pos.conv]
    train_pos = Positions(*(t[~is_val] for t in (all_pos.conv, all_pos.pos, all_pos.head)))
    val_pos = Positions(*(t[is_val] for t in (all_pos.conv, all_pos.pos, all_pos.head)))

    # 3. Train the heads; the backbone and its LM head stay frozen.
    with timer.phase("train"):
        torch.manual_seed(cfg.seed)
        lm_head = target.model.get_output_embeddings()
        lm_head.requires_grad_(False)
        hsize = target.model.config.hidden_size
        heads = MedusaHeads(hsize, cfg.num_heads).float().to(lm_head.weight.device).train()
        trainer = Trainer(heads, cfg.lr, schedule=lambda s: warmup_cosine(s, cfg.steps, cfg.warmup))
        g = torch.Generator().manual_seed(cfg.seed)
        val_sample = torch.randperm(val_pos.conv.numel(), generator=g)[:2048]
        val_small = Positions(val_pos.conv[val_sample], val_pos.pos[val_sample], val_pos.head[val_sample])

        def loss(step: int) -> torch.Tensor:
            pick = torch.randint(0, train_pos.conv.numel(), (cfg.batch_positions,), generator=g)
            batch = Positions(train_pos.conv[pick], train_pos.pos[pick], train_pos.head[pick])
            return batch_loss(heads, lm_head, hidden, examples, batch, cfg.num_heads)

        log = train_loop(trainer, cfg.steps, loss, val_every=100, desc="medusa: heads",
                         validate=lambda: float(batch_loss(heads, lm_head, hidden, examples, val_small, cfg.num_heads)))
        heads.eval().requires_grad_(False)

    # 4. Held-out top-k accuracies -> rank probabilities for the sparse tree.
    with timer.phase("eval"):
        acc = topk_accuracy(heads, lm_head, hidden, examples, val_pos, cfg.num_heads, cfg.k_max)
        rank_probs = np.diff(acc, axis=1, prepend=0.0).clip(min=0.0)

    # 5. Files.
    config = MedusaConfig(hidden_size=hsize, num_heads=cfg.num_heads, target=cfg.target,
                          rank_probs=tuple(tuple(round(float(x), 6) for x in row) for row in rank_probs))
    save_heads(heads, config, out / "heads")
    trainable = sum(p.numel() for p in heads.parameters())
    backbone = sum(p.numel() for p in target.model.parameters())
    record = run.record(
        machine=machine(),
        data={"tokens_digest": tokens_digest(examples),
              "recipe": "specrepro.training.data.generate_data", "folder": str(data), "shards": cfg.shards,
              "task_shards": cfg.task_shards,
              "shards_generated_now": made, "conversations": len(examples), "train_conversations": len(train_ids),
              "val_conversations": len(val_ids), "train_positions": int(train_pos.conv.numel()),
              "val_positions": int(val_pos.conv.numel())},
        heads={"num_heads": cfg.num_heads, "trainable_parameters": trainable, "target_parameters": backbone,
               "trainable_fraction": trainable / backbone},
        train={"losses": [round(x, 5) for x in log.losses], "val_losses": log.vals},
        held_out_topk_accuracy={f"head_{k + 1}": [round(float(x), 4) for x in acc[k]] for k in range(cfg.num_heads)})
    run.write(record, out / "heads")
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m specrepro.training.medusa", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="run folder (data shards are reused if present)")
    parser.add_argument("--data", default=None, help="data folder (default OUT/data): the EAGLE draft's can serve")
    for f in dataclasses.fields(MedusaTrainConfig):
        choices = GEN_DTYPES if f.name == "gen_dtype" else None
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default, choices=choices)
    parser.add_argument("--device", default="auto", help="where the target runs: auto (cuda when available), cpu, "
                                                          "cuda or cuda:N")
    args = vars(parser.parse_args(argv))
    out, data, device = args.pop("out"), args.pop("data"), resolve_device(args.pop("device"))
    record = train_medusa(MedusaTrainConfig(**args), out, data=data, device=device)
    print(json.dumps({"held_out_topk_accuracy": record["held_out_topk_accuracy"], "heads": record["heads"],
                      "times_s": record["times_s"]}, indent=1))


if __name__ == "__main__":
    from ..core.cli import run_main
    run_main(main, "python -m specrepro.training.medusa")
