"""Running ``python -m specrepro`` as a user does, for the fault-injection tests (tests/cli) and their report
(``python -m tests.cli.report``): a world of tiny model folders and prompts files, one bad-input case in a folder
of its own with a snapshot before and after, and the scenarios that need real signals or two processes at once.

Each scenario returns what it saw; a ``*_problems`` function says how that breaks issue 28's contract (an empty
list: it holds), so the tests and the report judge alike. Nothing here imports specrepro at import time: the package
under test is the checkout ``World.root``, run in subprocesses with their working directory there; only
``run_in_process`` (the tests' fast path for the bad-input cases: one interpreter instead of a torch import per case)
imports this checkout's ``specrepro.run.commands``.
"""
from __future__ import annotations

import collections
import csv
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.cli.cases import Case, Folder, ModelCopy, jsonl

TIMEOUT = 300  # seconds for any one command
POLL = 0.02
RUN_FILES = {"config.json", "provenance.json", "records.jsonl", "summary.csv", "code.json", ".lock"}

BUILD = r"""
import json, sys
from pathlib import Path
import torch
from transformers import AutoTokenizer
from specrepro.engine.models import prepare, tiny_model
base = Path(sys.argv[1])
tokenizer = AutoTokenizer.from_pretrained(prepare("smollm2-135m-instruct"))
for name, seed in (("target", 0), ("draft", 1)):
    model = tiny_model(vocab_size=len(tokenizer), n_layers=1, hidden=32, seed=seed)
    model.save_pretrained(base / name)
    tokenizer.save_pretrained(base / name)
print(json.dumps({"cuda": torch.cuda.is_available(), "context": model.config.max_position_embeddings}))
"""


@dataclass(frozen=True)
class World:
    root: Path  # the checkout whose package runs
    python: str
    base: Path  # target/, draft/, prompts.jsonl, many.jsonl
    cores: int
    cuda: bool
    chattr: bool

    @property
    def target(self) -> Path:
        return self.base / "target"

    @property
    def draft(self) -> Path:
        return self.base / "draft"

    @property
    def prompts(self) -> Path:
        """4 short prompts."""
        return self.base / "prompts.jsonl"

    @property
    def many(self) -> Path:
        """100 short prompts: a run long enough to interrupt, or to overlap with another."""
        return self.base / "many.jsonl"

    def places(self, tmp: Path) -> dict[str, str]:
        return {"target": str(self.target), "draft": str(self.draft), "prompts": str(self.prompts),
                "tmp": str(tmp), "out": str(tmp / "out"), "cores": str(self.cores)}

    def unmet(self, case: Case) -> str | None:
        """Why ``case`` cannot run here, or None."""
        if case.requires == "cpu-only torch" and self.cuda:
            return "torch has CUDA here"
        if case.requires == "chattr" and not self.chattr:
            return "chattr +i does not work here"
        return None


def build_world(root: Path, base: Path, python: str) -> World:
    """The tiny model folders (by the checkout's own specrepro.engine.models, with the user's cache for the tokenizer) and
    the prompts files in ``base``."""
    base.mkdir(parents=True, exist_ok=True)
    res = subprocess.run([python, "-c", BUILD, str(base)], cwd=root, capture_output=True, text=True, timeout=TIMEOUT)
    if res.returncode != 0:
        raise RuntimeError(f"building the tiny models failed:\n{res.stderr[-3000:]}")
    facts = json.loads(res.stdout.strip().splitlines()[-1])
    (base / "prompts.jsonl").write_text(jsonl(*(f"Say something about the number {i}." for i in range(4))))
    (base / "many.jsonl").write_text(jsonl(*(f"Tell me a fact about the number {i}." for i in range(100))))
    probe = base / "chattr-probe"
    probe.mkdir(exist_ok=True)
    chattr = _chattr(probe, True)
    if chattr:
        _chattr(probe, False)
    probe.rmdir()
    return World(root=Path(root), python=python, base=base, cores=len(os.sched_getaffinity(0)),
                 cuda=bool(facts["cuda"]), chattr=chattr)


def _chattr(path: Path, immutable: bool) -> bool:
    try:
        return subprocess.run(["chattr", "+i" if immutable else "-i", str(path)], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


# ------------------------------------------------------------------------------------------- processes


@dataclass
class Outcome:
    argv: list[str]
    returncode: int | None  # None: killed after the timeout
    stdout: str
    stderr: str
    seconds: float
    changed: list[str] = field(default_factory=list)  # paths created, removed or altered (bad-input cases)

    @property
    def lines(self) -> list[str]:
        """The non-empty lines of stderr as a terminal leaves them: of a line that \\r rewrites (a progress bar),
        what follows the last \\r."""
        shown = (line.rstrip("\r").rsplit("\r", 1)[-1] for line in self.stderr.split("\n"))
        return [line for line in shown if line.strip()]

    @property
    def exit(self) -> str:
        if self.returncode is None:
            return f"killed after {self.seconds:.0f} s"
        if self.returncode < 0:
            return f"{self.returncode} ({signal.Signals(-self.returncode).name})"
        return str(self.returncode)

    def shown(self, last: bool = False, width: int = 140) -> str:
        """``Traceback: <its last line>`` when stderr has one; else its first (``last``: last) line that specrepro
        wrote, or failing that its first (last) line."""
        lines = [line.strip() for line in self.lines]
        ours = [line for line in lines if line.startswith(("specrepro", "python -m specrepro"))] or lines
        if not lines:
            text = ""
        elif "Traceback" in self.stderr:
            text = "Traceback: " + lines[-1]
        else:
            text = ours[-1] if last else ours[0]
        return text if len(text) <= width else text[:width - 1] + "…"


def interruptible() -> None:
    """In the child before it starts: Ctrl-C's default disposition, as at a terminal. A shell's background job, such
    as CI started with ``&`` or nohup, ignores SIGINT, and a Python started with it ignored keeps ignoring it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def env(world: World, cache: Path) -> dict[str, str]:
    return {**os.environ, "SPECREPRO_CACHE": str(cache), "PYTHONUNBUFFERED": "1"}


def start(world: World, argv: list[str], cache: Path, stdout: Path, stderr: Path) -> subprocess.Popen:
    """``python -m specrepro *argv`` in the background, its output into files (read while it runs)."""
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        return subprocess.Popen([world.python, "-m", "specrepro", *argv], cwd=world.root, env=env(world, cache),
                                stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True,
                                preexec_fn=interruptible)


def finish(proc: subprocess.Popen, timeout: float = TIMEOUT) -> int | None:
    """The exit status, or None after killing the process (and its group) at ``timeout``."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        return None


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def run(world: World, argv: list[str], cache: Path, timeout: float = TIMEOUT) -> Outcome:
    """``python -m specrepro *argv`` to the end (or killed at ``timeout``)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([world.python, "-m", "specrepro", *argv], cwd=world.root, env=env(world, cache),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, preexec_fn=interruptible)
    try:
        out, err = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        _kill(proc)
        out, err = proc.communicate()
        code = None
    finally:
        _kill(proc)
    return Outcome(list(argv), code, out.decode(errors="replace"), err.decode(errors="replace"),
                   time.perf_counter() - t0)


def run_in_process(world: World, argv: list[str], cache: Path, timeout: float = TIMEOUT) -> Outcome:
    """``specrepro.run.commands.main(argv)`` in this interpreter, with $SPECREPRO_CACHE at ``cache`` and stdout and
    stderr captured; an exception that escapes ``main`` is written to the captured stderr as its traceback, as the
    interpreter would. ``timeout`` is unused (a bad input fails in well under a second)."""
    import contextlib
    import io
    import traceback

    from specrepro.run.commands import main

    out, err, saved = io.StringIO(), io.StringIO(), os.environ.get("SPECREPRO_CACHE")
    os.environ["SPECREPRO_CACHE"] = str(cache)
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as stop:  # argparse's usage errors
                code = stop.code if isinstance(stop.code, int) else 1
            except Exception:
                traceback.print_exc()
                code = 1
    finally:
        if saved is None:
            os.environ.pop("SPECREPRO_CACHE", None)
        else:
            os.environ["SPECREPRO_CACHE"] = saved
    return Outcome(list(argv), code, out.getvalue(), err.getvalue(), time.perf_counter() - t0)


def collected(argv: list[str], stdout: Path, stderr: Path, code: int | None,
              t0: float) -> Outcome:
    return Outcome(list(argv), code, stdout.read_text(errors="replace"), stderr.read_text(errors="replace"),
                   time.perf_counter() - t0)


def wait_for(condition, proc: subprocess.Popen, timeout: float = TIMEOUT) -> bool:
    """Poll ``condition()`` until it holds (True), the process ends or ``timeout`` passes (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        if proc.poll() is not None:
            return bool(condition())
        time.sleep(POLL)
    return False


# ------------------------------------------------------------------------------------- bad-input cases


def snapshot(folder: Path) -> dict[str, str]:
    """Every path under ``folder``: "folder", or the sha256 of its bytes."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        out[rel] = "folder" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def lay_files(case: Case, world: World, tmp: Path) -> list[Path]:
    """Create the case's files under ``tmp``; returns the folders made immutable (to release afterwards)."""
    frozen = []
    for rel, content in case.files:
        path = tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Folder):
            path.mkdir()
            if content.immutable:
                if not _chattr(path, True):
                    raise RuntimeError(f"chattr +i {path} failed")
                frozen.append(path)
        elif isinstance(content, ModelCopy):
            shutil.copytree(world.target, path)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return frozen


def fill(text: str, world: World, tmp: Path) -> str:
    return text.format_map(world.places(tmp))


def run_case(case: Case, world: World, tmp: Path, timeout: float = TIMEOUT, runner=run) -> Outcome:
    """The case in ``tmp`` (empty or new), with $SPECREPRO_CACHE in it, run by ``runner`` (``run``: a process of its
    own; ``run_in_process``); ``changed`` lists what the run altered anywhere under ``tmp`` (the --out, the case's
    files, the cache)."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "cache").mkdir()
    frozen = lay_files(case, world, tmp)
    try:
        argv = [fill(a, world, tmp) for a in case.argv]
        before = snapshot(tmp)
        outcome = runner(world, argv, tmp / "cache", timeout)
        outcome.changed = changes(before, snapshot(tmp))
        if Path("/proc/specrepro-out").exists():
            outcome.changed.append("/proc/specrepro-out")
    finally:
        for path in frozen:
            _chattr(path, False)
    return outcome


def has_word(text: str, word: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text) is not None


def bad_input_problems(case: Case, outcome: Outcome, world: World, tmp: Path) -> list[str]:
    """How ``outcome`` breaks the contract for bad input (empty: it holds)."""
    problems = []
    lines = outcome.lines
    line = lines[0] if lines else ""
    if outcome.returncode != 2:
        problems.append(f"exit status {outcome.exit}, not 2")
    if "Traceback" in outcome.stderr:
        problems.append("a traceback on stderr")
    if len(lines) != 1:
        problems.append(f"{len(lines)} lines on stderr, not 1")
    if not line.startswith((f"python -m specrepro {case.command}: error:", "specrepro: error:")):
        problems.append("the line does not start with 'python -m specrepro <cmd>: error:' or 'specrepro: error:'")
    for text in case.expect:
        if fill(text, world, tmp) not in outcome.stderr:
            problems.append(f"no {fill(text, world, tmp)!r} in the message")
    for word in case.words:
        if not has_word(outcome.stderr, fill(word, world, tmp)):
            problems.append(f"the message does not name {fill(word, world, tmp)!r}")
    for text in case.forbid:
        if text in outcome.stderr:
            problems.append(f"the message says {text!r}")
    if case.max_chars is not None and len(line) >= case.max_chars:
        problems.append(f"the line has {len(line)} characters (limit {case.max_chars})")
    if outcome.stdout:
        problems.append(f"stdout not empty ({len(outcome.stdout.splitlines())} lines)")
    if outcome.changed:
        problems.append(f"half-written: {', '.join(outcome.changed[:6])}")
    return problems


# ----------------------------------------------------------------------------------------- run folders


def bench_argv(world: World, prompts: Path, out: Path, *extra: str) -> list[str]:
    return ["bench", "--methods", "ar", "--target", str(world.target), "--prompts", str(prompts), "--out", str(out),
            "--dtype", "fp32", "--threads", "1", "--max-new-tokens", "8", "--no-quality", "--warmup-tokens", "0",
            "--no-progress", *extra]


def record_lines(out: Path) -> list[bytes]:
    """records.jsonl's complete lines (a last line without its newline is not one)."""
    path = out / "records.jsonl"
    if not path.exists():
        return []
    return [line for line in path.read_bytes().splitlines(keepends=True) if line.endswith(b"\n")]


def record_keys(lines: list[bytes]) -> collections.Counter:
    """(method, prompt_id, repeat) of each line that is a record."""
    keys = collections.Counter()
    for line in lines:
        try:
            r = json.loads(line)
            keys[(r["method"], r["prompt_id"], r["repeat"])] += 1
        except (ValueError, KeyError, TypeError):
            pass
    return keys


def keys_problems(out: Path, n: int) -> list[str]:
    """records.jsonl in ``out`` must hold ``n`` keys, each once."""
    keys = record_keys(record_lines(out))
    twice = sum(1 for c in keys.values() if c > 1)
    problems = []
    if twice:
        problems.append(f"{twice} key(s) more than once in records.jsonl")
    if len(keys) != n:
        problems.append(f"{len(keys)} distinct keys in records.jsonl, not {n}")
    return problems


def folder_problems(out: Path, damaged: bool = False) -> list[str]:
    """A finished run's folder: its five files (code.json: the files the bench ran, specrepro/run/cache.py), and
    nothing but RUN_FILES (and records.jsonl.damaged-*)."""
    names = {p.name for p in out.iterdir()} if out.is_dir() else set()
    stray = sorted(n for n in names - RUN_FILES if not (damaged and n.startswith("records.jsonl.damaged-")))
    missing = sorted({"config.json", "provenance.json", "records.jsonl", "summary.csv", "code.json"} - names)
    return ([f"stray files in the run folder: {stray}"] if stray else []) + (
        [f"missing from the run folder: {missing}"] if missing else [])


def summary_row(out: Path) -> dict[str, str]:
    """summary.csv's first row (one method: ar)."""
    with open(out / "summary.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    return rows[0] if rows else {}


def interrupted_problems(outcome: Outcome) -> list[str]:
    """Exit 130 (or death by SIGINT after the message, which a shell shows as 130 too), no traceback, the last
    stderr line ``specrepro: interrupted...``."""
    problems = []
    if outcome.returncode not in (130, -signal.SIGINT):
        problems.append(f"exit status {outcome.exit}, not 130")
    if "Traceback" in outcome.stderr:
        problems.append("a traceback on stderr")
    last = outcome.lines[-1] if outcome.lines else ""
    if not last.startswith("specrepro: interrupted"):
        problems.append(f"the last stderr line is {last[:140]!r}, not 'specrepro: interrupted...'")
    return problems


# ------------------------------------------------------------------------------------------- scenarios


@dataclass
class Interrupted:
    """A command stopped by SIGINT, and (for bench) the same command again."""
    first: Outcome
    signalled: bool  # False: it ended (or the wait timed out) before the signal could be sent
    kept: list[bytes] = field(default_factory=list)  # records.jsonl's lines after the interruption
    rerun: Outcome | None = None
    final: list[bytes] = field(default_factory=list)
    out: Path | None = None


def _interrupt(world: World, argv: list[str], tmp: Path, ready, after: float = 0.0) -> tuple[Outcome, bool]:
    tmp.mkdir(parents=True, exist_ok=True)
    cache = tmp / "cache"
    cache.mkdir(exist_ok=True)
    stdout, stderr = tmp / f"{argv[0]}.stdout", tmp / f"{argv[0]}.stderr"
    t0 = time.perf_counter()
    proc = start(world, argv, cache, stdout, stderr)
    try:
        signalled = wait_for(lambda: ready(proc, stdout), proc) and proc.poll() is None
        if signalled and after:
            time.sleep(after)
            signalled = proc.poll() is None
        if signalled:
            proc.send_signal(signal.SIGINT)
        code = finish(proc)
    finally:
        _kill(proc)
    return collected(argv, stdout, stderr, code, t0), signalled


def interrupt_bench(world: World, tmp: Path) -> Interrupted:
    """SIGINT to a 100-prompt bench once records.jsonl has a record; then the same command to the end."""
    out = tmp / "run"
    argv = bench_argv(world, world.many, out)
    first, signalled = _interrupt(world, argv, tmp, lambda proc, stdout: len(record_lines(out)) >= 1)
    kept = record_lines(out)
    rerun = run(world, argv, tmp / "cache")
    return Interrupted(first, signalled, kept, rerun, record_lines(out), out)


def interrupt_bench_problems(s: Interrupted) -> list[str]:
    problems = [] if s.signalled else [f"the run ended before SIGINT could be sent (exit {s.first.exit})"]
    problems += interrupted_problems(s.first)
    last = s.first.lines[-1] if s.first.lines else ""
    if f"kept {len(s.kept)} record" not in last:
        problems.append(f"the last line does not say 'kept {len(s.kept)} record(s)' (records.jsonl has {len(s.kept)})")
    resume = last.split("resume:", 1)[1] if "resume:" in last else ""
    if not ("specrepro bench" in resume and str(s.out) in resume):
        problems.append("no 'resume:' followed by the bench command and its --out")
    if s.rerun.returncode != 0:
        problems.append(f"the rerun's exit status is {s.rerun.exit}: {s.rerun.shown(last=True)}")
    problems += keys_problems(s.out, 100)
    if not set(s.kept) <= set(s.final):
        problems.append("records kept at the interruption were changed or dropped by the rerun")
    return problems


def interrupt_generate(world: World, tmp: Path) -> Interrupted:
    """SIGINT to generate over 100 prompts once the first record is on stdout."""
    argv = ["generate", "--method", "ar", "--target", str(world.target), "--prompts", str(world.many),
            "--dtype", "fp32", "--threads", "1", "--max-new-tokens", "8", "--json"]
    first, signalled = _interrupt(world, argv, tmp, lambda proc, stdout: b"\n" in stdout.read_bytes())
    return Interrupted(first, signalled)


def interrupt_calibrate(world: World, tmp: Path) -> Interrupted:
    """SIGINT to calibrate a second after its model's weights are mapped into it (it is measuring by then; before,
    the signal would land in Python's imports)."""
    argv = ["calibrate", "--target", str(world.target), "--dtype", "fp32", "--threads", "1", "--repeats", "10"]
    weights = str(world.target / "model.safetensors")
    t0 = time.monotonic()

    def measuring(proc, stdout) -> bool:
        try:
            return weights in Path(f"/proc/{proc.pid}/maps").read_text() or time.monotonic() - t0 > 30
        except OSError:
            return False

    first, signalled = _interrupt(world, argv, tmp, measuring, after=1.0)
    return Interrupted(first, signalled)


def plain_interrupt_problems(s: Interrupted) -> list[str]:
    return ([] if s.signalled else [f"the run ended before SIGINT could be sent (exit {s.first.exit})"]) \
        + interrupted_problems(s.first)


@dataclass
class TwoAtOnce:
    a: Outcome
    b: Outcome
    out: Path


def two_benches(world: World, tmp: Path) -> TwoAtOnce:
    """Two identical 100-prompt benches started together on one --out."""
    tmp.mkdir(parents=True, exist_ok=True)
    out = tmp / "run"
    argv = bench_argv(world, world.many, out)
    procs, t0 = [], time.perf_counter()
    try:
        (tmp / "cache").mkdir(exist_ok=True)
        for name in "ab":
            procs.append(start(world, argv, tmp / "cache", tmp / f"{name}.stdout", tmp / f"{name}.stderr"))
        codes = [finish(p) for p in procs]
    finally:
        for p in procs:
            _kill(p)
    a, b = (collected(argv, tmp / f"{n}.stdout", tmp / f"{n}.stderr", c, t0)
            for n, c in zip("ab", codes))
    return TwoAtOnce(a, b, out)


def two_benches_problems(s: TwoAtOnce) -> list[str]:
    """One finishes (0), the other exits 2 at once with one line naming "another process" and the folder."""
    codes = sorted((s.a.returncode if s.a.returncode is not None else -1,
                    s.b.returncode if s.b.returncode is not None else -1))
    if codes != [0, 2]:
        return [f"exit statuses {s.a.exit} and {s.b.exit}, not 0 and 2"] + keys_problems(s.out, 100)
    loser = s.a if s.a.returncode == 2 else s.b
    problems = []
    if len(loser.lines) != 1 or "Traceback" in loser.stderr:
        problems.append(f"the refused bench wrote {len(loser.lines)} lines on stderr, not 1")
    if "another process" not in loser.stderr or str(s.out) not in loser.stderr:
        problems.append(f"the refusal does not name 'another process' and the folder: {loser.shown()!r}")
    return problems + keys_problems(s.out, 100) + folder_problems(s.out)


def finished_run(world: World, tmp: Path) -> tuple[Outcome, Path]:
    """A finished 4-prompt bench (the damage scenarios copy it)."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "cache").mkdir(exist_ok=True)
    out = tmp / "run"
    return run(world, bench_argv(world, world.prompts, out), tmp / "cache"), out


@dataclass
class Repaired:
    """A finished run's records.jsonl altered by hand, then the same bench again."""
    before: bytes  # records.jsonl as altered
    lines: list[bytes]  # the original lines
    rerun: Outcome
    out: Path
    summary_before: dict[str, str] = field(default_factory=dict)


GARBAGE = b"\x00\x00 not a record: the disk lost this line \xff\xfe\n"


def damaged_middle(world: World, tmp: Path, finished: Path) -> Repaired:
    """Line 2 of 4 replaced by garbage."""
    out = tmp / "run"
    shutil.copytree(finished, out)
    lines = record_lines(out)
    altered = b"".join(lines[:1] + [GARBAGE] + lines[2:])
    (out / "records.jsonl").write_bytes(altered)
    rerun = run(world, bench_argv(world, world.prompts, out), tmp / "cache")
    return Repaired(altered, lines, rerun, out)


def damaged_middle_problems(s: Repaired) -> list[str]:
    problems = []
    if s.rerun.returncode != 0 or "Traceback" in s.rerun.stderr:
        problems.append(f"the rerun's exit status is {s.rerun.exit}: {s.rerun.shown(last=True)}")
    if not any("records.jsonl:2" in line for line in s.rerun.lines):
        problems.append("no stderr line names records.jsonl:2")
    copies = sorted(s.out.glob("records.jsonl.damaged-*"))
    if not any(p.read_bytes() == s.before for p in copies):
        problems.append(f"no records.jsonl.damaged-* holds the damaged file's bytes ({len(copies)} copies)")
    final = record_lines(s.out)
    lost = [i + 1 for i, line in enumerate(s.lines) if i != 1 and line not in final]
    if lost:
        problems.append(f"valid records of lines {lost} were not kept byte-identical")
    return problems + keys_problems(s.out, 4) + folder_problems(s.out, damaged=True)


def duplicated(world: World, tmp: Path, finished: Path) -> Repaired:
    """Lines 1 and 2 appended again, as a second unlocked run would have; line 1's copy with other timings."""
    out = tmp / "run"
    shutil.copytree(finished, out)
    summary = summary_row(out)
    lines = record_lines(out)
    other = json.loads(lines[0])
    other["wall_time_s"] *= 100
    other["tokens_per_s"] /= 100
    altered = b"".join(lines) + (json.dumps(other) + "\n").encode() + lines[1]
    (out / "records.jsonl").write_bytes(altered)
    rerun = run(world, bench_argv(world, world.prompts, out), tmp / "cache")
    return Repaired(altered, lines, rerun, out, summary)


def duplicated_problems(s: Repaired) -> list[str]:
    problems = []
    if s.rerun.returncode != 0 or "Traceback" in s.rerun.stderr:
        problems.append(f"the rerun's exit status is {s.rerun.exit}: {s.rerun.shown(last=True)}")
    if not any("duplicate" in line.lower() for line in s.rerun.lines):
        problems.append("no stderr line reports the duplicates")
    first: dict = {}
    for line in record_lines(s.out):
        first.setdefault(next(iter(record_keys([line])), None), line)
    if any(line not in first.values() for line in s.lines):
        problems.append("the first record of each key is not the one kept")
    try:
        after = summary_row(s.out)
    except OSError:
        return problems + ["no summary.csv"]
    if after.get("n") != "4":
        problems.append(f"summary.csv n = {after.get('n')}, not 4")
    try:
        if abs(float(after["wall_time_s"]) - float(s.summary_before["wall_time_s"])) > 1e-9 * float(
                s.summary_before["wall_time_s"]):
            problems.append("summary.csv's wall_time_s counts a duplicate")
    except (KeyError, ValueError):
        problems.append("summary.csv has no wall_time_s")
    return problems


def limit_two(world: World, tmp: Path) -> tuple[Outcome, Path]:
    """bench --limit 2 over the 4 prompts."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "cache").mkdir(exist_ok=True)
    out = tmp / "run"
    return run(world, bench_argv(world, world.prompts, out, "--limit", "2"), tmp / "cache"), out


def limit_two_problems(outcome: Outcome, out: Path) -> list[str]:
    problems = [] if outcome.returncode == 0 else [f"exit status {outcome.exit}: {outcome.shown(last=True)}"]
    if len(record_lines(out)) != 2:
        problems.append(f"{len(record_lines(out))} records, not 2")
    if (out / "summary.csv").exists() and summary_row(out).get("n") != "2":
        problems.append(f"summary.csv n = {summary_row(out).get('n')}, not 2")
    return problems + keys_problems(out, 2)


@dataclass
class Corrected:
    failed: Outcome
    left: bool  # the failed bench left its --out behind
    rerun: Outcome
    out: Path


def corrected_rerun(world: World, tmp: Path) -> Corrected:
    """A bench whose 2nd prompt is too long, then the prompts file corrected and the same command again."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "cache").mkdir(exist_ok=True)
    prompts, out = tmp / "prompts.jsonl", tmp / "run"
    prompts.write_text(jsonl("Say hello.", " ".join(["word"] * 700)))
    argv = bench_argv(world, prompts, out)
    failed = run(world, argv, tmp / "cache")
    left = out.exists()
    prompts.write_text(jsonl("Say hello.", "Say goodbye."))
    return Corrected(failed, left, run(world, argv, tmp / "cache"), out)


def corrected_problems(s: Corrected) -> list[str]:
    problems = []
    if s.failed.returncode != 2 or len(s.failed.lines) != 1:
        problems.append(f"the bad bench: exit {s.failed.exit}, {len(s.failed.lines)} stderr lines")
    if s.left:
        problems.append("the bad bench left its --out folder")
    if s.rerun.returncode != 0:
        problems.append(f"the corrected rerun: exit {s.rerun.exit}: {s.rerun.shown(last=True)}")
    return problems + keys_problems(s.out, 2)


def command(argv: list[str]) -> str:
    """The command line a user would type to see it again."""
    return "python -m specrepro " + shlex.join(argv)
