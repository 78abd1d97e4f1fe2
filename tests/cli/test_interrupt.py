"""Issue 28: SIGINT (a real signal to a real process) is a normal event for generate, bench and calibrate: exit
status 130, no traceback, a last stderr line "specrepro: interrupted ..."; bench's says what it kept and how to
resume, and resuming measures each (method, prompt, repeat) exactly once."""
from __future__ import annotations

from tests.cli.harness import (interrupt_bench, interrupt_bench_problems, interrupt_calibrate, interrupt_generate,
                               plain_interrupt_problems)


def test_bench_interrupted_then_resumed(world, tmp_path):
    """SIGINT after the first record: "kept N record(s)" with N the lines of records.jsonl, a resume command, and
    running it again finishes the 100 prompts with the kept records untouched."""
    s = interrupt_bench(world, tmp_path)
    problems = interrupt_bench_problems(s)
    assert not problems, "\n".join(problems) + f"\n--- stderr:\n{s.first.stderr[-2000:]}\n{s.rerun.stderr[-1500:]}"


def test_generate_interrupted(world, tmp_path):
    """SIGINT after the first record is printed."""
    s = interrupt_generate(world, tmp_path)
    problems = plain_interrupt_problems(s)
    assert not problems, "\n".join(problems) + f"\n--- stderr:\n{s.first.stderr[-2000:]}"


def test_calibrate_interrupted(world, tmp_path):
    """SIGINT while calibrate measures."""
    s = interrupt_calibrate(world, tmp_path)
    problems = plain_interrupt_problems(s)
    assert not problems, "\n".join(problems) + f"\n--- stderr:\n{s.first.stderr[-2000:]}"
