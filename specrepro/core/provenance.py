"""What every result file records about where it came from, and how result files are written.

One home for the git revision (one format: the commit, with "(with uncommitted changes)" appended when the
working tree differs; ``git_state`` gives the same facts as data, the files that differ named), for the environment
(``environment``: the versions that decide the numbers, and the lock file that pins them) and for atomic writes (a
temporary file renamed into place, so an interrupted run never leaves half a file).
"""
from __future__ import annotations

import hashlib
import os
import platform
import re
import subprocess
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCK_FILE = ROOT / "requirements.lock"  # every package's exact version (``make lock``; ``make venv`` installs it)


def git_revision(ignore: tuple[str, ...] = (), root: Path = ROOT) -> str:
    """The commit the package runs from, or "unknown" outside a git checkout. Changes under the ``ignore``d paths
    (the notebooks' own outputs, for the notebooks' provenance) do not count as uncommitted changes."""
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        spec = ["--", ".", *(f":!{path}" for path in ignore)] if ignore else []
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", *spec], cwd=root,
                               capture_output=True, text=True, check=True)
        return rev.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def git_state(paths: tuple[str, ...] = ("specrepro",)) -> dict:
    """The commit and the files under ``paths`` that differ from it (``git status --porcelain`` lines, untracked
    files included): {"revision": str | None, "dirty_files": [...]}. The draft trainer's record keeps this form."""
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", *paths], cwd=ROOT, capture_output=True,
                               text=True).stdout.strip()
        return {"revision": rev or None, "dirty_files": dirty.splitlines()}
    except OSError:
        return {"revision": None, "dirty_files": []}


def atomic_write_text(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a hidden temporary file in the same folder, then rename it."""
    return atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a hidden temporary file in the same folder, then rename it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path


def busy_cores(seconds: float = 0.5, stat: Path = Path("/proc/stat")) -> float | None:
    """Cores the rest of the machine kept busy over the next ``seconds``, while this process sleeps: what a timing
    started now would share the CPU with. The load average cannot tell that apart, since it still counts, for a
    minute after, the work this process (or the notebook before it) did itself. None where ``/proc/stat`` is not."""
    import time

    def sample() -> tuple[int, int]:
        fields = [int(x) for x in stat.read_text().split("\n", 1)[0].split()[1:]]  # the "cpu" line, in ticks
        return sum(fields), fields[3] + (fields[4] if len(fields) > 4 else 0)  # total, idle + iowait

    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    spent = total1 - total0
    return 0.0 if spent <= 0 else (os.cpu_count() or 1) * (1 - (idle1 - idle0) / spent)


def lock_pins(lock: Path = LOCK_FILE) -> dict[str, str]:
    """The lock file's pins, package name (normalised) -> version; {} without a lock."""
    try:
        text = lock.read_text()
    except OSError:
        return {}
    pins = (re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line) for line in text.splitlines())
    return {re.sub(r"[-_.]+", "-", m.group(1)).lower(): m.group(2) for m in pins if m}


def environment(lock: Path = LOCK_FILE) -> dict:
    """The interpreter and the libraries that decide the numbers, the lock file's sha256 (None without one) and the
    packages installed at another version than it pins ("name installed, locked"; empty: the environment is the
    lock's; a pinned package not installed, such as an extra, is not a difference)."""
    def installed(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    try:
        digest = hashlib.sha256(lock.read_bytes()).hexdigest()
    except OSError:
        digest = None
    differs = []
    for name, pinned in sorted(lock_pins(lock).items()):
        version = installed(name)
        if version is not None and version != pinned:
            differs.append(f"{name} {version}, locked {pinned}")
    return {"python": platform.python_version(), "torch": installed("torch"),
            "transformers": installed("transformers"), "lock_sha256": digest, "not_as_locked": differs}
