"""95% intervals for the numbers a notebook's measured tables print, computed where the records are, so that the
reproduction report decides each measured row on an interval (``notebooks/claims/``), never on point estimates.

- ``speedup_interval``: one method's pooled tokens/s over another's on the prompts both ran in one bench, with the
  paired bootstrap over prompts and seeds (``core.stats.paired_bootstrap``);
- ``alpha_gap``: one draft's pooled acceptance α minus another's on the same prompts and seeds, with the same
  paired bootstrap;
- ``share_gap``: the difference of two shares (accuracies) measured on the same held-out units, with a normal
  interval that treats the two as independent and counts each unit once (conservative: see its docstring);
- ``bench_records``: the records a bench folder holds (``records.jsonl``), for the two above.

Every function returns plain columns (``ratio``/``low95``/``high95``, ``gap``/``gap_low95``/``gap_high95``) that a
CSV row takes as they are.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

import numpy as np

from ..core import stats
from ..core.record import tested
from .common import task_arrays


def speedup_interval(records: Sequence[dict], label: str, baseline: str, seed: int = 0,
                     prompt_ids: Sequence[str] | None = None) -> dict:
    """``label``'s pooled tokens/s over ``baseline``'s on the prompts of ``prompt_ids`` (default: every prompt
    ``label`` ran), with its 95% paired bootstrap interval over prompts and seeds (each prompt's and seed's runs of
    the two methods resampled together): {"ratio", "low95", "high95", "prompts"}. Below 2 prompts the interval is
    None: one prompt cannot say how the ratio varies."""
    ids = list(prompt_ids) if prompt_ids is not None else list(
        dict.fromkeys(r["prompt_id"] for r in records if r["method"] == label))
    if not ids:
        raise ValueError(f"no record of {label!r} to compare with {baseline!r}")
    x = task_arrays(records, ids, (label, baseline))  # [P, S, 2, 2]
    low, high = stats.paired_bootstrap(x, stats.pooled_ratio, seed=seed) if len(ids) > 1 else (None, None)
    return {"ratio": stats.pooled_ratio(x), "low95": low, "high95": high, "prompts": len(ids)}


def alpha_gap(records: Sequence[dict], a: str, b: str, seed: int = 0) -> dict:
    """α of method ``a`` minus α of method ``b`` (each pooled: accepted over tested draft tokens, ``core.record``), on
    every prompt and seed both ran, with its 95% paired bootstrap interval over prompts and seeds:
    {"gap", "gap_low95", "gap_high95", "prompts"} (no interval below 2 prompts)."""
    by_key = {(r["method"], r["prompt_id"], r["repeat"]): r for r in records}
    repeats = sorted({r["repeat"] for r in records})
    ids = [p for p in dict.fromkeys(r["prompt_id"] for r in records)
           if all((m, p, s) in by_key for m in (a, b) for s in repeats)]
    if not ids:
        raise ValueError(f"no prompt that both {a!r} and {b!r} ran")
    counts = lambda r: (sum(r["accept_lengths"]), tested(r["accept_lengths"], r["proposed_lengths"]))
    x = np.array([[[counts(by_key[m, p, s]) for m in (a, b)] for s in repeats] for p in ids], float)  # [P, S, 2, 2]

    def gap(sample: np.ndarray) -> float:
        sums = sample.reshape(-1, 2, 2).sum(axis=0)  # (a, b) x (accepted, tested)
        return float(sums[0, 0] / sums[0, 1] - sums[1, 0] / sums[1, 1])
    low, high = stats.paired_bootstrap(x, gap, seed=seed) if len(ids) > 1 else (None, None)
    return {"gap": gap(x), "gap_low95": low, "gap_high95": high, "prompts": len(ids)}


def bench_records(folder: str | Path) -> list[dict]:
    """The records of one bench folder (``run_bench``'s ``records.jsonl``; a sweep point's ``T{T}_g{γ}``)."""
    path = Path(folder) / "records.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"no records.jsonl in {folder}: run the bench first")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def share_gap(a: float, b: float, units: int) -> dict:
    """a − b for two shares in [0, 1] measured on the same ``units`` held-out units (conversations), with a 95%
    normal interval: {"gap", "gap_low95", "gap_high95", "units"}.

    Conservative on both counts. The positions a share is counted over sit in ``units`` conversations and are
    correlated within one, so the effective number of independent positions is at least the number of
    conversations (equality when positions within a conversation agree perfectly): each share's variance is taken as
    s(1 − s)/units. And the two shares are scored on the same conversations, which correlates them positively, so
    the variance of their difference is at most the sum of the two that this interval uses."""
    if units < 1:
        raise ValueError(f"units must be >= 1, got {units}")
    if not (0 <= a <= 1 and 0 <= b <= 1):
        raise ValueError(f"shares must lie in [0, 1], got {a} and {b}")
    low, high = stats.normal_interval(a - b, math.sqrt((a * (1 - a) + b * (1 - b)) / units))
    return {"gap": a - b, "gap_low95": low, "gap_high95": high, "units": units}
