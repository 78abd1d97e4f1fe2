"""Issue 28: every bad input of tests/cli/cases.py, run as a user runs it (``python -m specrepro ...`` in a fresh
process), is exit status 2 and one line on stderr naming the argument or the file and line, with no traceback,
nothing on stdout and nothing half-written; and the two runs that check --limit and a bench after bad input."""
from __future__ import annotations

import pytest

from tests.cli.cases import CASES
from tests.cli.harness import (bad_input_problems, command, corrected_problems, corrected_rerun, limit_two,
                               limit_two_problems)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_one_line_and_exit_2(case, world, bad_input_runs):
    """The case's error line says what the case expects, and its folder (--out, inputs, cache) is unchanged."""
    if world.unmet(case):
        pytest.skip(world.unmet(case))
    future, tmp = bad_input_runs[case.name]
    outcome = future.result()
    problems = bad_input_problems(case, outcome, world, tmp)
    assert not problems, "\n".join(problems) + f"\n--- {command(outcome.argv)}\n--- stderr:\n{outcome.stderr[-3000:]}"


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
