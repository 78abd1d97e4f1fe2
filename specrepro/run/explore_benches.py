"""The committed benches' measured points, and which methods each part of the explorer covers.

The method lists derive from the registry (``specrepro.methods.REGISTRY``), so that a method added there is placed
on the right theory figure and offered by the run panel without a change here:

- the chain theory (E[tokens] = (1 − α^{γ+1}) / (1 − α), the speedup surface) predicts our speculative loop's
  methods that draft one chain of γ tokens per step (no token tree, no m chains) verified by the generic rule, whose
  α is speculative sampling's (a method with its own rule, SpecTr, MJSD, BiLD, mentored, accepts by another law);
- the tree theory (τ against tree size) predicts every method that drafts a token tree (``Method.token_tree``:
  it declares a tree sizing);
- the run panel runs AR and those methods whose drafter the offline pair gives: the draft model, nothing at all,
  or the zoo's self-drafting weights for the offline target (no n-gram table is shipped).
"""
from __future__ import annotations

import csv
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from ..engine.models import SELF_DRAFTS
from ..methods import REGISTRY, Loop, Method, Needs
from .committed import bench_dir
from .explore_costs import Controls

TARGET, DRAFT = "smollm2-135m-instruct", "smollm2-135m-draft"  # the offline pair (make models)


def _chain(m: Method) -> bool:
    return m.loop is Loop.SPECULATIVE and not m.token_tree and m.nodes is None and m.rule is None


def _runs_offline(m: Method) -> bool:
    """Whether the offline pair gives what its drafter is built from (AR needs nothing)."""
    return (m.needs in (Needs.NOTHING, Needs.DRAFT_MODEL)
            or TARGET in SELF_DRAFTS.get(m.needs.value, {}))  # self-drafting weights in the zoo for the target


# bench rows whose α and γ the chain theory predicts
CHAIN_METHODS = tuple(n for n, m in REGISTRY.items() if _chain(m))
# bench rows whose tree size and τ the tree theory predicts
TREE_METHODS = tuple(n for n, m in REGISTRY.items() if m.token_tree)
# what the run panel offers
RUN_METHODS = tuple(n for n, m in REGISTRY.items()
                    if m.loop is Loop.AR or ((_chain(m) or m.token_tree) and _runs_offline(m)))


@dataclass(frozen=True)
class BenchPoint:
    bench: str  # the folder under figures/bench/
    method: str  # the bench's label, e.g. "speculative:gauto"
    base: str  # the method family, e.g. "speculative"
    dtype: str
    device: str  # e.g. "cpu: AMD EPYC (2 logical cores)"
    temperature: float
    alpha: float | None
    speedup: float  # measured tokens/s over AR, same prompts, same run
    predicted: float | None  # the chain theory at the point's own α, mean γ, c and β (the bench's column)
    tokens_per_call: float
    mean_proposed: float | None  # mean γ (chain) or tree depth offered
    tree_size: float | None  # mean nodes scored per call (token-tree methods)
    batch_size: int = 1  # prompts decoded at once (bench --batch-size); speedup then over batched AR at that B

    def label(self) -> str:
        batch = f", B = {self.batch_size}" if self.batch_size > 1 else ""
        return f"{self.method} ({self.dtype}), {self.device}, T = {self.temperature:g}{batch}"


def _float(text: str) -> float | None:
    return float(text) if text not in ("", "None", "nan") else None


def _bench_rows(folder: Path | None):
    """(bench folder, its config, its device, one summary.csv row) for every row of every committed bench
    (``<folder>/<name>/summary.csv`` beside its config and provenance; ``folder`` defaults to
    ``committed.bench_dir()``), in bench then row order."""
    folder = bench_dir() if folder is None else Path(folder)
    for bench in sorted(p for p in folder.glob("*") if (p / "summary.csv").is_file()):
        config = json.loads((bench / "config.json").read_text())
        sessions = json.loads((bench / "provenance.json").read_text()).get("sessions", [{}])
        device = sessions[0].get("device_name", "unknown device")
        with (bench / "summary.csv").open() as handle:
            for row in csv.DictReader(handle):
                yield bench, config, device, row


def bench_points(folder: Path | None = None) -> list[BenchPoint]:
    """Every method row of every committed bench (``_bench_rows``), with the device it ran on and, for token-tree
    methods, the mean tree size of its records."""
    points, trees = [], {}
    for bench, config, device, row in _bench_rows(folder):
        if row.get("error") or row["base_method"] == "ar" or _float(row["speedup"]) is None:
            continue
        if bench not in trees:
            trees[bench] = _tree_sizes(bench / "records.jsonl")
        points.append(BenchPoint(
            bench=bench.name, method=row["method"], base=row["base_method"], dtype=row["dtype"],
            device=device, temperature=float(config["temperature"]), alpha=_float(row["alpha"]),
            speedup=float(row["speedup"]), predicted=_float(row["predicted_speedup"]),
            tokens_per_call=float(row["tokens_per_call"]), mean_proposed=_float(row["mean_proposed"]),
            tree_size=trees[bench].get(row["method"]), batch_size=int(config.get("batch_size", 1))))
    return points


@dataclass(frozen=True)
class StepSplit:
    """One method row of a committed bench: a steady step's wall time split three ways (summary.csv's
    step_target_ms, step_draft_ms and step_host_ms: the target's forwards, the draft's forwards, and the host's work
    between them, in ms), beside its measured speedup and the two predictions (forwards alone; with the host's work)."""
    bench: str
    device: str
    temperature: float
    method: str
    dtype: str
    target_ms: float
    draft_ms: float
    host_ms: float
    speedup: float
    predicted: float | None
    predicted_with_host: float | None

    def label(self) -> str:
        return f"{self.bench}: {self.method} ({self.dtype})"


def step_splits(folder: Path | None = None) -> list[StepSplit]:
    """Every row of every committed bench whose summary splits its steps (AR included: the baseline's own split),
    in bench then row order (``_bench_rows``)."""
    splits = []
    for bench, config, device, row in _bench_rows(folder):
        parts = [_float(row.get(f"step_{p}_ms", "")) for p in ("target", "draft", "host")]
        if row.get("error") or None in parts or _float(row.get("speedup", "")) is None:
            continue
        splits.append(StepSplit(bench.name, device, float(config["temperature"]), row["method"], row["dtype"],
                                *parts, float(row["speedup"]), _float(row.get("predicted_speedup", "")),
                                _float(row.get("predicted_with_host", ""))))
    return splits


def _tree_sizes(records: Path) -> dict[str, float]:
    """method -> mean nodes per verifying call over its records (empty when it never drafted)."""
    sizes: dict[str, list[int]] = {}
    if records.is_file():
        for line in records.read_text().splitlines():
            rec = json.loads(line)
            sizes.setdefault(rec["method"], []).extend(rec.get("tree_sizes", []))
    return {m: statistics.fmean(s) for m, s in sizes.items() if s}


def at_temperature(points: list[BenchPoint], ctrl: Controls, bases: tuple[str, ...]) -> list[BenchPoint]:
    """The points of the methods ``bases`` measured at the controls' temperature."""
    return [p for p in points if p.base in bases and abs(p.temperature - ctrl.temperature) < 1e-9]
