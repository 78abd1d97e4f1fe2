"""The PPD paper's training ablations (Appendix B, Tables 2–8) at a size a 2-core CPU affords.

    python -m specrepro.training.ppd_ablations --out runs/ppd-ablations --data runs/ppd/data [--steps 200]

Every row trains prompt tokens from the same initialisation seed on the same data, for the same number of steps
and anchors (the same budget), and is measured the same way: top-k accuracy of each prompt token against the
target's argmax on the same held-out conversations (``specrepro.training.ppd``). One folder per row under
``--out`` (resumable: a finished row is not trained again); ``--out/ablations.json`` gathers their records.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from ..models import load_model
from ..provenance import atomic_write_text
from .ppd import PPDTrainConfig, train_ppd

# row name -> (the paper's table, settings that differ from the baseline: 3 prompt tokens, 1 EPT, KD, ensemble
# mask, averaged EPT logits, the final layer only)
ABLATIONS: dict[str, tuple[str, dict]] = {
    "ept1": ("Table 2", {}),
    "ept2": ("Table 2", {"epts": 2}),
    "ept4": ("Table 2", {"epts": 4}),
    "ept1-no-kd": ("Table 3", {"kd": False}),
    "ept4-no-kd": ("Table 3", {"epts": 4, "kd": False}),
    "ept1-quarter-steps": ("Table 3", {"steps": None}),  # a quarter of the budget: the "epochs" axis
    "ept1-prefix-tuning": ("Table 4", {"prefix": True}),
    "ept1-head-1-stage": ("Table 5", {"head": "1-stage"}),
    "ept1-head-2-stage": ("Table 5", {"head": "2-stage"}),
    "ept4-decoder-mask": ("Table 6", {"epts": 4, "mask": "decoder"}),
    "ept4-encoder-mask": ("Table 6", {"epts": 4, "mask": "encoder"}),
    "ept4-learned-weights": ("Table 7", {"epts": 4, "aggregation": "learned"}),
    "ept1-2-exits": ("Table 8", {"exits": 2}),
    "ept1-3-exits": ("Table 8", {"exits": 3}),
}


def row_config(name: str, steps: int, anchors: int, val_conversations: int, seed: int) -> PPDTrainConfig:
    table, changes = ABLATIONS[name]
    changes = dict(changes)
    if "steps" in changes:
        changes["steps"] = max(1, steps // 4)
    base = PPDTrainConfig(steps=steps, anchors=anchors, val_conversations=val_conversations, seed=seed,
                          val_every=max(1, steps // 10))
    return dataclasses.replace(base, **changes)


def run_ablations(out: str | Path, data: str | Path, names=tuple(ABLATIONS), steps: int = 200, anchors: int = 32,
                  val_conversations: int = 10, seed: int = 0) -> dict:
    out = Path(out)
    target = load_model(PPDTrainConfig().target, dtype="fp32", device="cpu")
    rows = {}
    for name in names:
        cfg = row_config(name, steps, anchors, val_conversations, seed)
        done = out / name / "training_record.json"
        if done.is_file() and json.loads(done.read_text())["config"] == cfg.to_dict():
            record = json.loads(done.read_text())
        else:
            print(f"ppd ablation {name}: {ABLATIONS[name][0]}", file=sys.stderr, flush=True)
            record = train_ppd(cfg, out / name, target=target, data=data,
                               command=[sys.executable, "-m", "specrepro.training.ppd_ablations", *sys.argv[1:]])
        rows[name] = {"table": ABLATIONS[name][0], "changes": ABLATIONS[name][1], **record}
        atomic_write_text(out / "ablations.json", json.dumps(rows, indent=1) + "\n")
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m specrepro.training.ppd_ablations",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--data", required=True, help="a data folder made by specrepro.training.ppd")
    parser.add_argument("--rows", default=",".join(ABLATIONS), help="comma-separated row names")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--anchors", type=int, default=32)
    parser.add_argument("--val-conversations", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    names = [n for n in args.rows.split(",") if n]
    unknown = [n for n in names if n not in ABLATIONS]
    if unknown:
        parser.error(f"unknown rows {unknown}; choose from {', '.join(ABLATIONS)}")
    rows = run_ablations(args.out, args.data, names, args.steps, args.anchors, args.val_conversations, args.seed)
    for name, r in rows.items():
        print(name, r["held_out_topk_accuracy"])


if __name__ == "__main__":
    main()
