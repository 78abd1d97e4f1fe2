"""Benchmark: every method on the same prompts, interleaved, resumable, with the cost model beside it.

    python -m specrepro bench --methods ar,speculative,prompt-lookup,hf-ar,hf-assisted,hf-prompt-lookup \\
        --target smollm2-135m-instruct --draft layers:8 --suite mixed --max-new-tokens 64 \\
        --temperature 0 --gamma 4 --repeats 1 --out runs/bench

How the timings are kept fair:

1. One warm-up run per method on the first prompt (not recorded) before anything is timed.
2. c and β measured once per session (:func:`measure_costs`): c = one draft decode step / one target decode
   step, β = one (γ+1)-token target forward / one 1-token forward, each the median of timed
   ``CachedModel.logits_for`` calls on a realistic context, rolled back after each call.
3. Methods interleaved per prompt (for each prompt, for each repeat, every method), so drift in machine
   load hits all of them alike; seed = base seed + repeat, the same for every method.
4. Clocks synchronise with the device (``decoding.Clock``); the thread count is recorded.

Files in ``DIR``:

- ``config.json``      the arguments; a restart into ``DIR`` with different ones is refused (:class:`ResumeMismatch`);
- ``records.jsonl``    one record per (method, prompt_id, repeat), appended and flushed as each finishes;
                       a restart skips those already written;
- ``provenance.json``  git revision, versions, device, dtype, threads, load, seeds, c and β of every session,
                       and the T = 0 cross-check (records whose tokens differ from ar or their counterpart);
- ``summary.csv``      per method: tokens/s, speedup vs ``ar``, α, tokens per target call, c, β, the
                       predicted speedup (survey blog, *Batch Size*: (1 − α^{γ+1}) / ((1 − α)(γc + β)))
                       and efficiency = measured / predicted speedup; written at the end (tmp + rename).
"""
from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch

from .config import DecodeConfig, SamplingConfig
from .decoding import Clock, eos_ids, model_device
from .drafters import Drafter
from .generate import METHODS, REGISTRY, drafter_for, encode_prompt, generate_ids
from .hf_baselines import COUNTERPART, HF_METHODS, assisted_unsupported, hf_generate
from .kvcache import CachedModel
from .models import LoadedModel, load_draft, load_model
from .prompts import load_prompts_file, load_suite

ALL_METHODS = (*METHODS, *HF_METHODS)
DRAFT_MODEL_METHODS = ("speculative", "hf-assisted")  # methods that run a draft model (c > 0)
MODEL_FREE_METHODS = ("prompt-lookup", "unigram", "bigram", "hf-prompt-lookup")  # c = 0
SUMMARY_COLUMNS = ("method", "n", "new_tokens", "wall_time_s", "tokens_per_s", "speedup", "alpha",
                   "mean_accepted", "mean_proposed", "c", "beta", "predicted_speedup", "efficiency",
                   "identical_to_ar", "identical_to_counterpart")


class ResumeMismatch(ValueError):
    """``DIR`` holds a run made with different arguments."""


@dataclass(frozen=True)
class BenchConfig:
    """Everything that defines a benchmark run; stored as ``config.json`` and compared on resume."""

    methods: tuple[str, ...]  # run in this order for every (prompt, repeat)
    target: str  # name of the target (zoo name, folder, hub id, or a label for a model passed in)
    draft: str | None = None  # draft model for "speculative" / "hf-assisted" (layers:K allowed)
    prompts: str = "suite:mixed"  # "suite:NAME", "file:PATH", or a label for prompts passed in
    limit: int | None = None  # keep the first `limit` prompts
    max_new_tokens: int = 64
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    gamma: int = 4  # γ for every speculative method and the transformers baselines
    repeats: int = 1
    seed: int = 0  # base seed; repeat r uses seed + r
    dtype: str | None = None  # None: the loader's default (bf16)
    device: str | None = None
    threads: int | None = None  # torch.set_num_threads; None leaves torch's default (recorded anyway)
    ngram_table: str | None = None  # .npz from NGramTable.save, for "unigram" / "bigram"
    chat_template: bool = True
    warmup_tokens: int = 16  # max_new_tokens of the unrecorded warm-up runs; 0 skips them
    cost_repeats: int = 7  # timed calls per median in measure_costs
    prompt_digest: str = ""  # sha256 of the encoded prompts, filled in by run_bench
    weights_digest: str = ""  # sha256 of the target's and draft's weights, filled in by run_bench

    def __post_init__(self) -> None:
        unknown = [m for m in self.methods if m not in ALL_METHODS]
        if not self.methods or unknown:
            raise ValueError(f"unknown method(s) {unknown or '(none given)'}; choose from {', '.join(ALL_METHODS)}")
        if len(set(self.methods)) != len(self.methods):
            raise ValueError(f"a method is listed twice in {self.methods}")
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {self.repeats}")
        self.decode_config("ar", 0)  # validates max_new_tokens, gamma, the sampling knobs

    def sampling(self) -> SamplingConfig:
        return SamplingConfig(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p)

    def decode_config(self, method: str, repeat: int, max_new_tokens: int | None = None) -> DecodeConfig:
        return DecodeConfig(method=method, max_new_tokens=max_new_tokens or self.max_new_tokens, gamma=self.gamma,
                            sampling=self.sampling(), seed=self.seed + repeat)

    def to_dict(self) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(self)))  # tuples -> lists, as read back


@dataclass(frozen=True)
class BenchPrompt:
    id: str
    ids: list[int]  # encoded prompt, chat template applied


@dataclass
class BenchResult:
    out: Path
    records: list[dict]
    summary: list[dict]
    provenance: dict


# ----------------------------------------------------------------------------------------- costs


def measure_costs(target: torch.nn.Module, draft: torch.nn.Module | None, context: list[int], gamma: int,
                  repeats: int = 7, warmup: int = 2) -> dict:
    """Median times of one decode step and one (γ+1)-token verification after ``context`` is cached.

    β = t_target(γ+1) / t_target(1), c = t_draft(1) / t_target(1) (None without a draft). The calls
    alternate so that a change in machine load affects numerator and denominator alike.
    """
    def timer(model: torch.nn.Module) -> Callable[[int], float]:
        cm, clock = CachedModel(model), Clock(model_device(model))
        cm.logits_for(context)  # prefill once; every timed call adds n tokens and rolls them back
        def time_step(n: int) -> float:
            t0 = clock.now()
            cm.logits_for(context + context[:n])
            elapsed = clock.now() - t0
            cm.rollback(len(context))
            return elapsed
        return time_step

    steps = {"target_1": timer(target), "target_verify": timer(target)}
    if draft is not None:
        steps["draft_1"] = timer(draft)
    sizes = {"target_1": 1, "target_verify": gamma + 1, "draft_1": 1}
    times: dict[str, list[float]] = {k: [] for k in steps}
    for i in range(warmup + repeats):
        for key, step in steps.items():
            t = step(sizes[key])
            if i >= warmup:
                times[key].append(t)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "context_tokens": len(context), "gamma": gamma, "repeats": repeats,
        "t_target_1_s": med["target_1"], "t_target_verify_s": med["target_verify"],
        "t_draft_1_s": med.get("draft_1"),
        "beta": med["target_verify"] / med["target_1"],
        "c": med["draft_1"] / med["target_1"] if draft is not None else None,
    }


def predicted_speedup(alpha: float | None, gamma: int, c: float, beta: float) -> float | None:
    """Survey blog (seed 004), *Batch Size*: E(speedup) = (1 − α^{γ+1}) / ((1 − α)(γc + β))."""
    if alpha is None or beta is None or c is None:
        return None
    from simulations.speculative import expected_speedup
    return float(expected_speedup(alpha, gamma, c, beta))


# -------------------------------------------------------------------------------------- run files


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def check_config(out: Path, config: BenchConfig, ignore: Sequence[str] = ()) -> None:
    """Refuse to resume into ``out`` if its config.json differs from ``config`` (``ignore``d keys aside)."""
    path = Path(out) / "config.json"
    if not path.exists():
        return
    stored, current = json.loads(path.read_text()), config.to_dict()
    diff = sorted(k for k in set(stored) | set(current)
                  if k not in ignore and stored.get(k, "<missing>") != current.get(k, "<missing>"))
    if diff:
        lines = "; ".join(f"{k}: stored {stored.get(k, '<missing>')!r}, now {current.get(k, '<missing>')!r}"
                          for k in diff)
        raise ResumeMismatch(f"{out} holds a benchmark made with different arguments ({lines}); "
                             f"use another --out directory or delete {out}")


def load_records(out: Path) -> list[dict]:
    """Records written so far. A last line cut short by an interruption is dropped from the file."""
    path = Path(out) / "records.jsonl"
    if not path.exists():
        return []
    records, good_bytes = [], 0
    with open(path, "rb") as handle:
        for line in handle:
            try:
                if not line.endswith(b"\n"):
                    raise ValueError("no newline")
                records.append(json.loads(line))
            except ValueError:
                break
            good_bytes += len(line)
    if good_bytes < path.stat().st_size:
        with open(path, "r+b") as handle:
            handle.truncate(good_bytes)
    return records


def record_key(record: dict) -> tuple[str, str, int]:
    return record["method"], record["prompt_id"], record["repeat"]


def _git_revision() -> str:
    root = Path(__file__).resolve().parents[1]
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True)
        return rev.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"cpu: {line.split(':', 1)[1].strip()} ({os.cpu_count()} logical cores)"
    except OSError:
        pass
    return f"cpu: {platform.processor() or platform.machine()} ({os.cpu_count()} logical cores)"


def _session_info(target: LoadedModel, config: BenchConfig) -> dict:
    import transformers
    device = model_device(target.model)
    return {
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git_revision": _git_revision(),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__},
        "device": str(device), "device_name": _device_name(device),
        "dtype": str(next(target.model.parameters()).dtype).replace("torch.", ""),
        "threads": torch.get_num_threads(),
        # Other processes on the machine skew every timing; the 1/5/15-minute load says how busy it was.
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "seeds": [config.seed + r for r in range(config.repeats)],
    }


# ------------------------------------------------------------------------------------------ summary


def _pooled_alpha(records: list[dict]) -> float | None:
    accepted = tested = 0
    for r in records:
        for a, g in zip(r["accept_lengths"], r["proposed_lengths"]):
            accepted += a
            tested += a + (a < g)  # every accepted draft plus the first rejected one
    return accepted / tested if tested else None


def _identical(records: list[dict], by_key: dict, other: str) -> float | None:
    pairs = [(r, by_key.get((other, r["prompt_id"], r["repeat"]))) for r in records]
    pairs = [(r, o) for r, o in pairs if o is not None]
    return sum(r["token_ids"] == o["token_ids"] for r, o in pairs) / len(pairs) if pairs else None


def summarize(records: list[dict], config: BenchConfig, costs: dict) -> list[dict]:
    """One row per method (``SUMMARY_COLUMNS``). Totals are pooled over prompts and repeats."""
    by_key = {record_key(r): r for r in records}
    greedy = config.temperature == 0
    rows, ar_tps = [], None
    for method in config.methods:
        rs = [r for r in records if r["method"] == method]
        tokens = sum(r["new_tokens"] for r in rs)
        wall = sum(r["wall_time_s"] for r in rs)
        calls = [r["target_calls"] for r in rs]
        tps = tokens / wall if wall > 0 else None
        if method == "ar":
            ar_tps = tps
        alpha = _pooled_alpha(rs)
        c = costs.get("c") if method in DRAFT_MODEL_METHODS else (0.0 if method in MODEL_FREE_METHODS else None)
        if method in ("ar", "hf-ar"):
            predicted = 1.0  # no drafting: the model predicts the speed of ar itself
        else:
            predicted = predicted_speedup(alpha, config.gamma, c, costs.get("beta"))
        rows.append({
            "method": method, "n": len(rs), "new_tokens": tokens, "wall_time_s": wall, "tokens_per_s": tps,
            "speedup": None, "alpha": alpha,
            "mean_accepted": tokens / sum(calls) if rs and all(k for k in calls) else None,
            "mean_proposed": (sum(sum(r["proposed_lengths"]) for r in rs) / sum(calls)
                              if rs and method in REGISTRY and REGISTRY[method].build and all(calls) else None),
            "c": c, "beta": costs.get("beta"), "predicted_speedup": predicted, "efficiency": None,
            "identical_to_ar": _identical(rs, by_key, "ar") if greedy and method != "ar" else None,
            "identical_to_counterpart": (_identical(rs, by_key, COUNTERPART[method])
                                         if greedy and method in COUNTERPART else None),
        })
    for row in rows:
        if ar_tps and row["tokens_per_s"]:
            row["speedup"] = row["tokens_per_s"] / ar_tps
            if row["predicted_speedup"]:
                row["efficiency"] = row["speedup"] / row["predicted_speedup"]
    return rows


def mismatches(records: list[dict], config: BenchConfig) -> list[str]:
    """At T = 0, every record whose tokens differ from its reference (ar, and the HF counterpart)."""
    if config.temperature != 0:
        return []
    by_key, lines = {record_key(r): r for r in records}, []
    for r in records:
        for other in {"ar", COUNTERPART.get(r["method"], "ar")} - {r["method"]}:
            o = by_key.get((other, r["prompt_id"], r["repeat"]))
            if o is not None and o["token_ids"] != r["token_ids"]:
                a, b = r["token_ids"], o["token_ids"]
                first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                lines.append(f"{r['method']} vs {other} on {r['prompt_id']} (repeat {r['repeat']}): "
                             f"first difference at generated token {first} ({len(a)} vs {len(b)} tokens)")
    return lines


def write_summary(out: Path, rows: list[dict]) -> Path:
    path = Path(out) / "summary.csv"
    tmp = path.with_name(".summary.csv.tmp")
    with open(tmp, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=SUMMARY_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if row[k] is None else row[k]) for k in SUMMARY_COLUMNS})
    os.replace(tmp, path)
    return path


def read_summary(out: Path) -> list[dict]:
    """summary.csv back as dicts, numbers as floats and empty cells as None."""
    def cell(v: str):
        if v == "":
            return None
        try:
            return float(v)
        except ValueError:
            return v
    with open(Path(out) / "summary.csv", newline="") as handle:
        return [{k: cell(v) for k, v in row.items()} for row in csv.DictReader(handle)]


# -------------------------------------------------------------------------------------------- run


def encode_prompts(target: LoadedModel, source: str, limit: int | None, chat_template: bool) -> list[BenchPrompt]:
    """``suite:NAME`` or ``file:PATH`` -> encoded prompts."""
    kind, _, name = source.partition(":")
    if kind == "suite":
        prompts = load_suite(name, limit=limit)
    elif kind == "file":
        prompts = load_prompts_file(name)[:limit]
    else:
        raise ValueError(f"prompt source must be suite:NAME or file:PATH, got {source!r}")
    return [BenchPrompt(p.id, encode_prompt(target, list(p.messages), chat_template)) for p in prompts]


def _digest(prompts: Sequence[BenchPrompt]) -> str:
    payload = json.dumps([[p.id, p.ids] for p in prompts]).encode()
    return hashlib.sha256(payload).hexdigest()


def _weights_digest(*models: torch.nn.Module | None) -> str:
    """sha256 over every parameter's name, shape and an evenly strided sample of at most ~4096 of its values:
    a draft retrained under the same name must not resume a run made with the old one. Sampling keeps this
    cheap for billion-parameter models on a GPU (no full copy to the host)."""
    h = hashlib.sha256()
    for model in models:
        for name, param in ([] if model is None else model.named_parameters()):
            flat = param.detach().reshape(-1)
            sample = flat[:: max(1, flat.numel() // 4096)].float().cpu()  # [<= ~4096]
            h.update(f"{name}{tuple(param.shape)}".encode())
            h.update(sample.numpy().tobytes())
    return h.hexdigest()


def _cost_context(prompts: Sequence[BenchPrompt], config: BenchConfig, context_length: int) -> list[int]:
    """A context as long as a typical step sees: the median prompt plus half the generation."""
    length = int(statistics.median(len(p.ids) for p in prompts)) + config.max_new_tokens // 2
    length = max(2, min(length, context_length - config.gamma - 2))
    longest = max(prompts, key=lambda p: len(p.ids)).ids
    return (longest * (length // len(longest) + 1))[:length]


def run_bench(config: BenchConfig, out: str | Path, *, target: LoadedModel | None = None,
              draft: LoadedModel | None = None, prompts: Sequence[BenchPrompt] | None = None,
              drafters: dict[str, Drafter] | None = None, on_record: Callable[[dict], None] | None = None,
              progress: bool = True) -> BenchResult:
    """Run (or resume) a benchmark into ``out``; models and prompts are loaded from ``config`` unless given.

    ``drafters`` overrides the drafter of a speculative method (e.g. an n-gram drafter built in memory).
    ``on_record(record)`` runs after each record is written (tests interrupt a run with it).
    """
    from tqdm.auto import tqdm

    out = Path(out)
    check_config(out, config, ignore=("prompt_digest", "weights_digest"))  # before any slow loading
    ngram = [m for m in config.methods if REGISTRY.get(m) and REGISTRY[m].needs == "n-gram table"]
    if config.ngram_table is None and any(m not in (drafters or {}) for m in ngram):
        raise ValueError(f"methods {ngram} need --ngram-table FILE (an .npz written by NGramTable.save)")
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    if target is None:
        target = load_model(config.target, dtype=config.dtype, device=config.device)
    needs_draft = any(m in DRAFT_MODEL_METHODS and m not in (drafters or {}) for m in config.methods)
    if needs_draft and draft is None:
        if config.draft is None:
            raise ValueError(f"methods {[m for m in config.methods if m in DRAFT_MODEL_METHODS]} need --draft NAME")
        draft = load_draft(config.draft, target, dtype=config.dtype)
    if prompts is None:
        prompts = encode_prompts(target, config.prompts, config.limit, config.chat_template)
    prompts = list(prompts)[:config.limit] if config.limit is not None else list(prompts)
    if not prompts:
        raise ValueError("no prompts to run")
    if len({p.id for p in prompts}) != len(prompts):
        raise ValueError("prompt ids must be unique: they key the records")
    config = dataclasses.replace(config, prompt_digest=_digest(prompts),
                                 weights_digest=_weights_digest(target.model, draft.model if draft else None))
    check_config(out, config)
    out.mkdir(parents=True, exist_ok=True)
    _write_atomic(out / "config.json", json.dumps(config.to_dict(), indent=1) + "\n")

    drafters = dict(drafters or {})
    for m in config.methods:
        if m in REGISTRY and REGISTRY[m].build is not None and m not in drafters:
            source = {"draft model": draft, "n-gram table": config.ngram_table}.get(REGISTRY[m].needs)
            drafters[m] = drafter_for(source, m)
    eos = eos_ids(target.model, target.tokenizer)

    def run_one(method: str, prompt: BenchPrompt, repeat: int, max_new_tokens: int | None = None):
        dc = config.decode_config(method, repeat, max_new_tokens)
        if method in HF_METHODS:
            return hf_generate(method, target, prompt.ids, dc, eos, draft)
        return generate_ids(target, prompt.ids, dc, draft=drafters.get(method))

    # A baseline that cannot run with these models is skipped, said on stderr and in the provenance; its
    # summary row has n = 0 rather than the whole benchmark failing.
    skipped = {}
    if "hf-assisted" in config.methods and draft is not None and (reason := assisted_unsupported(draft.model)):
        skipped["hf-assisted"] = reason
        print(f"specrepro bench: skipping hf-assisted: {reason}", file=sys.stderr)
    methods = [m for m in config.methods if m not in skipped]

    records = load_records(out)
    done = {record_key(r) for r in records}
    todo = [(p, r, m) for p in prompts for r in range(config.repeats) for m in methods
            if (m, p.id, r) not in done]

    prov_path = out / "provenance.json"
    provenance = json.loads(prov_path.read_text()) if prov_path.exists() else {"config": config.to_dict(),
                                                                                "sessions": []}
    if todo:
        session = _session_info(target, config)
        session["skipped"] = skipped
        load, cores = session["load_average"], os.cpu_count() or 1
        if load and load[0] > cores - 0.5:
            advice = ("; with several torch threads on a shared CPU every parallel region waits for descheduled "
                      "threads (consider --threads 1)" if torch.get_num_threads() > 1 else "")
            print(f"specrepro bench: the machine is busy (load {load[0]:.1f} on {cores} cores): timings will be "
                  f"noisy{advice}", file=sys.stderr)
        if config.warmup_tokens > 0:
            for m in methods:
                run_one(m, prompts[0], 0, min(config.warmup_tokens, config.max_new_tokens))
        session["costs"] = measure_costs(target.model, draft.model if draft is not None else None,
                                         _cost_context(prompts, config, target.context_length), config.gamma,
                                         repeats=config.cost_repeats)
        provenance["sessions"].append(session)
        _write_atomic(prov_path, json.dumps(provenance, indent=1) + "\n")

        bar = tqdm(total=len(done) + len(todo), initial=len(done), desc=f"bench {out.name}", file=sys.stderr,
                   disable=not progress, unit="run")
        with open(out / "records.jsonl", "a") as handle:
            for prompt, repeat, method in todo:
                rec = run_one(method, prompt, repeat)
                row = rec.to_dict()
                row.update(prompt_id=prompt.id, repeat=repeat, seed=config.seed + repeat, target=config.target,
                           draft=config.draft if method in DRAFT_MODEL_METHODS else None)
                handle.write(json.dumps(row) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
                records.append(row)
                bar.update(1)
                if on_record is not None:
                    on_record(row)
        bar.close()
        session["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        session["records_written"] = len(todo)
        _write_atomic(prov_path, json.dumps(provenance, indent=1) + "\n")

    costs = _pooled_costs(provenance["sessions"])
    summary = summarize(records, config, costs)
    write_summary(out, summary)
    # The T = 0 cross-check: every method should reproduce greedy decoding token for token; in bf16 a
    # (γ+1)-token forward can round differently from a 1-token one and flip a near-tie argmax.
    provenance["t0_mismatches"] = mismatches(records, config)
    _write_atomic(prov_path, json.dumps(provenance, indent=1) + "\n")
    for line in provenance["t0_mismatches"]:
        print(f"specrepro bench: T=0 tokens differ: {line}", file=sys.stderr)
    return BenchResult(out=out, records=records, summary=summary, provenance=provenance)


def _pooled_costs(sessions: list[dict]) -> dict:
    """c and β for the summary: the median over the sessions that measured them (one, unless resumed)."""
    def med(key: str) -> float | None:
        values = [s["costs"][key] for s in sessions if s.get("costs") and s["costs"].get(key) is not None]
        return statistics.median(values) if values else None
    return {"c": med("c"), "beta": med("beta")}


def target_corpus(target: LoadedModel, prompts: Sequence[BenchPrompt], max_new_tokens: int,
                  sampling: SamplingConfig, seed: int = 0, batch_size: int = 16) -> list[list[int]]:
    """What the target itself generates for each prompt: the text the slides' n-gram drafts are fitted on.

    Batched transformers ``generate`` (left-padded, with an attention mask) sampling from the same warped p
    as our loops, seeded once with ``seed``; each continuation is cut before its first EOS. Only the
    generated tokens are returned, so prompt text never enters a table.
    """
    eos = eos_ids(target.model, target.tokenizer)
    pad = min(eos) if eos else 0
    kwargs = dict(max_new_tokens=max_new_tokens, do_sample=not sampling.greedy, eos_token_id=sorted(eos) or None,
                  pad_token_id=pad, repetition_penalty=1.0)
    if not sampling.greedy:
        kwargs.update(temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p)
    device = model_device(target.model)
    torch.manual_seed(seed)
    corpus = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start:start + batch_size]
        width = max(len(p.ids) for p in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)  # [B, T] left-padded
        mask = torch.zeros_like(ids)
        for row, p in enumerate(chunk):
            ids[row, width - len(p.ids):] = torch.tensor(p.ids)
            mask[row, width - len(p.ids):] = 1
        with torch.inference_mode():
            out = target.model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **kwargs)
        for row in out[:, width:].tolist():  # [B, n] generated part
            cut = next((i for i, t in enumerate(row) if t in eos), len(row))
            corpus.append(row[:cut])
    return corpus


def run_sweep(base: BenchConfig, out: str | Path, gammas: Sequence[int], temperatures: Sequence[float],
              **objects) -> list[dict]:
    """``run_bench`` once per (temperature, γ) into ``out/T{T}_g{γ}``; summary rows with both added."""
    rows = []
    for temperature in temperatures:
        for gamma in gammas:
            config = dataclasses.replace(base, temperature=float(temperature), gamma=int(gamma))
            result = run_bench(config, Path(out) / f"T{temperature:g}_g{gamma}", **objects)
            rows += [{"temperature": float(temperature), "gamma": int(gamma), **row} for row in result.summary]
    return rows


def format_summary(rows: list[dict]) -> str:
    """A plain-text table of a summary for the terminal."""
    def fmt(v) -> str:
        if v is None:
            return "-"
        return f"{v:.3f}" if isinstance(v, float) and not math.isnan(v) else str(v)
    cols = ("method", "n", "tokens_per_s", "speedup", "alpha", "mean_accepted", "c", "beta",
            "predicted_speedup", "efficiency", "identical_to_ar", "identical_to_counterpart")
    cells = [[fmt(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)
