"""How the figure notebooks print a table's rows under it: one line a row, floats rounded, some columns picked.

The saved table (``Artifacts.table``) keeps every digit; these lines are for reading the run as it goes.
"""
from __future__ import annotations

from collections.abc import Collection, Iterable


def rounded(row: dict, digits: int = 3, keys: Collection[str] | None = None, drop: Collection[str] = ()) -> dict:
    """``row`` with its floats rounded to ``digits``, keeping only ``keys`` (when given) and leaving out ``drop``,
    columns in the row's own order."""
    return {k: (round(v, digits) if isinstance(v, float) else v) for k, v in row.items()
            if (keys is None or k in keys) and k not in drop}


def show_rows(rows: Iterable[dict], digits: int = 3, keys: Collection[str] | None = None, drop: Collection[str] = (),
              prefix: str | None = None) -> None:
    """Print each row as :func:`rounded` makes it, one line a row, after ``prefix.format(**row)`` when given (for
    example ``"{variant:<22}"``: the row's variant, padded, before its numbers)."""
    for row in rows:
        shown = rounded(row, digits, keys, drop)
        if prefix is None:
            print(shown)
        else:
            print(prefix.format(**row), shown)
