"""Where the package keeps what outlives a process, outside the repository: ``$SPECREPRO_CACHE``.

The lowest layer's half of ``specrepro.run.cache``: the engine and model loading need the folder (prepared models,
inductor's compiled graphs) but may not import the running layer above them."""
from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$SPECREPRO_CACHE`` (default ``~/.cache/specrepro``): prepared models, compiled graphs and ``runs/``."""
    return Path(os.environ.get("SPECREPRO_CACHE", "~/.cache/specrepro")).expanduser()


def profiles_dir() -> Path:
    """Where ``calibrate`` caches device profiles (``$SPECREPRO_CACHE/profiles``)."""
    return cache_root() / "profiles"


def inductor_cache() -> Path:
    """Point inductor's on-disk cache (compiled graphs, autotuning) at ``$SPECREPRO_CACHE/inductor``, unless the user
    set ``TORCHINDUCTOR_CACHE_DIR``: compilation is paid once per machine, model, dtype and shape bucket."""
    folder = Path(os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_root() / "inductor")))
    folder.mkdir(parents=True, exist_ok=True)
    return folder
