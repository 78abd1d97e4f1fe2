"""Fixtures of the command-line fault-injection tests: the tiny model folders and prompts files (built once, by
this checkout's package) and a finished bench for the damage tests."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.cli.harness import build_world, finished_run

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def world(tmp_path_factory):
    return build_world(ROOT, tmp_path_factory.mktemp("world"), sys.executable)


@pytest.fixture(scope="session")
def finished(world, tmp_path_factory):
    """A finished 4-prompt bench's folder (tests copy it before altering it)."""
    outcome, out = finished_run(world, tmp_path_factory.mktemp("finished"))
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    return out
