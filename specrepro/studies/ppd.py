"""The measuring code of ``notebooks/ppd_parallel_prompt_decoding.ipynb`` (PPD paper, seed 002) that reads the
bench records and the zoo's training records."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def throughput_by_suite(records: Sequence[dict], suites: dict[str, Sequence[str]],
                        variants: Sequence[str] = ("ar", "ppd")) -> list[dict]:
    """Fig. 5: per suite (``suites``: name -> its prompt ids), each variant's pooled tokens/s over that suite's
    records and PPD's speedup over plain decoding."""
    table = []
    for suite, ids in suites.items():
        row = {"suite": suite}
        for v in variants:
            recs = [r for r in records if r["method"] == v and r["prompt_id"] in set(ids)]
            row[f"{v}_tok_s"] = sum(r["new_tokens"] for r in recs) / sum(r["wall_time_s"] for r in recs)
        row["ppd_speedup"] = row["ppd_tok_s"] / row["ar_tok_s"]
        table.append(row)
    return table


def mean_input_length(records: Sequence[dict], label: str) -> float:
    """Mean number of positions a tree step of ``label`` feeds the target (the prefill left out; 1 without any)."""
    return float(np.mean([n for r in records if r["method"] == label for n in r["input_lengths"][1:]] or [1]))


def distance_accuracy(record: dict) -> dict[str, float]:
    """The four numbers the paper's ablation tables print: top-1 and top-5 accuracy at distances 1 and 2, from a
    training record's ``held_out_topk_accuracy`` (distance -> accumulative top-k list)."""
    a = np.array(list(record["held_out_topk_accuracy"].values()))  # [distance, k]
    return {"@1 top-1": a[0, 0], "@1 top-5": a[0, 4], "@2 top-1": a[1, 0], "@2 top-5": a[1, 4]}
