"""Where resumable work lives: ``$SPECREPRO_CACHE/runs/<name>-<key>/``, outside the repository.

A notebook's bench records, training cells and grids are worth resuming after an interruption, but never from a
folder that another configuration or another version of the code wrote. So a run's folder is named by a *key*: the
SHA-256 of the full configuration (any JSON-able value: dataclasses, dicts, lists of prompt ids) and of the code that
produces it (every file of the installed ``specrepro`` package, sources and shipped zoo weights alike, plus any extra
file the caller names, such as the notebook itself), and of the machine (``core.machine.fingerprint``: CPU vendor,
family, model, stepping, flags and cores, and the GPUs), since a timed cell, and even a sampled one, is a result of
the machine it ran on. A matching key resumes; anything else is a new folder, so a stale run, or one another machine
made in a shared cache, can never block or leak into a new one. What a notebook writes under ``figures/`` is a result and is never read
back.

Hand-written rather than ``joblib.Memory``: a run folder fills up record by record while the run goes on (that is
what makes it resumable), whereas a memoised function only stores its return value once it has finished.

    folder = run_dir("mentored_speed_quality", config, [p.id for p in prompts], code=[notebook_path])

A folder's key covers the whole package unless every piece of work that fills it is traced (``traced=True``): then
the key covers the configuration and the named ``code`` files only, and each cell of work keeps a record of the files
it used, each with its SHA-256 (``specrepro.core.deps.Trace``): ``run_bench`` keeps ``code.json`` in its folder,
``studies.common.cached_json`` keeps ``<file>.code.json`` beside each file. A record holds what the cell's own work
ran and opened, and what the traces open around it had used before it began: the models, prompts and tables a cell
is handed were made by that code. Before a cell is reused its record is checked (:func:`reusable`): a changed file,
or no record at all, recomputes the cell (said in one line), so a change to a module that nothing before or in the
cell ran recomputes nothing; a reused cell's files count for the notebook that reads it back. A timed region runs
untraced (``core.deps.untraced``) after a warm-up that ran the same code inside the record.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Iterable

from ..core.deps import Trace, bookkeeping, changed, current_files, file_digest, inherit
from ..core.machine import fingerprint, machine
from ..core.provenance import atomic_write_text
from ..engine.disk import cache_root

PACKAGE = Path(__file__).resolve().parents[1]  # specrepro/
bookkeeping(__file__)  # where a result is kept, never what it is: no run's record lists this file
BENCH_RECORD = "code.json"  # in a bench's folder: {file: SHA-256} of what its bench ran
CODE_SUFFIX = ".code.json"  # beside a cached file: {file: SHA-256} of what computing it ran


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"__dataclass__": type(value).__name__, **_jsonable(dataclasses.asdict(value))}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_jsonable(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
    if isinstance(value, Path):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)  # a torch.dtype, an enum: its repr names it


def config_text(*config: Any) -> str:
    """The canonical JSON of ``config`` (keys sorted, dataclasses by field): what the key hashes."""
    return json.dumps(_jsonable(list(config)), sort_keys=True, separators=(",", ":"))


@functools.lru_cache(maxsize=None)
def package_digest() -> str:
    """SHA-256 over every file of the package (path and content), caches and bytecode excluded."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            digest.update(f"{path.relative_to(PACKAGE)}\0{file_digest(path)}\0".encode())
    return digest.hexdigest()


def run_key(*config: Any, code: Iterable[Path | str] = (), package: bool = True) -> str:
    """The key of a run: 16 hex digits of SHA-256(config, this machine's fingerprint, package files unless not
    ``package``, ``code`` files)."""
    digest = hashlib.sha256(config_text(*config).encode())
    digest.update(fingerprint().encode())
    if package:
        digest.update(package_digest().encode())
    for path in code:
        digest.update(file_digest(Path(path)).encode())
    return digest.hexdigest()[:16]


def run_dir(name: str, *config: Any, code: Iterable[Path | str] = (), root: Path | None = None,
            fresh: bool = False, traced: bool = False) -> Path:
    """The cache folder of a run (created): ``<root or cache_root()>/runs/<name>-<key>/``, with ``key.json`` saying
    what the key covers. The caller resumes from what it finds there and writes its progress there; ``fresh``
    empties the folder first (recompute this run even though its key matches). ``traced``: the key leaves the
    package out, for a folder whose every cell keeps and checks a record of the code it ran (the module's
    docstring)."""
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"a run name is one plain folder name, got {name!r}")
    code = [Path(p).resolve() for p in code]
    folder = (root or cache_root()) / "runs" / f"{name}-{run_key(*config, code=code, package=not traced)}"
    if fresh:
        shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    key_file = folder / "key.json"
    if not key_file.exists():
        tmp = key_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"name": name, "config": json.loads(config_text(*config)),
                                   "machine": machine(), "package_sha256": None if traced else package_digest(),
                                   "code": [str(p) for p in code],
                                   "traced": f"each cell's {BENCH_RECORD} or *{CODE_SUFFIX}" if traced else None},
                                  indent=1))
        os.replace(tmp, key_file)
    return folder


def outdated(record: Path) -> list[str] | None:
    """The files of a cell's ``record`` ({file: SHA-256}, :func:`recording`) that changed since; None when there is
    no record (the cell cannot be checked, so it is not reused)."""
    try:
        return changed(json.loads(Path(record).read_text()))
    except FileNotFoundError:
        return None


def reusable(record: Path, what: str) -> bool:
    """Whether the cell that ``record`` covers may be reused (its record exists and every file in it is unchanged);
    when its code changed, says so in one line. A reused cell's files count for the traces open now
    (``core.deps.inherit``): the notebook that reads it back depends on them too."""
    stale = outdated(record)
    if stale:
        print(f"run cache: {what} recomputed: the code it ran changed ({', '.join(stale[:3])}"
              f"{', ...' if len(stale) > 3 else ''})", file=sys.stderr)
    if stale == []:
        inherit(json.loads(Path(record).read_text()))
    return stale == []


def restart_if_code_changed(folder: Path, record: Path, keep: tuple[str, ...] = ()) -> None:
    """A run-cache folder keyed without the package (``run_dir(traced=True)``) whose cells share one ``record``
    starts again when it holds work that the record does not vouch for: a file the record lists changed, or there is
    no record (a run killed before writing it). Everything goes (said in one line) but ``key.json`` and ``keep``.
    Any other folder (a bench's ``--out`` of the user's) is left as it is."""
    folder = Path(folder)
    try:
        traced = json.loads((folder / "key.json").read_text()).get("traced")
    except (FileNotFoundError, ValueError):
        traced = None
    work = [p for p in folder.iterdir() if p.name not in ("key.json", *keep)] if folder.is_dir() else []
    if traced and work and not reusable(record, folder.name):
        if outdated(record) is None:
            print(f"run cache: {folder.name} recomputed: it has no record of the code it ran", file=sys.stderr)
        for path in work:
            shutil.rmtree(path) if path.is_dir() else path.unlink()


@contextlib.contextmanager
def recording(record: Path):
    """Trace the work done inside the ``with`` (one cell of a run folder) and write to ``record`` (JSON {file:
    SHA-256}) the files it used, with those that the traces open around it had used before it began (the models and
    inputs it is handed were made by that code) and, still unchanged, those ``record`` held already (the work it
    resumes). Written even when the work fails part-way: what it wrote, that code wrote."""
    files = current_files()
    try:
        old = {f: d for f, d in json.loads(Path(record).read_text()).items() if not changed({f: d})}
    except FileNotFoundError:
        old = {}
    try:
        with Trace() as trace:
            trace.inherited.update(old)
            try:
                yield record
            finally:
                files.update(trace.digests())
    finally:
        atomic_write_text(Path(record), json.dumps(files, indent=1, sort_keys=True) + "\n")
