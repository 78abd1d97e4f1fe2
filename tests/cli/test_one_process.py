"""Issue 28: a run folder belongs to one process. Two benches started together on one --out: one runs to the end,
the other is refused at once in one line naming "another process" and the folder; no record is written twice."""
from __future__ import annotations

from tests.cli.harness import two_benches, two_benches_problems


def test_two_benches_on_one_out(world, tmp_path):
    """Exit statuses 0 and 2; records.jsonl then holds each of the 100 keys once, the folder only a run's files."""
    s = two_benches(world, tmp_path)
    problems = two_benches_problems(s)
    assert not problems, ("\n".join(problems) + f"\n--- stderr a:\n{s.a.stderr[-1500:]}"
                          f"\n--- stderr b:\n{s.b.stderr[-1500:]}")
