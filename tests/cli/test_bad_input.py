"""Issue 28: every bad input of tests/cli/cases.py is exit status 2 and one line on stderr naming the argument or the
file and line, with no traceback, nothing on stdout and nothing half-written; and the two runs that check --limit
and a bench after bad input.

Each case runs through ``specrepro.run.commands.main`` in this interpreter (a process of its own costs a torch import,
~7 s of CPU, per case); a sample of them also runs as a user runs it, ``python -m specrepro ...`` in a fresh
process, and ``python -m tests.cli.report`` runs every case that way."""
from __future__ import annotations

import pytest

from tests.cli.cases import CASES
from tests.cli.harness import (bad_input_problems, command, corrected_problems, corrected_rerun, limit_two,
                               limit_two_problems, run, run_case, run_in_process)

# One case per way of failing: an argument type (argparse), a whole-run check after the tokenizer, an --out probe.
IN_A_PROCESS = ("generate --threads 999", "bench --prompts 2nd prompt too long", "calibrate --out under /proc")


def check(case, world, tmp_path, runner) -> None:
    if world.unmet(case):
        pytest.skip(world.unmet(case))
    outcome = run_case(case, world, tmp_path, runner=runner)
    problems = bad_input_problems(case, outcome, world, tmp_path)
    assert not problems, "\n".join(problems) + f"\n--- {command(outcome.argv)}\n--- stderr:\n{outcome.stderr[-3000:]}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_one_line_and_exit_2(case, world, tmp_path):
    """The case's error line says what the case expects, and its folder (--out, inputs, cache) is unchanged."""
    check(case, world, tmp_path, run_in_process)


@pytest.mark.parametrize("case", [c for c in CASES if c.name in IN_A_PROCESS], ids=list(IN_A_PROCESS))
def test_bad_input_in_a_process_of_its_own(case, world, tmp_path):
    """The same, as a user runs it: the exit status of the process, and no traceback from anything outside main."""
    check(case, world, tmp_path, run)


def test_limit_2_runs_exactly_2_prompts(world, tmp_path):
    """--limit is applied once: 2 of the 4 prompts, each once."""
    outcome, out = limit_two(world, tmp_path)
    problems = limit_two_problems(outcome, out)
    assert not problems, "\n".join(problems) + f"\n--- stderr:\n{outcome.stderr[-3000:]}"


def test_a_bench_refused_for_a_long_prompt_leaves_nothing_in_the_way(world, tmp_path):
    """A too-long 2nd prompt fails before --out is made, so the corrected prompts file runs into the same --out."""
    s = corrected_rerun(world, tmp_path)
    problems = corrected_problems(s)
    assert not problems, "\n".join(problems) + f"\n--- stderr:\n{s.failed.stderr[-1500:]}\n{s.rerun.stderr[-1500:]}"
