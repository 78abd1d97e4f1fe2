"""Benchmark: every method on the same prompts, interleaved, resumable, with the cost model beside it.

    python -m specrepro bench --methods ar,speculative,prompt-lookup,hf-ar,hf-assisted,hf-prompt-lookup \\
        --target smollm2-135m-instruct --draft smollm2-135m-draft --suite mixed --max-new-tokens 64 \\
        --temperature 0 --gamma 4 --dtype auto --repeats 1 --out runs/bench

A method may be listed as a *variant* with its own dtype, γ, tree size and acceptance rule, so one run compares
them side by side: ``speculative:fp32:g2``, ``prompt-lookup:bf16:gauto``, ``ar:fp32``, ``ppd:t20``,
``medusa:typical``, ``mjsd:b4:tau0.5``, ``spectr:m2``, ``bild:f0.3:r2`` (fields after the name in any order: a
dtype bf16 | fp16 | fp32 | auto, gN or gauto, tN, a rule exact | greedy | typical | ..., bN beams, mN drafts, tauX
MJSD's threshold, fX and rX BiLD's fallback and rollback thresholds).
Unset fields take ``--dtype``, ``--gamma``, ``--tree-size``, ``--acceptance``, ``--num-beams``, ``--num-drafts`` and
``--tau``.

How the timings are kept fair:

1. One warm-up run per variant on the first prompt (not recorded) before anything is timed.
2. The device profile of every dtype in use (L_fp(n) for n = 1..γ_max+1 and one draft decode step, so c and
   β(n); ``specrepro.metrics.profile.measure``) is measured at the start of each session on a realistic
   context; it predicts each variant's speedup from its real steps (``bench_summary``), and it is what
   ``--dtype auto`` and ``--gamma auto`` decide with.
3. Variants interleaved per prompt (for each prompt, for each repeat, every variant), so drift in machine load
   hits all of them alike; seed = base seed + repeat, the same for every variant.
4. Clocks synchronise with the device (``decoding.Clock``); the thread count is recorded.

Files in ``DIR``:

- ``config.json``      the arguments; a restart into ``DIR`` with different ones is refused (:class:`ResumeMismatch`);
- ``records.jsonl``    one record per (variant, prompt_id, repeat), appended and flushed as each finishes;
                       a restart skips those already written;
- ``provenance.json``  git revision, versions, device, CPU flags, the dtype of every variant and why, threads,
                       load, seeds, the device profile of every session, the T = 0 cross-check (records whose
                       tokens differ from ar or their counterpart at the same dtype) and, under ``failed``, each
                       method that raised in the last call: its error and where;
- ``summary.csv``      per variant: tokens/s, speedup vs the ``ar`` baseline, α, tokens per target call, c, β,
                       the predicted speedup and efficiency = measured / predicted, whether the rule is lossless,
                       and quality and energy: perplexity of the outputs under the target (MJSD paper Eq. 1,
                       pooled over tokens), ROUGE-L against the suite's references, joules per token (NVML on
                       CUDA, RAPL on a CPU that exposes it, else empty with the reason in the provenance),
                       and the error of a method that failed; written at the end.

A method that raises (building its drafter, warming up or on a prompt) is marked failed, said on stderr, and runs
no further in that call; every other method still runs and is written and summarised. Its records written before
the failure stay, and a restart into ``DIR`` tries its missing records again.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch

from .adaptive import AdaptiveGamma, FixedGamma
from .bench_summary import (SUMMARY_COLUMNS, format_summary, mismatches, pooled_profile, predicted_speedup,
                            read_summary, summarize, write_summary)
from .config import ACCEPTANCE_RULES, DecodeConfig, MethodParams, SamplingConfig
from .decoding import eos_ids, model_device
from .drafters import Drafter
from .generate import encode_prompt, generate_ids
from .hf_baselines import assisted_unsupported, hf_generate
from .methods import (DRAFT_MODEL_METHODS, HF_METHODS, METHODS, REGISTRY, TREE_METHODS, drafter_for, method_kind,
                      tree_cost)
from .metrics.energy import open_meter
from .metrics.quality import perplexity, rouge_l
from .metrics.profile import (DEFAULT_ALPHA_PRIOR, DEFAULT_NS, Profile, ProfileKey, candidate_dtypes, choose_dtype,
                              cpu_info, dtype_name, measure)
from .models import LoadedModel, default_device, draft_alpha_prior, load_draft, load_model, parse_dtype
from .prompts import load_prompts_file, load_suite
from .provenance import atomic_write_text, git_revision

__all__ = ["SUMMARY_COLUMNS", "BenchConfig", "BenchPrompt", "BenchResult", "ResumeMismatch", "Variant",
           "format_summary", "load_records", "predicted_speedup", "read_summary", "run_bench", "run_sweep",
           "target_corpus"]

ALL_METHODS = METHODS  # the registry's: ours and transformers' baselines
DTYPE_FIELDS = ("auto", "bf16", "fp16", "fp32")


# A variant's method-parameter fields: prefix -> (MethodParams field, type). Longer prefixes are tried first, so
# "tau0.5" is never read as a tree size and the dtypes ("fp32") are matched before "f".
PARAM_FIELDS = {"tau": ("tau", float), "kl": ("kl_bound", float), "b": ("num_beams", int),
                "m": ("num_drafts", int), "f": ("fallback_threshold", float), "r": ("rollback_threshold", float)}


def _param_field(field: str) -> tuple[str, int | float] | None:
    """(MethodParams field, value) for a label field such as "b4", "tau0.5", "kl0.05" or "r2"; None otherwise."""
    for prefix in sorted(PARAM_FIELDS, key=len, reverse=True):
        name, kind = PARAM_FIELDS[prefix]
        if field.startswith(prefix):
            text = field[len(prefix):]
            if kind is int:  # digits only, >= 1
                return (name, int(text)) if text.isdigit() and int(text) >= 1 else None
            try:
                return name, float(text)
            except ValueError:
                return None
    return None


class ResumeMismatch(ValueError):
    """``DIR`` holds a run made with different arguments."""


@dataclass(frozen=True)
class Variant:
    """One column of a benchmark: a method at a dtype, a γ and (token-tree drafters) a tree size."""

    label: str  # as listed: "speculative:fp32:g2", "medusa:t16"; the records' "method"
    method: str  # the registered method: "speculative"
    dtype: str | None  # bf16 | fp16 | fp32 | auto, or None for the run's default
    gamma: int | str  # γ or "auto"
    tree_size: int | None = None  # tN: nodes of the draft tree; None: --tree-size, else hardware-aware
    acceptance: str | None = None  # exact | greedy | typical (LOSSY) | ...; None: --acceptance
    params: tuple[tuple[str, object], ...] = ()  # MethodParams fields set by the label: bN, mN, tauX, fX, rX

    @classmethod
    def parse(cls, label: str, default_dtype: str | None, default_gamma: int | str) -> "Variant":
        method, *fields = label.split(":")
        if method not in ALL_METHODS:
            raise ValueError(f"unknown method {method!r} in {label!r}; choose from {', '.join(ALL_METHODS)}")
        dtype, gamma, tree_size, acceptance, params = default_dtype, default_gamma, None, None, {}
        for field in fields:
            if field in DTYPE_FIELDS:
                dtype = field
            elif (param := _param_field(field)) is not None:
                params[param[0]] = param[1]
            elif field in ACCEPTANCE_RULES:
                acceptance = field
            elif field.startswith("t") and field[1:].isdigit() and int(field[1:]) >= 1:
                tree_size = int(field[1:])
            elif field == "gauto":
                gamma = "auto"
            elif field.startswith("g") and field[1:].isdigit() and int(field[1:]) >= 1:
                gamma = int(field[1:])
            else:
                raise ValueError(f"bad field {field!r} in {label!r}: expected a dtype ({', '.join(DTYPE_FIELDS)}), "
                                 f"gN (N >= 1), gauto, tN (tree size N >= 1), a rule ({', '.join(ACCEPTANCE_RULES)}), "
                                 f"bN (beams), mN (drafts), tauX (MJSD's threshold), fX or rX (BiLD's τ1, τ2), "
                                 f"klX (mentored D)")
        if gamma == "auto" and method in HF_METHODS:
            raise ValueError(f"{label}: gamma auto is our loop's policy; transformers' baselines take a fixed γ")
        if tree_size is not None and method not in TREE_METHODS:
            raise ValueError(f"{label}: a tree size (tN) is for token-tree drafters ({', '.join(TREE_METHODS)})")
        if acceptance is not None and REGISTRY[method].loop != "speculative":
            raise ValueError(f"{label}: an acceptance rule is for our speculative loop")
        MethodParams(**params)  # one clear error for a value out of range
        return cls(label, method, dtype, gamma, tree_size, acceptance, tuple(sorted(params.items())))


@dataclass(frozen=True)
class BenchConfig:
    """Everything that defines a benchmark run; stored as ``config.json`` and compared on resume."""

    methods: tuple[str, ...]  # variants, run in this order for every (prompt, repeat): "ar", "speculative:fp32:g2"
    target: str  # name of the target (zoo name, folder, hub id, or a label for a model passed in)
    draft: str | None = None  # draft model for "speculative" / "hf-assisted" (layers:K allowed)
    prompts: str = "suite:mixed"  # "suite:NAME", "file:PATH", or a label for prompts passed in
    limit: int | None = None  # keep the first `limit` prompts
    max_new_tokens: int = 64
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    gamma: int | str = 4  # γ for every variant that names none; "auto": chosen each step from the profile
    gamma_max: int = 16  # largest γ that gamma auto considers
    tree_size: int | None = None  # nodes of a token-tree drafter (medusa, ppd); None: hardware-aware
    acceptance: str = "exact"  # verification rule of our loop: exact | greedy | typical (LOSSY) | ...
    preset: str | None = None  # the named warping temperature/top_k/top_p came from ("mjsd"), for the labels
    num_beams: int = 8  # MJSD's draft beams, MJGD's target beams (MethodParams)
    tau: float = 0.1  # MJSD's threshold on min(1, p(x_1:j)/q(x_1:j))
    fallback_threshold: float = 0.9  # BiLD τ1
    rollback_threshold: float = 2.0  # BiLD τ2
    num_drafts: int = 4  # SpecTr / multi-draft m
    kl_bound: float = 0.1  # mentored decoding's D
    online_buffer: int = 128  # online decoding's buffer (verification steps), L, steps, lr and loss (MethodParams)
    online_every: int = 8
    online_steps: int = 1
    online_lr: float = 1e-4
    online_divergence: str = "fkl"
    online_examples: str = "steps"
    quality: bool = True  # score every record: perplexity under the target, ROUGE-L against the references
    repeats: int = 1
    seed: int = 0  # base seed; repeat r uses seed + r
    dtype: str | None = None  # default dtype of the variants: None = the given models' (or the loader's), or auto
    device: str | None = None
    threads: int | None = None  # torch.set_num_threads; None leaves torch's default (recorded anyway)
    ngram_table: str | None = None  # .npz from NGramTable.save, for "unigram" / "bigram"
    chat_template: bool = True
    warmup_tokens: int = 16  # max_new_tokens of the unrecorded warm-up runs; 0 skips them
    cost_repeats: int = 7  # timed rounds per median of the session's device profile
    prompt_digest: str = ""  # sha256 of the encoded prompts, filled in by run_bench
    weights_digest: str = ""  # sha256 of the target's and draft's weights, filled in by run_bench

    def __post_init__(self) -> None:
        if not self.methods:
            raise ValueError(f"no method given; choose from {', '.join(ALL_METHODS)}")
        if len(set(self.methods)) != len(self.methods):
            raise ValueError(f"a method is listed twice in {self.methods}")
        if self.dtype is not None and self.dtype != "auto":
            dtype_name(self.dtype)  # one clear error for an unknown dtype
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {self.repeats}")
        if self.gamma_max < 1:
            raise ValueError(f"gamma_max must be >= 1, got {self.gamma_max}")
        self.variants()  # validates every label
        if self.temperature != 0 and any(REGISTRY[v.method].loop == "mjgd" for v in self.variants()):
            raise ValueError("mjgd searches for the argmax of the joint likelihood: it runs at temperature 0 only")
        self.decode_config("ar", 0)  # validates max_new_tokens, gamma, the sampling knobs

    def variants(self) -> list[Variant]:
        return [Variant.parse(m, self.dtype, self.gamma) for m in self.methods]

    def sampling(self) -> SamplingConfig:
        return SamplingConfig(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p)

    def method_params(self, **changes) -> MethodParams:
        """The run's method parameters (its fields named as ``MethodParams``'), with a variant's ``changes``."""
        base = {f.name: getattr(self, f.name) for f in dataclasses.fields(MethodParams)}
        return MethodParams(**{**base, **changes})

    def decode_config(self, method: str, repeat: int, max_new_tokens: int | None = None,
                      gamma: int | str | None = None, acceptance: str | None = None,
                      params: tuple[tuple[str, object], ...] = ()) -> DecodeConfig:
        config = DecodeConfig(method=method, max_new_tokens=max_new_tokens or self.max_new_tokens,
                              gamma=self.gamma if gamma is None else gamma, sampling=self.sampling(),
                              tree_size=self.tree_size, acceptance=acceptance or self.acceptance,
                              seed=self.seed + repeat, params=self.method_params(**dict(params)))
        return REGISTRY[method].resolve(config)

    def to_dict(self) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(self)))  # tuples -> lists, as read back


@dataclass(frozen=True)
class BenchPrompt:
    id: str
    ids: list[int]  # encoded prompt, chat template applied
    reference: str | None = None  # a reference answer (ROUGE-L), where the suite has one


@dataclass
class BenchResult:
    out: Path
    records: list[dict]
    summary: list[dict]
    provenance: dict
    # variant label -> {"error": exception type, "message", "where"}: the methods that raised in this call
    failed: dict[str, dict] = field(default_factory=dict)


# -------------------------------------------------------------------------------------- run files


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


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    info = cpu_info()
    return f"cpu: {info['name']} ({info['logical_cores']} logical cores)"


def _session_info(config: BenchConfig, device: torch.device) -> dict:
    import transformers
    return {
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git_revision": git_revision(),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__},
        "device": str(device), "device_name": _device_name(device),
        "cpu_kernel_flags": cpu_info()["kernel_flags"],  # what decides which bf16/fp16 kernels run
        "threads": torch.get_num_threads(),
        # Other processes on the machine skew every timing; the 1/5/15-minute load says how busy it was.
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "seeds": [config.seed + r for r in range(config.repeats)],
    }


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
    return [BenchPrompt(p.id, encode_prompt(target, list(p.messages), chat_template), p.extra.get("reference"))
            for p in prompts]


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


def _cost_context(prompts: Sequence[BenchPrompt], config: BenchConfig, context_length: int, n_max: int) -> list[int]:
    """A context as long as a typical step sees: the median prompt plus half the generation."""
    length = int(statistics.median(len(p.ids) for p in prompts)) + config.max_new_tokens // 2
    length = max(2, min(length, context_length - n_max - 1))
    longest = max(prompts, key=lambda p: len(p.ids)).ids
    return (longest * (length // len(longest) + 1))[:length]


class _Models:
    """The target and draft at every dtype a run needs. Loaded by name at each dtype (so fp32 is the real fp32
    weights, not a cast of bf16 ones), or, for models passed in, copies cast to the dtype (recorded)."""

    def __init__(self, config: BenchConfig, target: LoadedModel | None, draft: LoadedModel | None,
                 needs_draft: bool):
        self.config, self.needs_draft, self.given = config, needs_draft, target is not None
        self.by_dtype: dict[str, tuple[LoadedModel, LoadedModel | None]] = {}
        self.notes: list[str] = []
        if target is not None:
            reference = dtype_name(next(target.model.parameters()).dtype)
            if draft is not None and dtype_name(next(draft.model.parameters()).dtype) != reference:
                raise ValueError("the target and the draft passed in have different dtypes")
        else:
            device = torch.device(config.device) if config.device else None
            concrete = config.dtype if config.dtype not in (None, "auto") else None
            reference = (dtype_name(parse_dtype(concrete, device or default_device())) if config.dtype != "auto"
                         else "fp32")
            target = load_model(config.target, dtype=reference, device=config.device)
            if needs_draft and draft is None:
                draft = self._load_draft(target, reference)
        self.reference = reference  # the dtype of the models every digest and encoding uses
        self.by_dtype[reference] = (target, draft)

    def _load_draft(self, target: LoadedModel, dtype: str) -> LoadedModel:
        if self.config.draft is None:
            raise ValueError(f"methods {[m for m in self.config.methods if m.split(':')[0] in DRAFT_MODEL_METHODS]} "
                             f"need --draft NAME")
        return load_draft(self.config.draft, target, dtype=dtype)

    def at(self, dtype: str) -> tuple[LoadedModel, LoadedModel | None]:
        if dtype not in self.by_dtype:
            target, draft = self.by_dtype[self.reference]
            torch_dtype = parse_dtype(dtype, model_device(target.model))
            if self.given:
                self.notes.append(f"{dtype} models are copies of the {self.reference} models passed in, cast")
                cast = lambda m: None if m is None else LoadedModel(m.name, copy.deepcopy(m.model).to(torch_dtype),
                                                                   m.tokenizer)
                self.by_dtype[dtype] = (cast(target), cast(draft))
            else:
                t = load_model(self.config.target, dtype=dtype, device=self.config.device)
                self.by_dtype[dtype] = (t, self._load_draft(t, dtype) if self.needs_draft else None)
        return self.by_dtype[dtype]

    @property
    def target(self) -> LoadedModel:
        return self.by_dtype[self.reference][0]

    @property
    def draft(self) -> LoadedModel | None:
        return self.by_dtype[self.reference][1]


def _n_max(variants: list, config: BenchConfig) -> int:
    """The largest forward a session's profile must time: γ+1 for the largest fixed γ, or γ_max+1."""
    gammas = [config.gamma_max if v.gamma == "auto" else v.gamma for v in variants if method_kind(v.method) != "plain"]
    for v in variants:
        if v.method in TREE_METHODS:  # a tree's forward covers its nodes (and PPD's prompt tokens): the whole range
            gammas.append(63)
        elif REGISTRY[v.method].nodes is not None and v.gamma != "auto":  # m chains of γ
            gammas.append(REGISTRY[v.method].nodes(v.gamma, config.method_params(**dict(v.params))))
    return min(max(gammas, default=1) + 1, 64)


def profile_sizes(n_max: int) -> list[int]:
    """The forward sizes a bench times: the device profile's grid (every size to 17, then 20, 24, ..., 64) up to
    ``n_max``, and ``n_max`` itself. ``Profile.l_fp`` interpolates between them; timing every size up to 64 cost
    4.5x as many forward tokens for the same curve."""
    return sorted({n for n in DEFAULT_NS if n <= n_max} | {1, n_max})


def _measure_profiles(models: _Models, dtypes: Sequence[str], context: list[int], config: BenchConfig,
                      n_max: int) -> dict[str, Profile]:
    profiles = {}
    for dtype in dtypes:
        target, draft = models.at(dtype)
        key = ProfileKey.here(model_device(target.model), config.target, config.draft if draft else None, dtype,
                              context_tokens=len(context), repeats=config.cost_repeats)
        profiles[dtype] = measure(target.model, draft.model if draft else None, context, key,
                                  ns=profile_sizes(n_max), repeats=config.cost_repeats, warmup=1)
    return profiles


def _resolve_dtypes(variants: list, profiles: dict[str, Profile], models: _Models, config: BenchConfig,
                    alpha_prior: float | None) -> tuple[list, dict[str, str]]:
    """Concrete dtypes for every variant: as named, the run's reference for None, the profile's choice for
    auto (and why)."""
    resolved, reasons = [], {}
    for v in variants:
        dtype = v.dtype
        if dtype is None:
            dtype, reasons[v.label] = models.reference, "the run's default dtype"
        elif dtype == "auto":
            kind = method_kind(v.method)
            prior = alpha_prior if kind == "draft model" and alpha_prior is not None else DEFAULT_ALPHA_PRIOR
            choice = choose_dtype(profiles, kind, v.gamma, prior, config.gamma_max,
                                  tree_cost=tree_cost(v.method, None, config.target, v.gamma))  # the zoo's weights
            dtype, reasons[v.label] = choice.dtype, choice.reason
        else:
            dtype, reasons[v.label] = dtype_name(dtype), "named in the method list"
        resolved.append(dataclasses.replace(v, dtype=dtype))
    return resolved, reasons


def run_bench(config: BenchConfig, out: str | Path, *, target: LoadedModel | None = None,
              draft: LoadedModel | None = None, prompts: Sequence[BenchPrompt] | None = None,
              drafters: dict[str, Drafter] | None = None, on_record: Callable[[dict], None] | None = None,
              progress: bool = True) -> BenchResult:
    """Run (or resume) a benchmark into ``out``; models and prompts are loaded from ``config`` unless given.

    ``drafters`` overrides the drafter of a speculative method (e.g. an n-gram drafter built in memory), keyed
    by method name. ``on_record(record)`` runs after each record is written (tests interrupt a run with it).
    """
    from tqdm.auto import tqdm

    out = Path(out)
    check_config(out, config, ignore=("prompt_digest", "weights_digest"))  # before any slow loading
    variants = config.variants()
    drafters = dict(drafters or {})
    ngram = [v.label for v in variants if REGISTRY.get(v.method) and REGISTRY[v.method].needs == "n-gram table"]
    if config.ngram_table is None and any(v.method not in drafters for v in variants if v.label in ngram):
        raise ValueError(f"methods {ngram} need --ngram-table FILE (an .npz written by NGramTable.save)")
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    needs_draft = any(v.method in DRAFT_MODEL_METHODS and v.method not in drafters for v in variants)
    models = _Models(config, target, draft, needs_draft)
    if prompts is None:
        prompts = encode_prompts(models.target, config.prompts, config.limit, config.chat_template)
    prompts = list(prompts)[:config.limit] if config.limit is not None else list(prompts)
    if not prompts:
        raise ValueError("no prompts to run")
    if len({p.id for p in prompts}) != len(prompts):
        raise ValueError("prompt ids must be unique: they key the records")
    config = dataclasses.replace(config, prompt_digest=_digest(prompts), weights_digest=_weights_digest(
        models.target.model, models.draft.model if models.draft else None))
    check_config(out, config)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "config.json", json.dumps(config.to_dict(), indent=1) + "\n")
    eos = eos_ids(models.target.model, models.target.tokenizer)
    alpha_prior = draft_alpha_prior(config.draft, config.temperature) if config.draft else None

    prov_path = out / "provenance.json"
    provenance = json.loads(prov_path.read_text()) if prov_path.exists() else {"config": config.to_dict(),
                                                                                "sessions": []}
    records = load_records(out)
    done = {record_key(r) for r in records}
    todo_all = [(p, r, v.label) for p in prompts for r in range(config.repeats) for v in variants
                if (v.label, p.id, r) not in done]

    # The session's device profile, for every dtype in use (and every candidate when a variant says auto):
    # measured before any timed record, so it also decides auto dtypes the first time.
    device = model_device(models.target.model)
    auto = any(v.dtype == "auto" for v in variants)
    if "resolved_dtypes" in provenance:  # a resumed run keeps the dtypes it started with
        resolved = [dataclasses.replace(v, dtype=provenance["resolved_dtypes"][v.label]["dtype"]) for v in variants]
    else:
        resolved = None
    session = None
    if todo_all or resolved is None:
        session = _session_info(config, device)
        load, cores = session["load_average"], os.cpu_count() or 1
        if load and load[0] > cores - 0.5:
            advice = ("; with several torch threads on a shared CPU every parallel region waits for descheduled "
                      "threads (consider --threads 1)" if torch.get_num_threads() > 1 else "")
            print(f"specrepro bench: the machine is busy (load {load[0]:.1f} on {cores} cores): timings will be "
                  f"noisy{advice}", file=sys.stderr)
        dtypes = {v.dtype if v.dtype not in (None, "auto") else models.reference for v in variants}
        if auto and resolved is None:
            dtypes |= set(candidate_dtypes(device))
        if resolved is not None:
            dtypes = {v.dtype for v in resolved}
        n_max = _n_max(variants, config)
        context = _cost_context(prompts, config, models.target.context_length, n_max)
        profiles = _measure_profiles(models, sorted(dtypes, key=str), context, config, n_max)
        if resolved is None:
            resolved, reasons = _resolve_dtypes(variants, profiles, models, config, alpha_prior)
            provenance["resolved_dtypes"] = {v.label: {"dtype": v.dtype, "reason": reasons[v.label]}
                                             for v in resolved}
        session["profiles"] = {d: p.to_dict() for d, p in profiles.items()}
        base = next((v for v in resolved if v.method == "ar"), resolved[0])
        gamma = config.gamma if isinstance(config.gamma, int) else None
        bp = profiles[base.dtype]
        session["costs"] = {"dtype": base.dtype, "c": bp.c,
                            "beta": bp.beta(gamma + 1) if gamma and gamma + 1 <= bp.n_max else None}
        provenance["sessions"].append(session)
        atomic_write_text(prov_path, json.dumps(provenance, indent=1) + "\n")
    by_label = {v.label: v for v in resolved}
    profiles = _session_profiles(provenance["sessions"])

    failed: dict[str, dict] = {}  # variant label -> what it raised and where: one method never takes the others down

    def attempt(label: str, where: str, work: Callable[[], object]) -> object | None:
        """``work()`` for variant ``label``, or None if it raised: then the variant is marked failed (stderr,
        provenance, summary) and not tried again in this call."""
        if label in failed:
            return None
        try:
            return work()
        except Exception as err:  # any method's bug or refusal: recorded, and the other methods go on
            failed[label] = {"error": type(err).__name__, "message": str(err), "where": where}
            print(f"specrepro bench: {label} failed ({where}): {type(err).__name__}: {err}", file=sys.stderr)
            return None

    # Drafters, one per variant, and the tree sizes of token-tree drafters: named (tN, then --tree-size), else the
    # hardware-aware size on this run's first profile; kept in the provenance so that a resumed run uses the same
    # trees.
    sizes = provenance.setdefault("tree_sizes", {})

    def set_up(v: Variant) -> None:
        if REGISTRY[v.method].build is not None and v.label not in drafters:
            if v.method in drafters:
                drafters[v.label] = drafters[v.method]
            else:
                t, d = models.at(v.dtype)
                source = {"draft model": d, "n-gram table": config.ngram_table}.get(REGISTRY[v.method].needs)
                drafters[v.label] = drafter_for(source, v.method, t,
                                                config.decode_config(v.method, 0, params=v.params))
        if v.method not in TREE_METHODS:
            return
        if v.label not in sizes:
            if v.tree_size or config.tree_size:
                sizes[v.label] = {"size": v.tree_size or config.tree_size, "reason": "named"}
            else:
                size = REGISTRY[v.method].choose_tree_size(drafters[v.label].config, profiles[v.dtype], v.gamma)
                sizes[v.label] = {"size": size.size, "reason": size.reason}
        if drafters[v.label].tree_size != sizes[v.label]["size"]:
            drafters[v.label] = drafters[v.label].resized(sizes[v.label]["size"])  # one drafter per size

    for v in resolved:
        attempt(v.label, "setting up its drafter", lambda: set_up(v))
    atomic_write_text(prov_path, json.dumps(provenance, indent=1) + "\n")

    def policy(v: Variant):
        if v.gamma != "auto":
            return FixedGamma(v.gamma)
        kind = method_kind(v.method)
        return AdaptiveGamma.from_profile(profiles[v.dtype], model_free=kind != "draft model",
                                          alpha_prior=alpha_prior if kind == "draft model" else None,
                                          gamma_max=config.gamma_max)

    meter = open_meter(device)  # NVML / RAPL total-energy counters read before and after each generation

    def run_one(label: str, prompt: BenchPrompt, repeat: int, max_new_tokens: int | None = None):
        v = by_label[label]
        t, d = models.at(v.dtype)
        dc = config.decode_config(v.method, repeat, max_new_tokens, gamma=v.gamma, acceptance=v.acceptance,
                                  params=v.params)
        why = provenance["resolved_dtypes"][label]["reason"]
        with meter.measure() as energy:
            if REGISTRY[v.method].loop == "transformers":
                rec = hf_generate(v.method, t, prompt.ids, dc, eos, d)
                rec.provenance = {"dtype": v.dtype, "dtype_reason": why}
            else:
                rec = generate_ids(t, prompt.ids, dc, draft=drafters.get(label), gamma_policy=policy(v),
                                   provenance={"dtype_reason": why})
        rec.set_energy(energy.joules, energy.source, energy.reason)
        return rec

    def record(label: str, prompt: BenchPrompt, repeat: int) -> dict:
        """One timed run as the row ``records.jsonl`` keeps, with its quality scores."""
        rec, v = run_one(label, prompt, repeat), by_label[label]
        return {**rec.to_dict(), "method": label, "base_method": v.method, "prompt_id": prompt.id, "repeat": repeat,
                "seed": config.seed + repeat, "target": config.target,
                "draft": config.draft if v.method in DRAFT_MODEL_METHODS else None, **quality(rec, prompt)}

    def quality(rec, prompt: BenchPrompt) -> dict:
        """MJSD paper Eq. (1) under the run's reference target (one dtype for every variant), and ROUGE-L."""
        if not config.quality:
            return {}
        ppl = perplexity(models.target.model, prompt.ids, rec.token_ids)
        return {"perplexity": ppl.ppl, "nll_sum": None if ppl.n == 0 else ppl.mean_nll * ppl.n, "nll_tokens": ppl.n,
                "rouge_l": rouge_l(rec.text, prompt.reference) if prompt.reference is not None else None}

    # A baseline that cannot run with these models is skipped, said on stderr and in the provenance; its
    # summary row has n = 0 rather than the whole benchmark failing.
    skipped = {}
    for v in resolved:
        if v.method == "hf-assisted" and models.draft is not None and (reason := assisted_unsupported(models.draft.model)):
            skipped[v.label] = reason
            print(f"specrepro bench: skipping {v.label}: {reason}", file=sys.stderr)
    todo = [job for job in todo_all if job[2] not in skipped]

    if todo:
        session["skipped"] = skipped
        session["model_notes"] = models.notes
        session["energy"] = {"source": meter.source, "scope": getattr(meter, "scope", None), "reason": meter.reason}
        session["quality"] = ({"perplexity": f"MJSD Eq. (1) under the {models.reference} target, unwarped",
                               "rouge_l": "rouge-score rougeL F-measure, stemmed, against the suite's references"}
                              if config.quality else None)
        if config.warmup_tokens > 0:
            for v in resolved:
                if v.label not in skipped:
                    attempt(v.label, "warm-up", lambda: run_one(v.label, prompts[0], 0,
                                                                 min(config.warmup_tokens, config.max_new_tokens)))
        bar = tqdm(total=len(done) + len(todo), initial=len(done), desc=f"bench {out.name}", file=sys.stderr,
                   disable=not progress, unit="run")
        written = 0
        with open(out / "records.jsonl", "a") as handle:
            for prompt, repeat, label in todo:
                row = attempt(label, f"prompt {prompt.id}, repeat {repeat}", lambda: record(label, prompt, repeat))
                if row is None:
                    bar.update(1)
                    continue
                handle.write(json.dumps(row) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
                records.append(row)
                written += 1
                bar.update(1)
                if on_record is not None:
                    on_record(row)
        bar.close()
        session["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        session["records_written"] = written
        atomic_write_text(prov_path, json.dumps(provenance, indent=1) + "\n")

    greedy = config.temperature == 0
    baseline = next((v.label for v in resolved if v.label == "ar"), next((v.label for v in resolved
                                                                          if v.method == "ar"), None))
    summary = summarize(records, resolved, greedy, profiles, baseline, failed)
    write_summary(out, summary)
    provenance["failed"] = failed
    # The T = 0 cross-check: every method should reproduce greedy decoding token for token; in bf16 a
    # (γ+1)-token forward can round differently from a 1-token one and flip a near-tie argmax.
    provenance["t0_mismatches"] = mismatches(records, resolved, greedy)
    atomic_write_text(prov_path, json.dumps(provenance, indent=1) + "\n")
    for line in provenance["t0_mismatches"]:
        print(f"specrepro bench: T=0 tokens differ: {line}", file=sys.stderr)
    return BenchResult(out=out, records=records, summary=summary, provenance=provenance, failed=failed)


def _session_profiles(sessions: list[dict]) -> dict[str, Profile]:
    """Per dtype, the profile for the summary: pooled over the sessions that measured it (one, unless resumed)."""
    by_dtype: dict[str, list[Profile]] = {}
    for s in sessions:
        for dtype, d in (s.get("profiles") or {}).items():
            by_dtype.setdefault(dtype, []).append(Profile.from_dict(d))
    return {dtype: pooled_profile(ps) for dtype, ps in by_dtype.items()}


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
            config = dataclasses.replace(base, temperature=float(temperature), gamma=gamma)
            result = run_bench(config, Path(out) / f"T{temperature:g}_g{gamma}", **objects)
            rows += [{"temperature": float(temperature), **row, "gamma": gamma} for row in result.summary]
    return rows
