"""Where the repository's committed results are read from: its ``figures/`` folder (the hand-run benches under
``figures/bench/<name>/``, each a ``summary.csv`` beside its config and provenance).

One function decides it, so that nothing in the package finds ``figures/`` through its own file's location: the
folder given, else ``$SPECREPRO_FIGURES`` (another checkout's figures, or a copy), else ``figures/`` at the root of
the checkout the package runs from (``core.provenance.ROOT``, the one place the checkout's root is located).
"""
from __future__ import annotations

import os
from pathlib import Path

from ..core.provenance import ROOT


def figures_dir(folder: str | Path | None = None) -> Path:
    """The committed figures' folder: ``folder``, else ``$SPECREPRO_FIGURES``, else ``<checkout root>/figures``."""
    if folder is not None:
        return Path(folder)
    return Path(os.environ.get("SPECREPRO_FIGURES") or ROOT / "figures")


def bench_dir(figures: str | Path | None = None) -> Path:
    """The committed benches' folder, ``bench/`` of :func:`figures_dir`."""
    return figures_dir(figures) / "bench"
