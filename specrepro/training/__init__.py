"""Training on the frozen target: Medusa heads (``medusa``), PPD prompt tokens (``ppd``) and their ablations.

``begin_run`` is what every trainer does first: a run folder that says which command and settings made it.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from ..provenance import atomic_write_text, git_revision


def begin_run(out: str | Path, cfg, module: str, command: list[str] | None = None) -> tuple[Path, list[str], str]:
    """Create ``out``, set the torch threads to ``cfg.threads`` and write ``out/config.json`` (the command, by
    default this process's ``python -m module ...``, and ``cfg``). Returns (out, command, git revision)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(cfg.threads)
    command = command if command is not None else [sys.executable, "-m", module, *sys.argv[1:]]
    atomic_write_text(out / "config.json", json.dumps({"command": command, **cfg.to_dict()}, indent=1) + "\n")
    return out, command, git_revision()
