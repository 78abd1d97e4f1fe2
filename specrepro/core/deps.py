"""Which files of the checkout a run used, measured while it runs, and which of them have changed since.

A notebook run, or one cell of the run cache, depends on the code that ran for it, not on everything it imported:
every notebook imports the method registry, which imports every drafter, so an import list would make one changed
line anywhere stale every run. So :class:`Trace` watches the run itself:

- **code that ran**: ``sys.settrace`` (and ``threading.settrace``) sees each new frame's "call" event and keeps its
  code object; it returns no local tracer, so no line is traced. A file counts when a function defined in it ran
  (a function's file is its module's ``__file__``, so a dataclass's generated ``__init__`` counts for the module
  that declares it), not when it was merely imported: module and class bodies do not count by themselves.
- **what that code read**: each global name a function that ran (or a notebook cell) reads; each one that is a
  module, a class or a function counts its module, and a constant (a prompt list, a default table) counts the module
  that defines it. A name a cell only binds (an import it never uses) does not count.
  A frozen config class used by a function therefore counts even when none of its own methods ran.
- **files opened**: an audit hook (``sys.addaudithook``, the "open" event, which ``open``, ``io.open`` and
  ``torch.load`` all raise) records data and zoo files under the checkout. A C++ source counts with the headers in
  its folder, which the compiler reads without Python seeing it, and a file of a shipped model
  (``specrepro/zoo/<model>/``) counts its whole folder, whose weights a native library may read unseen.

Only files under :data:`CODE_ROOTS` of the checkout count, and prose never does (``*.md``). What a notebook writes
(``figures/``, ``notebooks/executed/``) is an output, never a dependency. ``requirements.lock`` always counts. The
machine is recorded beside the digests by the caller and never stales a run.

    with Trace() as trace:
        run()
    record = trace.digests()           # {"specrepro/engine/llama.py": "<sha256>", ...}
    changed(record)                    # [] while every file is as it was

Traces nest: a cell's trace inside a notebook's sees what ran in the cell; the notebook's sees it too. Code that runs
in a Ray task is traced on its worker, and what it used comes back with its result to the traces open in the driver
(``core.executor``). The cost is one Python call per function call while a trace is open (13% of a 64-token AR
decode on a 2-core Zen 1), so timed regions run ``untraced()`` after a warm-up under the trace.
"""
from __future__ import annotations

import contextlib
import dis
import functools
import hashlib
import inspect
import json
import os
import sys
import threading
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE_ROOTS = ("specrepro", "simulations", "notebooks")  # where a run's code and data live in the checkout
OUTPUTS = ("notebooks/executed",)  # what notebooks write: never a dependency
ALWAYS = ("requirements.lock",)  # every package's version: a dependency of every run
PROSE = (".md",)  # documentation never stales a run
_ROOT_TEXT = os.fspath(ROOT)
CODE_SUFFIXES = (".py", ".pyc")  # code is seen by the tracer, not by opening its file
HEADER_SUFFIXES = (".h", ".hpp", ".cuh")
ZOO = "specrepro/zoo"  # the shipped models: a folder each

MACHINERY = frozenset({"__create_fn__"})  # dataclasses' factory, run in the module's globals at class creation

_STACK: list[dict[int, tuple[types.CodeType, dict]]] = []  # per open trace, innermost last: id(code) -> code, globals
_OPENED: list[set[str]] = []  # per open trace: the files opened
_IMPORTS: list[dict[tuple[str, int], tuple[types.CodeType, dict]]] = []  # per open trace: calls made while a module
# imported, once per (importing module's file, id(code))
_TRACES: list["Trace"] = []  # the open traces themselves, innermost last
_OWN = globals()  # the tracer's own calls are not the run's
_BOOKKEEPING = {__file__}  # files that record a run and are no part of it (``bookkeeping``)
EDITED = "modified while the run went on"  # a record's digest for such a file: it never matches, so it stales
_HOOKED = False


def _on_call(frame, event, arg, _stack=_STACK):  # noqa: ARG001  (sys.settrace's signature)
    """The global trace function: keep each new code object (and its globals) in the innermost trace, once; trace
    no lines. (Its names are bound as defaults: at interpreter shutdown the module's globals are gone first.)"""
    if _stack and id(frame.f_code) not in _stack[-1]:
        try:
            _first_sight(frame, frame.f_code)
        except Exception:  # noqa: BLE001  (a dying interpreter's last frames: nothing of a run's)
            pass
    return None


def _first_sight(frame, code: types.CodeType) -> None:
    """Record ``code``'s first run. A module or class body is an import, not a use, and is not kept. A call made
    while another module's body runs (a registry entry, a table built at import) is kept apart, as a use of that
    module: it counts once that module counts (``Trace.files``), and it is looked at again when it runs later."""
    in_notebook = frame.f_globals.get("__name__") == "__main__"
    function = code.co_flags & inspect.CO_NEWLOCALS
    if frame.f_globals is _OWN or code.co_name in MACHINERY or not (function or in_notebook):
        return
    body = frame.f_back
    while body is not None and body.f_code.co_flags & inspect.CO_NEWLOCALS:
        body = body.f_back  # the nearest module (or class) body below this call
    importing = body.f_globals.get("__file__") if body is not None else None
    if importing is not None and body.f_globals.get("__name__") != "__main__":
        _IMPORTS[-1].setdefault((importing, id(code)), (code, frame.f_globals))
        return
    _STACK[-1][id(code)] = (code, frame.f_globals)


def _on_audit(event: str, args: tuple) -> None:
    if event == "open" and _OPENED and args and isinstance(args[0], (str, bytes, Path)):
        path = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
        _OPENED[-1].add(path)


def relative(path: str | Path, root: Path | None = None) -> str | None:
    """``path`` relative to the checkout when it is a file a run can depend on (under ``CODE_ROOTS``, not an output,
    not prose), else None."""
    return _relative(os.fspath(path), _ROOT_TEXT if root is None else os.fspath(root))


@functools.lru_cache(maxsize=1 << 16)
def _relative(path: str, root: str) -> str | None:
    """:func:`relative`, once per path and root in a process: resolving a path costs a system call per component,
    and a trace asks again for every module and function at every record (about 8 s a record in a notebook's
    kernel on a 2-core Zen 1, before this cache)."""
    try:
        rel = Path(path).resolve().relative_to(root)
    except (ValueError, OSError):
        return None
    text = rel.as_posix()
    if not rel.parts or rel.parts[0] not in CODE_ROOTS or text.endswith(PROSE) or "__pycache__" in rel.parts:
        return None
    if any(text == out or text.startswith(out + "/") for out in OUTPUTS):
        return None
    return text


class Trace:
    """The files of the checkout that the code run inside ``with Trace():`` used (see the module's docstring)."""

    def __init__(self, root: Path | None = None):
        self.root = Path(root or ROOT)
        self.codes: dict[int, tuple[types.CodeType, dict]] = {}
        self.opened: set[str] = set()
        self.imports: dict[tuple[str, int], tuple[types.CodeType, dict]] = {}  # (importing file, id(code)) -> code,
        # its globals
        self.inherited: dict[str, str] = {}  # {file: SHA-256} of work reused, not rerun (``inherit``)
        self.started = time.time()
        self._digests: dict[str, str] = {}  # each file's digest when this trace first reported it
        self._saved = None

    def __enter__(self) -> "Trace":
        global _HOOKED
        if not _HOOKED:
            sys.addaudithook(_on_audit)  # cannot be removed; it does nothing while no trace is open
            _HOOKED = True
        _STACK.append(self.codes)
        _OPENED.append(self.opened)
        _IMPORTS.append(self.imports)
        _TRACES.append(self)
        self._saved = (sys.gettrace(), threading.gettrace())
        sys.settrace(_on_call)
        threading.settrace(_on_call)
        if len(_STACK) == 1:  # the frames already running make no new "call" event: count them now (a nested
            frame = sys._getframe(1)  # trace's callers are its outer trace's business)
            while frame is not None:
                _on_call(frame, "call", None)
                frame = frame.f_back
        return self

    def __exit__(self, *exc) -> None:
        _STACK.pop()
        _OPENED.pop()
        _IMPORTS.pop()
        _TRACES.pop()
        if _STACK:  # an outer trace sees what ran in this one
            for key, value in self.codes.items():
                _STACK[-1].setdefault(key, value)
            _OPENED[-1].update(self.opened)
            for key, value in self.imports.items():
                _IMPORTS[-1].setdefault(key, value)
            _TRACES[-1].inherited.update(self.inherited)
        else:
            sys.settrace(self._saved[0])
            threading.settrace(self._saved[1])

    def files(self) -> list[str]:
        """The checkout's files this trace used, relative to the checkout, sorted (``requirements.lock`` among
        them)."""
        used: set[str] = set()
        index = _ModuleIndex(self.root)
        for code, globals_ in list(self.codes.values()):
            index.use(code, globals_, used)
        pending: dict[str, list] = {}  # importing module's file -> the calls its body made
        for (importing, _), call in list(self.imports.items()):
            pending.setdefault(importing, []).append(call)
        while ready := [file for file in pending if file in used]:  # an import-time call counts once its module does
            for file in ready:
                for code, globals_ in pending.pop(file):
                    index.use(code, globals_, used)
        for path in set(self.opened):  # a copy: other threads may open files meanwhile
            if path.endswith(CODE_SUFFIXES):
                continue  # the import system reads every module it imports: code counts when it runs
            used.add(path)
            if path.endswith((".cpp", ".cu", ".c")):
                used.update(str(p) for p in Path(path).parent.glob("*") if p.suffix in HEADER_SUFFIXES)
            if (rel := relative(path, self.root)) is not None and rel.startswith(ZOO + "/") and rel.count("/") >= 3:
                # a shipped model counts whole: a library in native code (safetensors) reads its weights unseen
                used.update(str(p) for p in Path(path).parent.iterdir() if p.is_file())
        used -= _BOOKKEEPING  # the tracer and the run cache record a run; they are not part of it
        rel = {relative(p, self.root) for p in used}
        rel = {p for p in rel if p is not None and (self.root / p).is_file()}
        return sorted(rel | set(ALWAYS))

    def digests(self) -> dict[str, str]:
        """{file: SHA-256} of :meth:`files` and of the files of the work this trace reused (``inherit``). A file is
        digested once, when it is first reported; one modified after the trace began gets :data:`EDITED` instead of
        a digest (the code that ran may be its old bytes), so that a record never calls such a run fresh."""
        for path in self.files():
            if path not in self._digests:
                full = self.root / path
                self._digests[path] = EDITED if full.stat().st_mtime > self.started else file_digest(full)
        return {**self.inherited, **self._digests}


_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME"})
_LOADED: dict[int, tuple[types.CodeType, frozenset[str]]] = {}  # id(code) -> (code, the global names it reads)


def _loaded_globals(code: types.CodeType) -> frozenset[str]:
    """The global names ``code`` reads (not those it only binds, as an import in a notebook cell does), once per
    code object."""
    found = _LOADED.get(id(code))
    if found is None:
        found = _LOADED[id(code)] = (code, frozenset(i.argval for i in dis.get_instructions(code)
                                                     if i.opname in _LOADS))
    return found[1]


class _ModuleIndex:
    """What the checkout's imported modules hold, to say where a value a function read was defined: their module-level
    values that are not modules, classes or functions (prompt lists, tables, default configs), by (name, id) and by
    id, and their functions and methods by code object (a function's defaults are values it reads too). Every module
    that binds the same object is kept (``from a import X`` binds it in two), since which one assigned it cannot be
    told afterwards: a dependency too many, never one too few."""

    def __init__(self, root: Path):
        self.root = root
        self.named: dict[tuple[str, int], set[str]] = {}
        self.by_id: dict[int, set[str]] = {}
        self.functions: dict[int, types.FunctionType] = {}
        for module in list(sys.modules.values()):
            file = getattr(module, "__file__", None)
            if file is None or relative(file, root) is None:
                continue
            for name, value in list(vars(module).items()):
                if isinstance(value, types.FunctionType):
                    self.functions[id(value.__code__)] = value
                elif isinstance(value, type):
                    for member in list(vars(value).values()):
                        member = getattr(member, "__func__", member)  # staticmethod, classmethod
                        if isinstance(member, types.FunctionType):
                            self.functions[id(member.__code__)] = member
                elif not isinstance(value, types.ModuleType):
                    self.named.setdefault((name, id(value)), set()).add(file)
                    self.by_id.setdefault(id(value), set()).add(file)

    def origins(self, name: str | None, value) -> set[str]:
        """The files of the modules that define ``value`` (bound to ``name`` in the globals of code that ran; None:
        a default value, which has no name)."""
        if isinstance(value, types.ModuleType):
            return {value.__file__} if getattr(value, "__file__", None) else set()
        if isinstance(value, (type, types.FunctionType)):
            module = sys.modules.get(getattr(value, "__module__", None) or "")
            return {module.__file__} if getattr(module, "__file__", None) else set()
        return self.named.get((name, id(value)), set()) if name is not None else self.by_id.get(id(value), set())

    def use(self, code: types.CodeType, globals_: dict, used: set[str]) -> None:
        """Add to ``used`` the file of ``code`` (a function that ran) and the files of the globals it reads and of
        its default values; for a notebook cell, only those of the globals it reads."""
        own = globals_.get("__file__")
        in_notebook = globals_.get("__name__") == "__main__"
        if not in_notebook and (own is None or relative(own, self.root) is None):
            return  # a library's code: what it names is the library's business
        if not in_notebook:
            used.add(own)
        for name in _loaded_globals(code):
            if name in globals_:
                used |= self.origins(name, globals_[name])
        function = self.functions.get(id(code))
        if function is not None and function.__code__ is code:
            for value in (*(function.__defaults__ or ()), *(function.__kwdefaults__ or {}).values()):
                used |= self.origins(None, value)


@functools.lru_cache(maxsize=4096)
def _digest_cached(path: str, times_ns: tuple[int, int], size: int) -> str:  # noqa: ARG001  (the cache's key)
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_digest(path: str | Path) -> str:
    """SHA-256 of a file's bytes (remembered per path, modification and change times and size in this process)."""
    stat = Path(path).stat()
    return _digest_cached(str(path), (stat.st_mtime_ns, stat.st_ctime_ns), stat.st_size)


def changed(record: dict[str, str], root: Path | None = None) -> list[str]:
    """The files of ``record`` ({file: SHA-256}) whose bytes differ now, or that are gone ("<file> (removed)")."""
    out = []
    for path, digest in sorted(record.items()):
        full = Path(root or ROOT) / path
        if not full.is_file():
            out.append(f"{path} (removed)")
        elif file_digest(full) != digest:
            out.append(path)
    return out


def digest_of(record: dict[str, str]) -> str:
    """One SHA-256 over a record's files and their digests: what a cache key holds for the code."""
    text = "".join(f"{path}\0{digest}\0" for path, digest in sorted(record.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def trace_kernel(out: str | Path) -> Trace:
    """Open a trace for the rest of this process (a notebook's kernel: ``run_notebooks.py`` calls this from an
    IPython startup file) and write its record, {file: SHA-256}, to ``out`` after every cell, so that the record is
    whole when the last cell ends however the kernel is shut down."""
    from IPython import get_ipython

    trace = Trace().__enter__()
    shell = get_ipython()
    out, tmp = Path(out), Path(out).with_suffix(".tmp")

    def dump(*_) -> None:
        tmp.write_text(json.dumps(trace.digests(), indent=1, sort_keys=True) + "\n")
        os.replace(tmp, out)  # whole or not at all

    if shell is not None:
        shell.events.register("post_run_cell", dump)
    dump()
    return trace


@contextlib.contextmanager
def untraced(active: bool = True):
    """Pause this thread's tracing for a timed region (``active``), so that the tracer's cost (13% of a 64-token AR
    decode on a 2-core Zen 1) is not in a timing. Only for a region whose code a warm-up already ran under the same
    trace: a function that runs only here goes unseen (its file still counts if any other code of it ran)."""
    if not active or not _STACK or sys.gettrace() is not _on_call:
        yield
        return
    sys.settrace(None)
    try:
        yield
    finally:
        sys.settrace(_on_call)


def timed(round_: int, warmup: int):
    """``untraced()`` for a timed round (``round_ >= warmup``), nothing for a warm-up round."""
    return untraced(round_ >= warmup)


def inherit(record: dict[str, str]) -> None:
    """Count the files of ``record`` ({file: SHA-256}, a reused cell's) as used by every open trace: work read back
    from the run cache ran that code, in an earlier process."""
    if _TRACES:
        _TRACES[-1].inherited.update(record)


def current_files() -> dict[str, str]:
    """{file: SHA-256} of what the open traces have used so far (none open: nothing): what work started now may rest
    on, since the models, prompts and tables it is handed were made by that code."""
    found: dict[str, str] = {}
    for trace in list(_TRACES):
        found.update(trace.digests())
    return found


def bookkeeping(file: str) -> None:
    """Never count ``file`` (a module's ``__file__``) as used: it records runs, as the run cache does, and decides
    where a result is kept, never what it is."""
    _BOOKKEEPING.add(file)
