"""What every command line shares: argument types and a parser whose usage errors are one line.

A bad value is one line on stderr and exit status 2, never a traceback, and it is caught when the arguments are
parsed, before any model loads: a missing ``--prompts`` file fails in a second, not after the device profile, and
``--threads 0`` never reaches ``torch.set_num_threads``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


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
    return str(path)


def positive_int(value: str) -> int:
    """An integer >= 1 (``--threads``)."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {number}")
    return number
