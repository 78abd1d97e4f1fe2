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


BUSY_CORES = 0.5  # other processes' CPU use, in cores, from which a timing counts as shared (noisy)


def _cpu_ticks(stat: Path = Path("/proc/stat")) -> tuple[int, int]:
    """The machine's (total, idle + iowait) CPU ticks since boot: the "cpu" line of ``/proc/stat``."""
    fields = [int(x) for x in stat.read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields), fields[3] + (fields[4] if len(fields) > 4 else 0)


def busy_cores(seconds: float = 0.5, stat: Path = Path("/proc/stat")) -> float | None:
    """Cores the rest of the machine kept busy over the next ``seconds``, while this process sleeps: what a timing
    started now would share the CPU with. The load average cannot tell that apart, since it still counts, for a
    minute after, the work this process (or the notebook before it) did itself. None where ``/proc/stat`` is not."""
    import time

    try:
        total0, idle0 = _cpu_ticks(stat)
        time.sleep(seconds)
        total1, idle1 = _cpu_ticks(stat)
    except (OSError, ValueError, IndexError):
        return None
    spent = total1 - total0
    return 0.0 if spent <= 0 else (os.cpu_count() or 1) * (1 - (idle1 - idle0) / spent)


def host_speed(repeats: int = 5, mib: int = 64, loop: int = 1_000_000) -> dict:
    """A fixed reference workload timed now: one thread reading ``mib`` MiB (a numpy sum, GB/s) and a Python loop of
    ``loop`` additions (ms), the median of ``repeats``. Benches and calibrations time it as they start and as they
    end, so that a slow hour of the host (a neighbour on it, a lower clock: invisible to ``busy_cores``, which sees
    this machine only) shows in the artifact: the same-run ratios hold either way, the absolute numbers do not."""
    import statistics
    import time

    import numpy as np

    data = np.ones(mib * 2**18, dtype=np.float32)
    reads, loops = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        data.sum()
        t1 = time.perf_counter()
        total = 0
        for i in range(loop):
            total += i
        reads.append(t1 - t0)
        loops.append(time.perf_counter() - t1)
    return {"read_gb_s": round(data.nbytes / statistics.median(reads) / 1e9, 2),
            "python_loop_ms": round(1e3 * statistics.median(loops), 2),
            "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def _tree_ticks(root: int, proc: Path = Path("/proc")) -> int:
    """CPU ticks spent by process ``root`` and its descendants, and by the children they have reaped (utime, stime,
    cutime and cstime of each: a child that exits and is waited for stays counted)."""
    parent, ticks = {}, {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()  # after "pid (comm)"
        except (OSError, IndexError):
            continue  # it exited meanwhile
        parent[int(entry.name)] = int(fields[1])
        ticks[int(entry.name)] = sum(int(x) for x in fields[11:15])
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, ppid in parent.items() if ppid in tree} - tree
        tree |= more
        grew = bool(more)
    return sum(ticks.get(pid, 0) for pid in tree)


class LoadWatch:
    """What the timings of this process share the CPU with while it runs: every ``period`` seconds, on a daemon
    thread, the cores other processes kept busy (the machine's busy ticks less those of this process, its
    descendants and the children they reaped). A notebook's artifacts start one, so that a claim timed under load is
    marked noisy, not decided (``metrics.verdict.under_load``). Records nothing where ``/proc`` is not."""

    def __init__(self, period: float = 5.0, proc: Path = Path("/proc")):
        import threading

        self.period, self.proc, self.pid = period, proc, os.getpid()
        self.intervals: list[tuple[int, int]] = []  # (other processes' busy ticks, all ticks) per interval
        self._lock, self._done = threading.Lock(), threading.Event()
        self._last = self._read()
        if self._last is not None:
            threading.Thread(target=self._run, name="specrepro-load-watch", daemon=True).start()

    def _read(self) -> tuple[int, int, int] | None:
        try:
            total, idle = _cpu_ticks(self.proc / "stat")
            return total, total - idle, _tree_ticks(self.pid, self.proc)
        except (OSError, ValueError, IndexError):
            return None

    def _run(self) -> None:
        while not self._done.wait(self.period):
            self.sample()

    def sample(self) -> None:
        """Close the interval since the last sample (the watch does it every ``period``; ``summary`` once more)."""
        now = self._read()
        with self._lock:
            if now is None or self._last is None or now[0] <= self._last[0]:
                return
            (total0, busy0, ours0), (total1, busy1, ours1) = self._last, now
            self.intervals.append((max(0, (busy1 - busy0) - (ours1 - ours0)), total1 - total0))
            self._last = now

    def stop(self) -> None:
        """End the watch's thread (after its current wait); ``summary`` still reports what was watched."""
        self._done.set()

    def summary(self) -> dict | None:
        """{"mean", "max": cores other processes kept busy, on average and in the worst interval, "seconds"
        watched}, up to now; None where nothing could be read."""
        self.sample()
        with self._lock:
            if not self.intervals:
                return None
            cores = os.cpu_count() or 1
            others, total = (sum(x) for x in zip(*self.intervals))
            worst = max(cores * o / t for o, t in self.intervals)
            return {"mean": round(cores * others / total, 3), "max": round(worst, 3),
                    "seconds": round(total / cores / os.sysconf("SC_CLK_TCK"), 1)}


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
