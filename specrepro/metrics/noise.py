"""Bench records as paired matrices: one value per run (a method at one seed) and prompt.

A quality or speed comparison between methods is paired by prompt and seed, so that a prompt's own difficulty and a
seed's luck cancel in the difference; :func:`run_matrix` lays the records out that way, keeping only the prompts with
a value in every run. The claims made from them are decided by ``specrepro.metrics.verdict`` (a paired-bootstrap
interval against a threshold), never by the range of single runs.
"""
from __future__ import annotations

import math
from typing import Callable, Hashable, Mapping, Sequence

import numpy as np

__all__ = ["mean_nll", "run_matrix"]


def mean_nll(record: Mapping) -> float | None:
    """Mean per-token NLL under the target of one bench record (log of its perplexity); None if it has none."""
    n = record.get("nll_tokens")
    return record["nll_sum"] / n if n else None


def run_matrix(records: Sequence[Mapping], methods: Sequence[str], value: Callable[[Mapping], float | None]
               ) -> tuple[list[tuple[str, int]], list[Hashable], np.ndarray]:
    """Bench records as runs × prompts: (runs [(method, repeat)], prompt ids, values [R, P]).

    A run is one method at one repeat (seed); its rows are ordered as ``methods`` then repeat. Only prompts with
    a value in every run are kept (an empty generation has no NLL), so that every comparison stays paired.
    Raises ValueError when a method has no records or no prompt is left."""
    table: dict[tuple[str, int], dict[Hashable, float | None]] = {}
    for r in records:
        if r["method"] in methods:
            table.setdefault((r["method"], r["repeat"]), {})[r["prompt_id"]] = value(r)
    missing = [m for m in methods if not any(run[0] == m for run in table)]
    if missing:
        raise ValueError(f"no records for {missing}")
    runs = sorted(table, key=lambda run: (list(methods).index(run[0]), run[1]))
    prompts = sorted(set.intersection(*(set(table[run]) for run in runs)), key=str)
    prompts = [p for p in prompts if all(table[run][p] is not None and math.isfinite(table[run][p]) for run in runs)]
    if not prompts:
        raise ValueError("no prompt has a value in every run")
    return runs, prompts, np.array([[table[run][p] for p in prompts] for run in runs], dtype=float)
