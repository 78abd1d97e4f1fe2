"""The measuring code of ``notebooks/speculative_slides_tables.ipynb``: the slides' (seed 003) Tables 2 and 3 on our
pair, beside their printed rows, from ``bench.run_sweep`` summary rows.

Notation (docs/notation.md): α = acceptance rate, γ = draft length, c = draft/target cost ratio, β = verification cost
factor, T = temperature.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from simulations import SLIDES_TABLE2, SLIDES_TABLE2_COLUMNS, SLIDES_TABLE3, implied_cost_ratio

from ..run.bench_types import BenchPrompt
from ..core.config import SamplingConfig
from ..drafters import fit_ngram
from ..drafters.ngram import NGramTable, target_corpus
from ..engine.models import LoadedModel
from ..metrics.profile import Profile
from . import trees
from .common import StudyCache, cached_json, suite_prompts

# Each of our drafts -> the slides' draft kind in Table 3; None: no published row of its kind (the LM draft is
# matched to each target's small LM below).
KIND = {"unigram": "UNIGRAM", "bigram": "BIGRAM", "speculative": None, "prompt-lookup": None}
# The slides' targets in Table 3 (column of ours -> (target, its small-LM draft)); LaMDA prints LM rows only.
PUBLISHED_LM = {"alpha_gpt_like_97m": ("GPT-LIKE (97M)", "GPT-LIKE (6M)"),
                "alpha_t5_xxl_ende": ("T5-XXL (ENDE)", "T5-SMALL"),
                "alpha_t5_xxl_cnndm": ("T5-XXL (CNNDM)", "T5-SMALL"),
                "alpha_lamda_137b": ("LAMDA (137B)", "LAMDA (100M)")}
ZERO_COST = ("prompt-lookup", "unigram", "bigram")  # model-free drafts (c = 0)
ROW_ORDER = {"unigram": 0, "bigram": 1, "prompt-lookup": 3}  # Table 3's rows within one T; the LM draft is 2


def eval_and_corpus_prompts(target: LoadedModel, suites: Sequence[str], per_suite: int,
                            corpus_per_suite: int) -> tuple[list[BenchPrompt], list[BenchPrompt]]:
    """(evaluation prompts, corpus prompts): the first ``per_suite`` prompts of each suite, then the next
    ``corpus_per_suite`` of each for the n-gram corpus, both without references; disjoint by construction."""
    encoded = {name: suite_prompts(target, name, per_suite + corpus_per_suite, references=False) for name in suites}
    evaluation = [p for name in suites for p in encoded[name][:per_suite]]
    corpus = [p for name in suites for p in encoded[name][per_suite:per_suite + corpus_per_suite]]
    assert not {p.id for p in evaluation} & {p.id for p in corpus}
    return evaluation, corpus


def bigram_table(cache: StudyCache, target: LoadedModel, name: str, prompts: Sequence[BenchPrompt], max_new: int,
                 seed: int) -> tuple[NGramTable, Path, dict, list[list[int]]]:
    """(table, its .npz path, its meta, the corpus): the target samples ``max_new`` tokens at T = 1 after each
    prompt (kept in the run cache, resumed by a run with the same key) and a bigram table is fitted to them.
    ``name`` is the target's zoo name, recorded in the meta."""
    meta = {"target": name, "prompts": [p.id for p in prompts], "temperature": 1.0, "max_new_tokens": max_new,
            "seed": seed}
    folder = cache.dir("corpus", meta)
    corpus = cached_json(folder / "corpus.json", lambda: target_corpus(target, list(prompts), max_new,
                                                                        SamplingConfig(temperature=1.0), seed=seed))
    table = fit_ngram(corpus, target.vocab_size, order=2, meta=meta)
    return table, table.save(folder / "bigram.npz"), meta, corpus


def published_alpha(target: str, draft: str, t: int) -> float:
    """α the slides print for (target, draft) at temperature ``t`` (Table 3)."""
    return next(a for (tg, d, tt, a) in SLIDES_TABLE3 if tg == target and d == draft and tt == t)


def table3(rows: Sequence[dict], draft: str) -> list[dict]:
    """Slides Table 3 beside ours: one row per (T, draft) of the sweep's summary ``rows`` (plain decoding left
    out), α measured and the published α of each slides target for the draft of the same kind (the LM draft ``draft``
    against each target's small LM); sorted by T, then unigram, bigram, LM, prompt lookup."""
    table = []
    for row in rows:
        if row["method"] not in KIND:
            continue
        t, lm, kind = int(row["temperature"]), row["method"] == "speculative", KIND[row["method"]]
        entry = {"draft": f"LM ({draft})" if lm else row["method"], "T": t, "alpha_ours": row["alpha"]}
        for column, (target, small_lm) in PUBLISHED_LM.items():
            printed_kind = small_lm if lm else (kind if column != "alpha_lamda_137b" else None)
            entry[column] = published_alpha(target, printed_kind, t) if printed_kind else None
        table.append(entry)
    return sorted(table, key=lambda r: (r["T"], ROW_ORDER.get(r["draft"], 2)))


def speed_row(row: dict, draft: str) -> dict:
    """One row of Table 2 from a sweep's summary row: measured speedup beside the prediction from measured α, c, β."""
    return {"draft": draft, "T": int(row["temperature"]), "gamma": row["gamma"], "dtype": row["dtype"],
            "alpha": row["alpha"], "speedup": row["speedup"], "predicted_speedup": row["predicted_speedup"],
            "c": row["c"], "beta": row["beta"], "efficiency": row["efficiency"], "tokens_per_s": row["tokens_per_s"]}


def step_regime(folder: str | Path, dtype: str) -> dict:
    """Where a sweep point's target step sits, from the device profile its bench recorded (``provenance.json``):
    ``trees.step_regime``, L_fp(1) and its memory floor. The report reads them beside β(n)
    (``notebooks/claims/base.py``, ``Regime``)."""
    sessions = json.loads((Path(folder) / "provenance.json").read_text())["sessions"]
    profiles = sessions[-1]["profiles"]
    if dtype not in profiles:
        raise ValueError(f"{folder}: no {dtype} profile in its provenance (it has {sorted(profiles)})")
    return trees.step_regime(Profile.from_dict(profiles[dtype]))


def table2(rows: Sequence[dict], draft: str) -> list[dict]:
    """Slides Table 2 on our pair: the speculative rows of a speed sweep's summary ``rows``, sorted by (T, γ)."""
    return sorted((speed_row(r, draft) for r in rows if r["method"] == "speculative"),
                  key=lambda r: (r["T"], r["gamma"]))


def zero_cost_rows(rows: Sequence[dict]) -> list[dict]:
    """Table 2's rows of the zero-cost drafts (prompt lookup, n-grams; named by their method), from the Table 3
    sweep's summary ``rows``."""
    return [speed_row(r, r["method"]) for r in rows if r["method"] in ZERO_COST]


def published_table2() -> list[dict]:
    """The slides' printed Table 2 rows (T5-XXL target) with the draft cost c each implies under the i.i.d. model
    with β = 1 (``simulations.implied_cost_ratio``)."""
    table = []
    for printed in SLIDES_TABLE2:
        r = dict(zip(SLIDES_TABLE2_COLUMNS, printed))
        table.append({"task": r["task"], "draft": r["draft"], "T": r["temperature"], "gamma": r["gamma"],
                      "alpha": r["alpha"], "speedup": r["speedup"],
                      "implied_c_at_beta_1": float(implied_cost_ratio(r["alpha"], r["gamma"], r["speedup"]))})
    return table


def run_conditions(folders: Sequence[Path]) -> list[str]:
    """Lines describing each bench run kept under ``folders`` (a sweep's folder each, one run per sub-folder): the
    machine load (and the cores other processes kept busy as it started), threads, measured β and c and device of every session, and for T = 0 runs the records that
    differ from plain decoding."""
    lines = []
    for folder in folders:
        for path in sorted(Path(folder).glob("*/provenance.json")):
            prov = json.loads(path.read_text())
            for s in prov["sessions"]:
                c = s["costs"]
                busy = s.get("busy_cores")
                lines.append(f"{path.parent.parent.name.split('-')[1]}/{path.parent.name}: load {s['load_average']}, "
                             + ("" if busy is None else f"others' busy cores {busy:.2f}, ")
                             + f"threads {s['threads']}, β {c['beta']:.2f}, "
                             f"c {c['c'] if c['c'] is None else round(c['c'], 3)}, {s['device_name']}")
            if "T0" in path.parent.name:
                mismatches = prov.get("t0_mismatches", [])
                lines.append(f"    T = 0 records differing from plain decoding: {len(mismatches)}")
                lines += [f"      {line}" for line in mismatches]
    return lines
