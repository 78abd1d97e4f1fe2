"""What every command line shares: argument types, a parser whose usage errors are one line, the check that an
output path can be written, and interruption as a normal event.

A bad value is one line on stderr and exit status 2, never a traceback, and it is caught when the arguments are
parsed, before any model loads: a missing ``--prompts`` file fails in a second, not after the device profile, and
``--threads 0`` never reaches ``torch.set_num_threads``. Ctrl-C (SIGINT) is one line saying what was kept and how to
go on, with exit status 130 (``run_command``).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import sys
import tempfile
from pathlib import Path
from typing import Callable

INTERRUPTED = 130  # 128 + SIGINT, the shell's status for a command stopped by Ctrl-C


class Parser(argparse.ArgumentParser):
    """argparse, with a usage error said in one line (``prog: error: ...``) instead of after the whole usage text;
    subcommands' parsers are of this class too."""

    def error(self, message: str):
        print(f"{self.prog}: error: {message} (--help for usage)", file=sys.stderr)
        sys.exit(2)


def existing_file(value: str) -> str:
    """A path to a file that exists (an input such as ``--prompts`` or ``--ngram-table``)."""
    return _existing(value, folder=False)


def existing_folder(value: str) -> str:
    """A path to a folder that exists (an input such as a training data folder)."""
    return _existing(value, folder=True)


def _existing(value: str, folder: bool) -> str:
    path = Path(value).expanduser()
    want, other = ("folder", "file") if folder else ("file", "folder")
    if not path.exists():
        raise argparse.ArgumentTypeError(f"no such {want}: {value}")
    if path.is_dir() != folder:
        raise argparse.ArgumentTypeError(f"is a {other}, not a {want}: {value}")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"cannot be read: {value}")
    return str(path)


def _int(value: str, low: int, what: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {value!r}") from None
    if number < low:
        raise argparse.ArgumentTypeError(f"expected {what}, got {number}")
    return number


def positive_int(value: str) -> int:
    """An integer >= 1 (``--max-new-tokens``, ``--repeats``, ``--limit``)."""
    return _int(value, 1, "an integer >= 1")


def non_negative_int(value: str) -> int:
    """An integer >= 0 (``--warmup-tokens``: 0 turns the warm-up off)."""
    return _int(value, 0, "an integer >= 0")


def machine_cores() -> int:
    """The cores this process may run on (its CPU affinity, which a container or ``taskset`` may narrow)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def threads(value: str) -> int:
    """``--threads``: 1 to the machine's cores. More threads than cores make every parallel region wait for
    descheduled threads (``--threads 999`` ran about 40x slower than 2 on 2 cores)."""
    cores = machine_cores()
    number = _int(value, 1, f"an integer from 1 to {cores} (this machine's cores)")
    if number > cores:
        raise argparse.ArgumentTypeError(f"expected an integer from 1 to {cores} (this machine's cores), got {number}")
    return number


def device(value: str) -> str:
    """``--device``: cpu, or cuda[:N] where torch sees that GPU."""
    import torch
    try:
        dev = torch.device(value)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"unknown device {value!r}; choose cpu or cuda") from None
    if dev.type not in ("cpu", "cuda"):
        raise argparse.ArgumentTypeError(f"{value!r} is not a device this package runs on; choose cpu or cuda")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
            raise argparse.ArgumentTypeError(f"{value}: no CUDA device here (torch {torch.__version__}, {build})")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise argparse.ArgumentTypeError(f"{value}: torch sees {torch.cuda.device_count()} CUDA device(s)")
    return value


def check_writable(path: str | Path, flag: str, folder: bool = True) -> Path:
    """One clear error (ValueError naming ``flag``) unless ``path`` can be made a folder (``folder``) or a file that
    this process can write, proved by creating and removing a probe file where it would go. Nothing is left."""
    path = Path(path).expanduser()
    if path.exists() and path.is_dir() != folder:
        have, want = ("file", "folder") if folder else ("folder", "file")
        raise ValueError(f"{flag} {path}: is a {have}, not a {want}")
    probe_in = path if folder and path.is_dir() else path.parent
    while not probe_in.exists():
        probe_in = probe_in.parent
    if not probe_in.is_dir():
        raise ValueError(f"{flag} {path}: {probe_in} is a file, so nothing can be written under it")
    try:
        fd, probe = tempfile.mkstemp(prefix=".specrepro-probe-", dir=probe_in)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ValueError(f"{flag} {path}: cannot be written ({err.strerror} in {probe_in})") from None
    return path


def resume_command(argv: list[str], prog: str = "python -m specrepro") -> str:
    """The command line that runs ``argv`` again, quoted for a shell."""
    return shlex.join(prog.split() + list(argv))


def run_command(work: Callable[[], int], interrupted: Callable[[], str]) -> int:
    """``work()``, with bad input (ValueError) as one line and exit status 2, and Ctrl-C (KeyboardInterrupt) as one
    line, ``interrupted()``: what was kept and the command that goes on from there, with exit status 130."""
    try:
        return work()
    except ValueError as err:  # bad input: one clear line, no traceback
        print(f"specrepro: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # on a line of its own: a progress line ("round 3/11", "^C") may be open
        print(f"\nspecrepro: interrupted: {interrupted()}", file=sys.stderr)
        return INTERRUPTED


@contextlib.contextmanager
def interrupted_while_starting(prog: str = "python -m specrepro"):
    """Around a command's slow imports (torch, transformers): a Ctrl-C there is held until they finish (raised inside
    torch's C++ initialisation it would abort the process), then ends the command with one line and status 130."""
    held: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        print(f"\nspecrepro: interrupted: nothing was done (it was starting); run it again: "
              f"{resume_command(sys.argv[1:], prog)}", file=sys.stderr)
        sys.exit(INTERRUPTED)


def run_main(main: Callable[[], object], prog: str) -> None:
    """The entry of a training command (``python -m specrepro.training.medusa``): bad input is one line and status 2,
    and Ctrl-C one line and status 130, saying that what it finished is reused when the same command runs again."""
    sys.exit(run_command(lambda: main() or 0, lambda: (
        f"what it finished in its --out (data shards, checkpoints, cells) is reused by the same command: "
        f"{resume_command(sys.argv[1:], prog)}")))
