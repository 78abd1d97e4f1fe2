"""Folders of self-drafting weights (Medusa heads, PPD prompt tokens): tensors plus a JSON config.

One home for how they are written (each file atomically, so an interrupted save never leaves half a folder
readable as a whole one) and read back (one clear error when the config is missing).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..core.provenance import atomic_write_text


def save_folder(folder: str | Path, tensors: dict[str, torch.Tensor], weights: str, config_name: str,
                config: dict) -> Path:
    """Write ``tensors`` (as fp32) to ``folder/weights`` and ``config`` to ``folder/config_name``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{weights}.tmp"
    save_file({k: v.detach().float().contiguous() for k, v in tensors.items()}, str(tmp))
    os.replace(tmp, folder / weights)
    atomic_write_text(folder / config_name, json.dumps(config, indent=1) + "\n")
    return folder


def read_folder(folder: str | Path, weights: str, config_name: str, what: str) -> tuple[dict, dict]:
    """(config dict with ``rank_probs`` as nested tuples, tensors) of a folder written by ``save_folder``."""
    folder = Path(folder)
    if not (folder / config_name).is_file():
        raise ValueError(f"{folder} holds no {what} ({config_name} is missing)")
    d = json.loads((folder / config_name).read_text())
    d["rank_probs"] = tuple(tuple(r) for r in d.get("rank_probs", ()))
    return d, load_file(str(folder / weights))
