"""specrepro.studies.show: the rows a notebook prints under a table."""
from __future__ import annotations

from specrepro.studies.show import rounded, show_rows


def test_rounded_keeps_the_rows_order_and_rounds_floats_only():
    row = {"variant": "ar", "tokens_per_s": 12.34567, "n": 3, "speedup": 1.0004, "note": None}
    assert rounded(row) == {"variant": "ar", "tokens_per_s": 12.346, "n": 3, "speedup": 1.0, "note": None}
    assert list(rounded(row, keys=("speedup", "tokens_per_s"))) == ["tokens_per_s", "speedup"]  # the row's order
    assert rounded(row, 1, drop=("note", "n")) == {"variant": "ar", "tokens_per_s": 12.3, "speedup": 1.0}


def test_show_rows_prints_one_line_a_row_after_its_prefix(capsys):
    rows = [{"variant": "ar", "x": 0.12345}, {"variant": "speculative:g4", "x": 2.0}]
    show_rows(rows, prefix="{variant:<16}", keys=("x",))
    show_rows(rows[:1], digits=1)
    assert capsys.readouterr().out.splitlines() == ["ar               {'x': 0.123}", "speculative:g4   {'x': 2.0}",
                                                    "{'variant': 'ar', 'x': 0.1}"]
