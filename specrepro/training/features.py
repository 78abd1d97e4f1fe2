"""The frozen target's features over the training conversations, computed once per data folder and shared by every
trainer that reads them (the EAGLE draft reads ``feature_layers`` concatenated, the Medusa heads the final-norm state)."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from ..engine.models import LoadedModel, load_model, resolve_device
from .data import Example


@dataclass
class Features:
    """One conversation's target features: f [L, F] (bf16) and the LM head's log-normaliser lse [L]."""

    f: torch.Tensor
    lse: torch.Tensor


def generating_target(target: LoadedModel | None, name: str, gen_dtype: str, device) -> LoadedModel:
    """The target that writes a trainer's data and gives its features: the one handed in, else ``name`` loaded at
    ``gen_dtype`` (bf16 writes the data as the engine decodes it, and faster)."""
    return target if target is not None else load_model(name, dtype=gen_dtype, device=resolve_device(device))


def training_target(target: LoadedModel | None, gen: LoadedModel, gen_dtype: str, device) -> LoadedModel:
    """The target a trainer computes its losses through, in fp32: the one handed in, else the generating one where
    that is fp32, else the same model loaded again in fp32."""
    if target is not None:
        return target
    return gen if gen_dtype == "fp32" else load_model(gen.name, dtype="fp32", device=resolve_device(device))


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
