"""Gather trained EAGLE variants into one ablation file, so that the choice of the shipped draft rests on numbers.

    python -m specrepro.training.eagle_ablations --runs runs/eagle/last runs/eagle/ttt ... --shipped ttt \\
        --out specrepro/zoo/smollm2-135m-eagle/ablations.json

Each run folder holds the ``training_record.json`` of ``python -m specrepro.training.eagle``; the file keeps, per
variant, what it was (features, training-time test, draft vocabulary), its held-out acceptance by draft position
through the draft's head and through the full LM head, its top-k accuracies, its training time and the command and
commit that made it.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..core.provenance import atomic_write_text


def variant(name: str, record: dict) -> dict:
    held, cfg = record["held_out"], record["config"]
    return {"name": name, "features": cfg["features"], "ttt": cfg["ttt"], "draft_vocab": record["draft"]["draft_vocab"],
            "held_out_tokens_in_draft_vocab": record["draft"]["held_out_tokens_in_draft_vocab"],
            "accept_by_position": held["accept_by_position"],
            "accept_by_position_full_head": held["accept_by_position_full_head"],
            "topk_accuracy": held["topk_accuracy"], "positions_by_depth": held["positions_by_depth"],
            "train_seconds": record["train"]["seconds"], "steps": cfg["steps"], "command": record["command"],
            "git_revision": record["git_revision"]}


def gather(runs: list[Path], shipped: str) -> dict:
    """{"variants": [...], "shipped": name}: one entry per run folder, named after the folder."""
    variants = []
    for run in runs:
        path = Path(run) / "training_record.json"
        if not path.is_file():
            raise ValueError(f"{run} holds no training_record.json (train it with python -m specrepro.training.eagle)")
        variants.append(variant(Path(run).name, json.loads(path.read_text())))
    names = [v["name"] for v in variants]
    if shipped not in names:
        raise ValueError(f"--shipped {shipped!r} is not one of the runs ({', '.join(names)})")
    return {"variants": variants, "shipped": shipped}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m specrepro.training.eagle_ablations",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", nargs="+", required=True, help="run folders of python -m specrepro.training.eagle")
    parser.add_argument("--shipped", required=True, help="the run (folder name) whose draft the zoo ships")
    parser.add_argument("--out", required=True, help="the ablation file to write")
    args = parser.parse_args(argv)
    atomic_write_text(Path(args.out), json.dumps(gather(args.runs, args.shipped), indent=1) + "\n")


if __name__ == "__main__":
    from ..core.cli import run_main
    run_main(main, "python -m specrepro.training.eagle_ablations")
