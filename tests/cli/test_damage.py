"""Issue 28: damage in records.jsonl is reported, never silently repaired. A garbage line in the middle costs one
record, not every record after it; duplicate keys (an old unlocked run's) are reported and counted once."""
from __future__ import annotations

from tests.cli.harness import damaged_middle, damaged_middle_problems, duplicated, duplicated_problems


def test_a_garbage_middle_line_costs_one_record(world, finished, tmp_path):
    """The rerun names records.jsonl:2, keeps the damaged file's bytes in records.jsonl.damaged-*, keeps lines 1, 3
    and 4 byte-identical and measures only prompt 2 again."""
    s = damaged_middle(world, tmp_path, finished)
    problems = damaged_middle_problems(s)
    assert not problems, "\n".join(problems) + f"\n--- stderr:\n{s.rerun.stderr[-3000:]}"


def test_duplicate_keys_are_reported_and_counted_once(world, finished, tmp_path):
    """Two keys written twice (one copy with 100x the time): reported, the first of each kept, summary.csv as
    before the duplicates (n = 4, the same total time)."""
    s = duplicated(world, tmp_path, finished)
    problems = duplicated_problems(s)
    assert not problems, "\n".join(problems) + f"\n--- stderr:\n{s.rerun.stderr[-3000:]}"
