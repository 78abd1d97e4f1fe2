"""Gather trained EAGLE variants into one ablation file, so that the choice of the shipped draft rests on numbers.

    python -m specrepro.training.eagle_ablations --runs runs/eagle/last runs/eagle/ttt ... --shipped ttt \\
        --out specrepro/zoo/smollm2-135m-eagle/ablations.json

Each run folder holds the ``training_record.json`` of ``python -m specrepro.training.eagle``; the file keeps, per
variant, what it was (features, training-time test, draft vocabulary), its held-out acceptance by draft position
through the draft's head and through the full LM head, its top-k accuracies, its training time and the command and
commit that made it.

``--merge`` adds the runs to an existing file (a variant of the same name is replaced; the other variants, and any
other key of the file, such as ``same_split``, are kept), so a variant trained later joins the ones whose run folders
are gone:

    python -m specrepro.training.eagle_ablations --merge --runs ~/.cache/specrepro/train/eagle-1536-fused \
        --shipped eagle-1536-2700 --out specrepro/zoo/smollm2-135m-eagle/ablations.json
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
            "git_revision": record["git_revision"], "data": _data(record),
            "val_losses": record["train"].get("val_losses")}


def _data(record: dict) -> str | None:
    """The run's data in words (``studies.eagle.describe`` prints it)."""
    data, gen = record.get("data") or {}, record["config"].get("gen_dtype", "fp32")
    if "conversations" not in data:
        return None
    return (f"{data['conversations']} conversations written by the {gen} target (--gen-dtype {gen}); held out: "
            f"{data.get('val_conversations')} of them")


def read_runs(runs: list[Path]) -> list[dict]:
    """One variant per run folder, named after the folder."""
    variants = []
    for run in runs:
        path = Path(run) / "training_record.json"
        if not path.is_file():
            raise ValueError(f"{run} holds no training_record.json (train it with python -m specrepro.training.eagle)")
        variants.append(variant(Path(run).name, json.loads(path.read_text())))
    return variants


def shipping(variants: list[dict], shipped: str) -> str:
    """``shipped``, once it names one of ``variants`` (else one clear error)."""
    names = [v["name"] for v in variants]
    if shipped not in names:
        raise ValueError(f"--shipped {shipped!r} is not one of the variants ({', '.join(names)})")
    return shipped


def gather(runs: list[Path], shipped: str) -> dict:
    """{"variants": [...], "shipped": name}: one entry per run folder, named after the folder."""
    variants = read_runs(runs)
    return {"variants": variants, "shipped": shipping(variants, shipped)}


def merge(existing: dict, runs: list[Path], shipped: str) -> dict:
    """``existing`` (an ablation file's content) with the runs' variants added, each replacing one of its name."""
    added = {v["name"]: v for v in read_runs(runs)}
    variants = [v for v in existing.get("variants", []) if v["name"] not in added] + list(added.values())
    return {**existing, "variants": variants, "shipped": shipping(variants, shipped)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m specrepro.training.eagle_ablations",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", nargs="+", required=True, help="run folders of python -m specrepro.training.eagle")
    parser.add_argument("--shipped", required=True, help="the run (folder name) whose draft the zoo ships")
    parser.add_argument("--out", required=True, help="the ablation file to write")
    parser.add_argument("--merge", action="store_true", help="add the runs to the file --out names (it must exist)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.merge and not out.is_file():
        raise ValueError(f"--merge adds to an existing ablation file; {out} is not one")
    content = (merge(json.loads(out.read_text()), args.runs, args.shipped) if args.merge
               else gather(args.runs, args.shipped))
    atomic_write_text(out, json.dumps(content, indent=1) + "\n")


if __name__ == "__main__":
    from ..core.cli import run_main
    run_main(main, "python -m specrepro.training.eagle_ablations")
