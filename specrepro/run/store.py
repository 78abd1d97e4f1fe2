"""A bench's run folder: its lock and its record store.

``DIR/.lock`` is held (``flock``) by the one process running a bench in ``DIR`` (:class:`RunFolder`), and
``DIR/records.jsonl`` keeps one record per (variant, prompt_id, repeat) (:func:`record_key`), appended and flushed
as each finishes, so a restart skips those already written. A line that is not a record, or repeats one, is named
on stderr and the file as found kept beside it (:func:`repair_records`); only the missing records are measured
again.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
import time
from pathlib import Path

from ..core.cli import check_writable
from ..core.provenance import atomic_write_bytes

LOCK = ".lock"  # in a run folder: held (flock) by the process running a bench there


def read_records(out: Path) -> tuple[list[bytes], list[str]]:
    """The lines of ``out``/records.jsonl that are records, in order, each (method, prompt_id, repeat) once, and what
    is wrong with the others, naming their line: not JSON, not a record, cut short, or a key written twice."""
    path = Path(out) / "records.jsonl"
    if not path.exists():
        return [], []
    good, problems, seen = [], [], set()
    with open(path, "rb") as handle:
        for n, line in enumerate(handle, start=1):
            try:
                if not line.endswith(b"\n"):
                    raise ValueError("cut short")
                key = record_key(json.loads(line))
            except (ValueError, KeyError, TypeError) as err:
                problems.append(f"records.jsonl:{n} is not a record ({type(err).__name__}: {str(err)[:60]})")
                continue
            if key in seen:
                problems.append(f"records.jsonl:{n} repeats the record of {key}")
                continue
            seen.add(key)
            good.append(line)
    return good, problems


def load_records(out: Path) -> list[dict]:
    """The records written so far, each (method, prompt_id, repeat) once; the file is not changed."""
    return [json.loads(line) for line in read_records(out)[0]]


def repair_records(out: Path) -> list[dict]:
    """The records, with damage reported, never silently repaired: when a line is not a record (or repeats one),
    the file as found is moved aside to records.jsonl.damaged-<time>, the valid records are kept byte for byte, and
    each problem is said on stderr; the missing records are then measured again."""
    good, problems = read_records(out)
    if problems:
        path = Path(out) / "records.jsonl"
        aside = path.with_name(f"records.jsonl.damaged-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
        shutil.copy2(path, aside)
        atomic_write_bytes(path, b"".join(good))
        for line in problems[:5] + ([f"and {len(problems) - 5} more"] if len(problems) > 5 else []):
            print(f"specrepro bench: {line}", file=sys.stderr)
        print(f"specrepro bench: kept the {len(good)} valid records of {path}; the file as found is {aside.name}; "
              f"the missing records are measured again", file=sys.stderr)
    return [json.loads(line) for line in good]


class RunFolder:
    """A bench's ``--out`` folder, held by one process: made if missing and locked (an exclusive ``flock`` on
    DIR/.lock, the holder's pid in it) before anything slow, so a second bench there is refused at once. A folder
    this call made (with any parents it made) that kept no record is removed again if the call fails or is
    interrupted, so nothing half-written stays."""

    def __init__(self, out: Path):
        self.out, self.made, self.handle = Path(out), None, None

    def __enter__(self) -> "RunFolder":
        check_writable(self.out, "--out")
        if not self.out.exists():
            made = next(p for p in [self.out, *self.out.parents] if p.parent.exists())  # the top folder made
            try:
                self.out.mkdir(parents=True)
                self.made = made
            except FileExistsError:  # another bench made it at the same moment: theirs, locked or about to be
                pass
        try:
            self.lock()
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def lock(self) -> None:
        handle = open(self.out / LOCK, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.made = None  # the folder is the holder's, whoever made it: never removed from under it
            handle.seek(0)
            pid = handle.read().strip()
            handle.close()
            raise ValueError(f"--out {self.out}: another process{f' (pid {pid})' if pid else ''} is running a bench "
                             f"there; wait for it to finish, or use another --out") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self.handle = handle

    def __exit__(self, kind, err, tb) -> None:
        if kind is not None and self.made is not None and not read_records(self.out)[0]:
            shutil.rmtree(self.made, ignore_errors=True)
        if self.handle is not None:
            self.handle.close()  # releases the lock
            self.handle = None


def record_key(record: dict) -> tuple[str, str, int]:
    """What a record is kept under, once per run folder: (variant label, prompt id, repeat)."""
    return record["method"], record["prompt_id"], record["repeat"]

