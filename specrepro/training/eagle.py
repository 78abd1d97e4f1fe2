"""Train an EAGLE draft (``drafters.eagle``) on the frozen target's features, on text the target writes itself.

    python -m specrepro.training.eagle --out runs/eagle-v1 --seed 0

1. Data (``DIR/data``, resumable): the conversations the Medusa heads and the PPD prompt tokens train on
   (``training.medusa.data_config``: free and task-style shards of ``training.data``; no suite prompt is shown).
2. The frozen target runs once over every conversation; its features (the ``feature_layers`` of ``hidden_states``
   concatenated, bf16) and the log-normaliser of its LM head at every position are kept in memory.
3. The draft vocabulary: the ``draft_vocab`` ids with the most teacher mass in the data, plus the chat template's
   ids (``training.data.choose_vocab``); 0 keeps the full vocabulary.
4. The draft learns, at every position j of a training conversation, the target's next feature f_j from the pair
   (f_{j−1}, x_j): the EAGLE loss, SmoothL1(f̂_j, f_j) + ``token_weight`` × the cross-entropy of the draft's head
   on f̂_j against the target's distribution p(x_{j+1}) (its full-vocabulary softmax, restricted to the draft
   vocabulary). With ``ttt`` > 0 (EAGLE-3's training-time test) the draft is unrolled ``ttt`` more times: pass t
   reads its own f̂ of pass t−1 in place of the target's feature and attends exactly what a depth-(t+1) tree node
   attends at decode time (``unroll``); each pass adds its loss. Every 20th conversation is held out.
5. On the held-out conversations: for each depth d = 1..``depth`` the rank of the target's argmax among the draft's
   guesses, over the positions whose d−1 tokens before it are the target's argmax too (the path is right), read
   out through the draft's head and through the full LM head: the acceptance by draft position (top-1) and the
   rank probabilities the static tree and the hardware-aware tree size are built from.
6. ``DIR/draft`` gets the draft (``eagle.safetensors``, ``eagle_config.json``) and ``training_record.json``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..drafters.eagle import EagleConfig, EagleDraft, save_draft
from ..engine.models import LoadedModel, resolve_device
from .data import Example, chat_format, choose_vocab, generate_data, load_data, task_openings
from .features import Features, cached_features, generating_target, training_target
from .loop import Trainer, begin_run, train_loop, warmup_cosine
from .medusa import GEN_DTYPES, MedusaTrainConfig, data_config
from .provenance import machine, tokens_digest

FEATURES = ("last", "fused")  # the final-norm state alone, or low/mid/high layers with it (EAGLE-3)


@dataclass(frozen=True)
class EagleTrainConfig:
    target: str = "smollm2-135m-instruct"
    seed: int = 0
    features: str = "last"  # one of FEATURES
    draft_vocab: int = 8192  # rows of the reduced head (0: the full vocabulary)
    ttt: int = 0  # training-time test: unrolled passes on the draft's own features after the first (EAGLE-3)
    token_weight: float = 0.1  # weight of the token cross-entropy beside the feature regression (EAGLE: 0.1)
    shards: int = 4  # the Medusa heads' data recipe (training.medusa.data_config)
    task_shards: int = 4
    gen_batch: int = 64
    # the target that writes the data and gives the features: fp32 (the shipped draft's recipe) or, where the CPU has
    # bf16 units, bf16 on the engine's kernels (about 1.5x faster to write; the features the draft reads at decoding
    # time with --dtype auto are bf16 ones); the draft itself always trains in fp32 on the fp32 target
    gen_dtype: str = "fp32"
    max_len: int = 320  # positions per conversation kept
    window: int = 128  # positions of one training example: a random window of a conversation
    steps: int = 600
    batch: int = 8  # windows per step
    lr: float = 1e-3
    warmup: int = 20
    depth: int = 5  # deepest draft position measured on held-out data
    k_max: int = 10  # ranks measured per depth
    top_k: int = 4  # the dynamic tree's children per node, saved with the draft
    threads: int = 2

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def feature_layers(self, n_layers: int) -> tuple[int, ...]:
        """hidden_states indices: (-1,), or a low and a middle layer's output with the final-norm state."""
        if self.features not in FEATURES:
            raise ValueError(f"features must be one of {', '.join(FEATURES)}, got {self.features!r}")
        return (-1,) if self.features == "last" else (max(1, n_layers // 4), max(1, n_layers // 2), -1)


def unroll_masks(n: int, passes: int) -> list[torch.Tensor]:
    """allowed [n, (t+1)·n] for each pass t = 0..passes−1 over n positions (keys: pass 0's n, then pass 1's, …).

    Pass t at row i plays the depth-(t+1) tree node at position i: it sees the pairs of the real features up to
    row i − t (the committed context), the pass-s node at row i − t + s for s = 1..t−1 (its ancestors), and
    itself."""
    rows = torch.arange(n)
    masks = []
    for t in range(passes):
        allowed = torch.zeros(n, (t + 1) * n, dtype=torch.bool)
        allowed[:, :n] = rows[None, :] <= rows[:, None] - t  # pass 0: positions <= i − t
        for s in range(1, t + 1):
            col = rows - t + s  # pass s's row i − t + s (s = t: itself)
            ok = col >= 0
            allowed[rows[ok], s * n + col[ok]] = True
        masks.append(allowed)
    return masks


def unroll(draft: EagleDraft, feats: torch.Tensor, tokens: torch.Tensor, passes: int) -> list[torch.Tensor]:
    """The draft over one conversation's pairs (feats [n, F] the target's f_{j−1}, tokens [n] x_j, j = 1..n),
    ``passes`` times; pass t > 0 reads pass t−1's f̂ of the row before. -> f̂ [n, H] per pass (pass t's rows
    i < t have no committed context and are not used)."""
    n = tokens.numel()
    positions = torch.arange(1, n + 1, device=feats.device)[None]
    inputs, past, outs = draft.reduce(feats)[None], None, []
    for t, allowed in enumerate(unroll_masks(n, passes)):
        out, kv = draft(inputs, tokens[None], positions, allowed.to(feats.device), past)
        outs.append(out[0])
        past = kv
        inputs = torch.cat([out[:, :1] * 0, out[:, :-1]], dim=1)  # row i reads f̂ of row i − 1
    return outs


def sequence_loss(draft: EagleDraft, lm_head: torch.nn.Module, ex: Example, feat: Features, passes: int,
                  token_weight: float, start: int = 0, window: int | None = None) -> torch.Tensor:
    """The EAGLE loss of one conversation (its positions start..start+window), summed over the unrolled passes
    (mean over rows). RoPE is relative, so a window is a conversation of its own to the draft."""
    end = feat.f.shape[0] if window is None else min(feat.f.shape[0], start + window)
    device = draft.fc.weight.device  # features and tokens are kept on the CPU; the draft may be on a GPU
    tokens = ex.tokens[start + 1:end].to(device)  # [n] the window's x_1.., n = end − start − 1
    f = feat.f[start:end].float().to(device)
    feat = Features(f, feat.lse[start:end].to(device))
    target = f[1:, -draft.fc.out_features:]  # [n, H] f_1..f_{L−1}, the final-norm state
    weight = draft.head_weight()  # [V_d, H], frozen
    with torch.no_grad():
        p = (target @ weight.T - feat.lse[1:, None]).exp()  # [n, V_d] the target's p(x_{j+1}) on the draft vocab
    total = torch.zeros(())
    for t, out in enumerate(unroll(draft, f[:-1], tokens, passes)):
        out, tgt, pt = out[t:], target[t:], p[t:]
        reg = torch.nn.functional.smooth_l1_loss(out, tgt)
        tok = -(pt * (out @ weight.T).log_softmax(-1)).sum(-1).mean()
        total = total + reg + token_weight * tok
    return total


def held_out_ranks(draft: EagleDraft, lm_head: torch.nn.Module, examples: list[Example], feats: list[Features],
                   depth: int, k_max: int, full_head: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(acc [depth, k_max], counts [depth]): acc[d, i] = P(the target's argmax at depth d+1 is among the draft's
    top i+1 | the d tokens before it are the target's argmax), ``full_head``: through the full LM head."""
    hits, counts = np.zeros((depth, k_max)), np.zeros(depth)
    device = draft.fc.weight.device  # the draft runs there; the ranks are counted on the CPU
    head = lm_head.weight.detach().cpu()
    weight = head if full_head else draft.head_weight().detach().cpu()
    ids = torch.arange(weight.shape[0]) if full_head or not draft.vocab.numel() else draft.vocab.cpu()
    with torch.inference_mode():
        for ex, feat in zip(examples, feats):
            L = feat.f.shape[0]
            f = feat.f.float()
            argmax = (f[:, -draft.fc.out_features:] @ head.T).argmax(-1)  # [L] argmax after position j
            right = (ex.tokens[1:L] == argmax[:-1])  # [L−1] x_{j+1} is the argmax
            outs = [o.cpu() for o in unroll(draft, f[:-1].to(device), ex.tokens[1:L].to(device), depth)]
            # pass t row i: node at depth t+1, position i+1
            for t, out in enumerate(outs):
                rows = torch.arange(t, L - 1)  # row i predicts the token at position i + 2
                ok = torch.ones(rows.numel(), dtype=torch.bool)
                for s in range(1, t + 1):  # the t tokens before it (positions i+2−s) are the argmax
                    ok &= right[rows + 1 - s]
                rows = rows[ok]
                if not rows.numel():
                    continue
                logits = out[rows] @ weight.T  # [r, V_d]
                truth = argmax[rows + 1]  # [r] the argmax after position i + 1
                where = (ids[None, :] == truth[:, None])  # [r, V_d]
                inside = where.any(-1)
                truth_logit = (logits * where).sum(-1)
                rank = (logits > truth_logit[:, None]).sum(-1)
                rank[~inside] = k_max  # not in the draft vocabulary: never proposed
                for r in rank.tolist():
                    if r < k_max:
                        hits[t, r:] += 1
                counts[t] += rows.numel()
    return hits / np.maximum(counts, 1)[:, None], counts


def train_eagle(cfg: EagleTrainConfig, out: str | Path, target: LoadedModel | None = None,
                command: list[str] | None = None, data: str | Path | None = None,
                device: str | torch.device | None = None) -> dict:
    """The whole recipe (module docstring); ``target`` defaults to the zoo target in fp32 (tests pass a tiny one);
    ``data`` is the data folder (default ``out/data``), shared by the variants of an ablation."""
    run = begin_run(out, cfg, "specrepro.training.eagle", command)
    out, timer = run.out, run.timer
    data = Path(data) if data is not None else out / "data"

    # 1. Data: the Medusa heads' recipe.
    with timer.phase("data"):
        gen = generating_target(target, cfg.target, cfg.gen_dtype, device)
        dcfg = data_config(MedusaTrainConfig(target=cfg.target, seed=cfg.seed, shards=cfg.shards,
                                             task_shards=cfg.task_shards, gen_batch=cfg.gen_batch))
        chat = chat_format(gen)
        made = generate_data(gen.model, chat, dcfg, data, task_openings(gen.tokenizer))
        examples = load_data(data, dcfg)

    # 2. The target's features, once.
    layers = cfg.feature_layers(gen.model.config.num_hidden_layers)
    with timer.phase("features"):
        feats = cached_features(gen.model, examples, layers, cfg.max_len, data)
        target = training_target(target, gen, cfg.gen_dtype, device)
    model = target.model
    val = [i for i in range(len(examples)) if i % 20 == 0]
    train = [i for i in range(len(examples)) if i % 20]

    # 3. The draft vocabulary.
    vocab_size = model.config.vocab_size
    always = {chat.end, *chat.user_prefix, *chat.assistant_header, *chat.user_header}
    vocab = (choose_vocab([examples[i] for i in train], cfg.draft_vocab, vocab_size, always)
             if cfg.draft_vocab else None)

    # 4. Train.
    with timer.phase("train"):
        torch.manual_seed(cfg.seed)
        lm_head = model.get_output_embeddings()
        config = EagleConfig(hidden_size=model.config.hidden_size, feature_layers=layers,
                             draft_vocab=0 if vocab is None else vocab.numel(), depth=cfg.depth, top_k=cfg.top_k,
                             target=cfg.target)
        draft = EagleDraft(model, config).float()
        if vocab is not None:
            draft.vocab.copy_(vocab)
        draft.requires_grad_(True).train()  # (the layer and norm were copied from the frozen target)
        trainer = Trainer(draft, cfg.lr, schedule=lambda s: warmup_cosine(s, cfg.steps, cfg.warmup))
        g = torch.Generator().manual_seed(cfg.seed)
        passes = 1 + cfg.ttt

        def loss(step: int) -> torch.Tensor:
            total = torch.zeros(())
            for i in torch.randint(0, len(train), (cfg.batch,), generator=g).tolist():
                c = train[i]
                room = max(1, feats[c].f.shape[0] - cfg.window + 1)
                start = int(torch.randint(0, room, (1,), generator=g))
                total = total + sequence_loss(draft, lm_head, examples[c], feats[c], passes, cfg.token_weight,
                                              start, cfg.window)
            return total / cfg.batch

        def validate() -> float:
            return float(sum(sequence_loss(draft, lm_head, examples[i], feats[i], passes, cfg.token_weight)
                             for i in val[:8]) / min(8, len(val)))

        log = train_loop(trainer, cfg.steps, loss, val_every=100, validate=validate, desc="eagle: draft")
        draft.eval().requires_grad_(False)

    # 5. Held-out ranks by depth, through the draft's head and the full LM head.
    with timer.phase("eval"):
        vals = [examples[i] for i in val]
        vfeats = [feats[i] for i in val]
        acc, counts = held_out_ranks(draft, lm_head, vals, vfeats, cfg.depth, cfg.k_max)
        acc_full, _ = held_out_ranks(draft, lm_head, vals, vfeats, cfg.depth, cfg.k_max, full_head=True)
        rank_probs = np.diff(acc, axis=1, prepend=0.0).clip(min=0.0)

    # 6. Files.
    config = dataclasses.replace(config, rank_probs=tuple(tuple(round(float(x), 6) for x in row)
                                                          for row in rank_probs))
    save_draft(draft, config, out / "draft")
    trainable = sum(p.numel() for p in draft.parameters())
    backbone = sum(p.numel() for p in model.parameters())
    covered = (float(sum(torch.isin(examples[i].tokens, vocab).float().mean() for i in val) / len(val))
               if vocab is not None else 1.0)
    record = run.record(
        machine=machine(),
        data={"tokens_digest": tokens_digest(examples),
              "recipe": "specrepro.training.medusa.data_config", "shards": cfg.shards, "task_shards": cfg.task_shards,
              "shards_generated_now": made, "conversations": len(examples), "train_conversations": len(train),
              "val_conversations": len(val)},
        draft={"feature_layers": list(layers), "draft_vocab": config.draft_vocab,
               "held_out_tokens_in_draft_vocab": round(covered, 4), "trainable_parameters": trainable,
               "target_parameters": backbone, "trainable_fraction": trainable / backbone},
        train={"losses": [round(x, 5) for x in log.losses], "val_losses": log.vals, "seconds": round(log.seconds, 1)},
        held_out={"positions_by_depth": counts.astype(int).tolist(),
                  "accept_by_position": [round(float(a), 4) for a in acc[:, 0]],
                  "accept_by_position_full_head": [round(float(a), 4) for a in acc_full[:, 0]],
                  "topk_accuracy": {f"depth_{d + 1}": [round(float(x), 4) for x in acc[d]] for d in range(cfg.depth)},
                  "topk_accuracy_full_head": {f"depth_{d + 1}": [round(float(x), 4) for x in acc_full[d]]
                                              for d in range(cfg.depth)}})
    run.write(record, out / "draft")
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m specrepro.training.eagle", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="run folder (data shards are reused if present)")
    parser.add_argument("--data", default=None, help="data folder (default OUT/data): variants can share one")
    for f in dataclasses.fields(EagleTrainConfig):
        choices = {"features": FEATURES, "gen_dtype": GEN_DTYPES}.get(f.name)
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default, choices=choices)
    parser.add_argument("--device", default="auto", help="where the target runs: auto (cuda when available), cpu, "
                                                          "cuda or cuda:N")
    args = vars(parser.parse_args(argv))
    out, data, device = args.pop("out"), args.pop("data"), resolve_device(args.pop("device"))
    record = train_eagle(EagleTrainConfig(**args), out, data=data, device=device)
    print(json.dumps({"held_out": {k: v for k, v in record["held_out"].items() if "accept" in k},
                      "draft": record["draft"], "times_s": record["times_s"]}, indent=1))


if __name__ == "__main__":
    from ..core.cli import run_main
    run_main(main, "python -m specrepro.training.eagle")
