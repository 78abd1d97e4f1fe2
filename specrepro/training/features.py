"""The frozen target's features over the training conversations, computed once per data folder and shared by every
trainer that reads them (the EAGLE draft reads ``feature_layers`` concatenated, the Medusa heads the final-norm state)."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from .data import Example


@dataclass
class Features:
    """One conversation's target features: f [L, F] (bf16) and the LM head's log-normaliser lse [L]."""

    f: torch.Tensor
    lse: torch.Tensor


def target_features(model: torch.nn.Module, examples: list[Example], layers: tuple[int, ...], max_len: int
                    ) -> list[Features]:
    """Each conversation's ``hidden_states[layers]`` concatenated (its first ``max_len`` positions; index −1 is the
    final-norm state) and the log-normaliser of the LM head there, on the CPU whatever device ``model`` is on."""
    lm_head = model.get_output_embeddings()
    out, device = [], lm_head.weight.device
    with torch.inference_mode():
        for ex in tqdm(examples, desc="target features", file=sys.stderr):
            states = model.model(input_ids=ex.tokens[:max_len][None].to(device), output_hidden_states=True).hidden_states
            last = states[-1][0]  # [L, H] the final-norm state (transformers 5: hidden_states[-1] is after the norm)
            f = torch.cat([states[i][0] for i in layers], dim=-1)  # [L, F]
            out.append(Features(f.to(torch.bfloat16).cpu(), lm_head(last).float().logsumexp(-1).cpu()))  # kept on the CPU
    return out


def cached_features(model: torch.nn.Module, examples: list[Example], layers: tuple[int, ...], max_len: int,
                    data: Path) -> list[Features]:
    """``target_features``, kept in the data folder (``features_<layers>_<max_len>.pt``, written atomically) so that
    every variant trained on the same data computes them once."""
    path = data / f"features_{'_'.join(map(str, layers))}_{max_len}.pt"
    if path.is_file():
        saved = torch.load(path, map_location="cpu")  # features are kept on the CPU, whoever wrote them
        if saved["conversations"] == len(examples):
            return [Features(f, lse) for f, lse in zip(saved["f"], saved["lse"])]
    feats = target_features(model, examples, layers, max_len)
    tmp = path.with_suffix(".tmp")
    torch.save({"conversations": len(examples), "f": [x.f for x in feats], "lse": [x.lse for x in feats]}, tmp)
    tmp.replace(path)
    return feats
