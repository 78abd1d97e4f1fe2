"""Fixtures of the command-line fault-injection tests: the tiny model folders and prompts files (built once, by
this checkout's package), the bad-input cases run in parallel, and a finished bench for the damage tests."""
from __future__ import annotations

import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.cli.harness import build_world, finished_run, run_case

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def world(tmp_path_factory):
    return build_world(ROOT, tmp_path_factory.mktemp("world"), sys.executable)


@pytest.fixture(scope="session")
def bad_input_runs(request, world, tmp_path_factory):
    """{case name: (future Outcome, its folder)} for the selected cases of test_bad_input, started together on as
    many workers as cores: each is a fresh interpreter importing torch, seconds of CPU before it can say a word."""
    cases = {item.callspec.params["case"].name: item.callspec.params["case"] for item in request.session.items
             if hasattr(item, "callspec") and "case" in item.callspec.params}
    pool = ThreadPoolExecutor(max_workers=max(2, len(os.sched_getaffinity(0))))
    runs = {}
    for name, case in cases.items():
        if world.unmet(case) is None:
            tmp = tmp_path_factory.mktemp(re.sub(r"[^\w.-]+", "-", name)[:40])
            runs[name] = (pool.submit(run_case, case, world, tmp), tmp)
    yield runs
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="session")
def finished(world, tmp_path_factory):
    """A finished 4-prompt bench's folder (tests copy it before altering it)."""
    outcome, out = finished_run(world, tmp_path_factory.mktemp("finished"))
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    return out
