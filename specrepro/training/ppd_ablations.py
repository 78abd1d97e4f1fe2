"""The PPD paper's training ablations (Appendix B, Tables 2–8) at a size a 2-core CPU affords.

    python -m specrepro.training.ppd_ablations --out runs/ppd-ablations --data runs/ppd/data [--steps 200]

Every row trains prompt tokens from the same initialisation seed on the same data, for the same number of steps
and anchors (the same budget), and is measured the same way: top-k accuracy of each prompt token against the
target's argmax on the same held-out conversations (``specrepro.training.ppd``). One folder per row under
``--out`` (resumable: a finished row is not trained again); ``--out/ablations.json`` gathers their records.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import sys
from pathlib import Path

from ..core.cli import Parser, existing_folder, threads
from ..core.executor import ExecutorConfig, executor_arg, run_cells
from ..engine.models import LoadedModel, load_model, resolve_device
from ..core.provenance import atomic_write_text
from .ppd import PPDTrainConfig, train_ppd

# row name -> (the paper's table, settings that differ from the baseline: 3 prompt tokens, 1 EPT, KD, ensemble
# mask, averaged EPT logits, the final layer only)
ABLATIONS: dict[str, tuple[str, dict]] = {
    "ept1": ("Table 2", {}),
    "ept2": ("Table 2", {"epts": 2}),
    "ept3": ("Table 2", {"epts": 3}),
    "ept1-no-kd": ("Table 3", {"kd": False}),
    "ept2-no-kd": ("Table 3", {"epts": 2, "kd": False}),
    "ept1-quarter-steps": ("Table 3", {"steps": None}),  # a quarter of the budget: the "epochs" axis
    # the batch axis at the same conversations seen: 4 per optimizer step, a quarter of the steps
    "ept1-batch-4": ("Table 3", {"batch": 4, "steps": None}),
    "ept1-prefix-tuning": ("Table 4", {"prefix": True}),
    "ept1-head-1-stage": ("Table 5", {"head": "1-stage"}),
    "ept1-head-2-stage": ("Table 5", {"head": "2-stage"}),
    "ept2-decoder-mask": ("Table 6", {"epts": 2, "mask": "decoder"}),
    "ept2-encoder-mask": ("Table 6", {"epts": 2, "mask": "encoder"}),
    "ept2-learned-weights": ("Table 7", {"epts": 2, "aggregation": "learned"}),
    "ept1-2-exits": ("Table 8", {"exits": 2}),
    "ept1-3-exits": ("Table 8", {"exits": 3}),
}


def row_config(name: str, steps: int, anchors: int, val_conversations: int, seed: int,
               threads: int = 2) -> PPDTrainConfig:
    table, changes = ABLATIONS[name]
    changes = dict(changes)
    if "steps" in changes:
        changes["steps"] = max(1, steps // 4)
    base = PPDTrainConfig(steps=steps, anchors=anchors, val_conversations=val_conversations, seed=seed,
                          val_every=max(1, steps // 10), threads=threads)
    return dataclasses.replace(base, **changes)


def same_run(a: dict, b: dict) -> bool:
    """Two configs train the same row (the thread count changes the speed, not the recipe)."""
    return {k: v for k, v in a.items() if k != "threads"} == {k: v for k, v in b.items() if k != "threads"}


def train_row(out: Path, data: str | Path, target: LoadedModel | None, command: list[str],
              row: tuple[str, PPDTrainConfig]) -> str:
    """One row, ``row`` = (name, its config), trained into ``out/name`` (its record written last, atomically:
    the row's resume key). Module-level, so that a Ray task can run it; a task given no ``target`` loads it."""
    name, cfg = row
    print(f"ppd ablation {name}: {ABLATIONS[name][0]}", file=sys.stderr, flush=True)
    train_ppd(cfg, out / name, target=target, data=data, progress=False, command=command)
    return name


def run_ablations(out: str | Path, data: str | Path, names=tuple(ABLATIONS), steps: int = 200, anchors: int = 32,
                  val_conversations: int = 10, seed: int = 0, threads: int = 2,
                  executor: ExecutorConfig | str | None = None) -> dict:
    """Train (or reuse) each named row; ``out/ablations.json`` gathers every finished row under ``out`` (so
    several processes may split the rows between them). ``executor`` (``specrepro.core.executor``; default local)
    trains the rows left one after the other here, or as Ray tasks of ``threads`` CPUs each, each loading the
    target itself; on a cluster of several machines ``out`` and ``data`` must be on a filesystem they share, and
    ``data`` already made (rows made at once would write its shards together)."""
    out, executor = Path(out), ExecutorConfig.parse(executor)
    todo = []
    for name in names:
        cfg = row_config(name, steps, anchors, val_conversations, seed, threads)
        done = out / name / "training_record.json"
        if not (done.is_file() and same_run(json.loads(done.read_text())["config"], cfg.to_dict())):
            todo.append((name, cfg))
    if todo:
        local = executor.kind == "local"
        target = load_model(PPDTrainConfig().target, dtype="fp32", device=resolve_device(None)) if local else None
        command = ["python", "-m", "specrepro.training.ppd_ablations", *sys.argv[1:]]
        run_cells(functools.partial(train_row, out, data, target, command), todo,
                  executor if local else dataclasses.replace(executor, num_cpus=threads))
    return gather(out)


def gather(out: str | Path) -> dict:
    """Every finished row under ``out``, in the table's order, written to ``out/ablations.json``."""
    out, rows = Path(out), {}
    for name, (table, changes) in ABLATIONS.items():
        done = out / name / "training_record.json"
        if done.is_file():
            rows[name] = {"table": table, "changes": changes, **json.loads(done.read_text())}
    atomic_write_text(out / "ablations.json", json.dumps(rows, indent=1) + "\n")
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = Parser(prog="python -m specrepro.training.ppd_ablations",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--data", type=existing_folder, required=True,
                        help="a data folder made by specrepro.training.ppd")
    parser.add_argument("--rows", default=",".join(ABLATIONS), help="comma-separated row names")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--anchors", type=int, default=32)
    parser.add_argument("--val-conversations", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=threads, default=2, help="torch threads (of each Ray task: its CPUs)")
    parser.add_argument("--executor", type=executor_arg, default="local",
                        help="where the rows train: local (default), ray (a local Ray cluster), ray://HOST:PORT or "
                             "HOST:PORT (a running one); see specrepro.core.executor")
    args = parser.parse_args(argv)
    names = [n for n in args.rows.split(",") if n]
    unknown = [n for n in names if n not in ABLATIONS]
    if unknown:
        parser.error(f"unknown rows {unknown}; choose from {', '.join(ABLATIONS)}")
    rows = run_ablations(args.out, args.data, names, args.steps, args.anchors, args.val_conversations, args.seed,
                         args.threads, args.executor)
    for name, r in rows.items():
        print(name, r["held_out_topk_accuracy"])


if __name__ == "__main__":
    from ..core.cli import run_main
    run_main(main, "python -m specrepro.training.ppd_ablations")
