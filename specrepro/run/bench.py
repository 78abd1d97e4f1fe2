"""Benchmark: every method on the same prompts, interleaved, resumable, with the cost model beside it.

    python -m specrepro bench --methods ar,speculative,prompt-lookup,hf-ar,hf-assisted,hf-prompt-lookup \\
        --target smollm2-135m-instruct --draft smollm2-135m-draft --suite mixed --max-new-tokens 64 \\
        --temperature 0 --gamma 4 --dtype auto --repeats 1 --out runs/bench

A method may be listed as a *variant* with its own dtype, γ, tree size, acceptance rule and parameters, so one run
compares them side by side: ``speculative:fp32:g2``, ``prompt-lookup:bf16:gauto``, ``ar:fp32``, ``ppd:t20``,
``medusa:typical``, ``mjsd:b4:tau0.5``, ``spectr:m2``, ``bild:f0.3:r2``, ``mentored:kl0.05`` (fields after the name in
any order: a dtype bf16 | fp16 | fp32 | auto, gN or gauto, tN, a rule exact | greedy | typical, and the method's own
parameters by the label prefix its ``Params`` declares: ``python -m specrepro methods`` lists them).
Unset fields take ``--dtype``, ``--gamma``, ``--tree-size``, ``--acceptance`` and the parameter flags given
(``--num-beams``, ``--tau``, ...), else the method's defaults.

How the timings are kept fair:

1. One warm-up run per variant on the first prompt (not recorded) before anything is timed.
2. The device profile of every dtype in use (L_fp(n) for n = 1..γ_max+1 and one draft decode step, so c and
   β(n); ``specrepro.metrics.profile.measure``) is measured at the start of each session on a realistic
   context; it predicts each variant's speedup from its real steps (``bench_summary``), and it is what
   ``--dtype auto`` and ``--gamma auto`` decide with.
3. Variants interleaved per prompt (for each prompt, for each repeat, every variant), so drift in machine load
   hits all of them alike; seed = base seed + repeat, the same for every variant.
4. Clocks synchronise with the device (``decoding.Clock``); the thread count is recorded.

``--batch-size B`` (default 1) decodes the prompts B at a time in one batched run per (batch, repeat, variant)
(``generate.generate_batch``, ``specrepro.decode.batched``): the first B prompts are batch 0, the next B batch 1, and so
on. Every variant must batch (``Method.batches``, derived from the drafter classes: ar, speculative, prompt-lookup,
unigram, bigram, medusa, mentored; one clear error otherwise, before a model loads), so the baseline is batched ar.
Each prompt still gets its own record under the same key, with its batch-1 seed (so its tokens are its batch-1
run's), ``batch_size`` and its ``batch``; its ``wall_time_s`` is its latency within the batch. The summary's
tokens/s is throughput (every row's tokens over the batches' wall times) and ``latency_per_token_s`` each row's
view; the device profile is timed over B rows per forward (``ProfileKey.batch``), so c, β and the predicted speedup
are the batched step's (β(B, γ+1) of the survey blog). Energy is the batch's, shared among its rows by their tokens.

Files in ``DIR``:

- ``.lock``            held (``flock``) by the one process running a bench in ``DIR``; a second is refused;
- ``config.json``      the arguments; a restart into ``DIR`` with different ones is refused (:class:`ResumeMismatch`);
- ``records.jsonl``    one record per (variant, prompt_id, repeat), appended and flushed as each finishes;
                       a restart skips those already written; a line that is not a record, or repeats one, is
                       named on stderr and the file as found kept as ``records.jsonl.damaged-<time>``
                       (:func:`repair_records`), and only the missing records are measured again;
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
import fcntl
import functools
import hashlib
import json
import os
import platform
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch

from .bench_summary import (SUMMARY_COLUMNS, format_summary, mismatches, pooled_profile, predicted_speedup,
                            read_summary, summarize, write_summary)
from ..acceptance import TREE_RULES
from ..decode.adaptive import FixedGamma
from ..engine.compiled import compile_forward
from ..core.config import DecodeConfig, SamplingConfig
from ..core.decoding import check_prompt, eos_ids, model_device
from ..drafters import Drafter
from ..core.executor import LOCAL, ExecutorConfig, run_cells
from .generate import encode_prompt, generate_batch, generate_ids
from .hf_baselines import assisted_unsupported, hf_generate
from ..methods import METHODS, Cost, Loop, Method, Needs, check_parameters_taken, method, parameter_fields
from ..metrics.energy import open_meter
from ..metrics.quality import perplexity, rouge_l
from ..metrics.profile import DEFAULT_NS, Profile, ProfileKey, candidate_dtypes, cpu_info, dtype_name, measure
from ..engine.models import (LoadedModel, default_device, draft_alpha_prior, load_draft, load_model, load_tokenizer,
                     parse_dtype)
from .peers import LlamaCppPeer, check_runnable, gguf_for
from .plan import Plan, RunRequest, plan_run
from ..core.prompts import load_prompts_file, load_suite
from ..core.cli import check_writable
from ..core.provenance import atomic_write_bytes, atomic_write_text, git_revision

__all__ = ["SUMMARY_COLUMNS", "BenchConfig", "BenchPrompt", "BenchResult", "ResumeMismatch", "Variant",
           "format_summary", "load_records", "predicted_speedup", "read_summary", "run_bench", "run_sweep",
           "target_corpus"]

ALL_METHODS = METHODS  # the registry's: ours, transformers' and llama.cpp's baselines
DTYPE_FIELDS = ("auto", "bf16", "fp16", "fp32")
LOCK = ".lock"  # in a run folder: held (flock) by the process running a bench there


def _param_field(spec: Method, field: str) -> tuple[str, int | float | str] | None:
    """(parameter name, value) for a label field of ``spec``'s own parameters ("b4", "tau0.5", "kl0.05",
    "shapechain"), by the label prefixes its Params declares; None when the field is none of them. Longer prefixes are tried first."""
    fields = spec.label_fields()
    for prefix in sorted(fields, key=len, reverse=True):
        if field.startswith(prefix):
            f, text = fields[prefix], field[len(prefix):]
            if f.metadata.get("choices"):  # a word of its choices ("eagle:shapechain")
                return (f.name, text) if text in f.metadata["choices"] else None
            if isinstance(f.default, int):  # digits only
                return (f.name, int(text)) if text.isdigit() else None
            try:
                return f.name, float(text)
            except ValueError:
                return None
    return None


class ResumeMismatch(ValueError):
    """``DIR`` holds a run made with different arguments."""


@dataclass(frozen=True)
class Variant:
    """One column of a benchmark: a method at a dtype, a γ, (token-tree drafters) a tree size and its parameters."""

    label: str  # as listed: "speculative:fp32:g2", "medusa:t16"; the records' "method"
    method: Method  # the registered method
    dtype: str | None  # bf16 | fp16 | fp32 | auto, or None for the run's default
    gamma: int | str  # γ or "auto"
    tree_size: int | None = None  # tN: nodes of the draft tree; None: --tree-size, else hardware-aware
    acceptance: str | None = None  # exact | greedy | typical (LOSSY); None: --acceptance
    params: tuple[tuple[str, object], ...] = ()  # the method's parameters set by the label: bN, mN, tauX, fX, rX
    compiled: bool = False  # "compiled": its models' forwards through torch.compile (specrepro.engine.compiled), own copies

    @classmethod
    def parse(cls, label: str, default_dtype: str | None, default_gamma: int | str) -> "Variant":
        name, *fields = label.split(":")
        if name not in METHODS:
            raise ValueError(f"unknown method {name!r} in {label!r}; choose from {', '.join(METHODS)}")
        spec = method(name)
        dtype, gamma, tree_size, acceptance, params, compiled = default_dtype, default_gamma, None, None, {}, False
        for part in fields:
            if part in DTYPE_FIELDS:
                if not spec.loop.own_weights:
                    raise ValueError(f"{label}: llama.cpp decodes the GGUF in its own types; a dtype is for our loops "
                                     f"and transformers'")
                dtype = part
            elif part == "compiled":
                compiled = True
            elif (param := _param_field(spec, part)) is not None:
                params[param[0]] = param[1]
            elif part in TREE_RULES:
                acceptance = part
            elif part.startswith("t") and part[1:].isdigit() and int(part[1:]) >= 1:
                tree_size = int(part[1:])
            elif part == "gauto":
                gamma = "auto"
            elif part.startswith("g") and part[1:].isdigit() and int(part[1:]) >= 1:
                gamma = int(part[1:])
            else:
                own = ", ".join(f"{k}X ({f.name})" for k, f in spec.label_fields().items())
                raise ValueError(f"bad field {part!r} in {label!r}: expected a dtype ({', '.join(DTYPE_FIELDS)}), "
                                 f"gN (N >= 1), gauto, tN (tree size N >= 1), a rule ({', '.join(TREE_RULES)}), "
                                 f"compiled"
                                 + (f", or {name}'s own {own}" if own else f" ({name} has no parameters)"))
        if gamma == "auto" and spec.loop.baseline:
            raise ValueError(f"{label}: gamma auto is our loop's policy; {spec.loop.value}'s baselines take a fixed γ")
        if tree_size is not None and not spec.token_tree:
            raise ValueError(f"{label}: a tree size (tN) is for token-tree drafters "
                             f"({', '.join(m for m in METHODS if method(m).token_tree)})")
        if acceptance is not None and spec.loop is not Loop.SPECULATIVE:
            raise ValueError(f"{label}: an acceptance rule is for our speculative loop")
        if compiled and spec.loop.baseline:
            raise ValueError(f"{label}: compiled is for our loops; {spec.loop.value} compiles (or not) on its own")
        spec.params(**params)  # one clear error for a value out of range
        return cls(label, spec, dtype, gamma, tree_size, acceptance, tuple(sorted(params.items())), compiled)


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
    # method parameters given for the whole run (--tau 0.5): (name, value) pairs, each taken by some listed method;
    # a variant's label overrides them, the method's Params defaults fill the rest
    params: tuple[tuple[str, object], ...] = ()
    quality: bool = True  # score every record: perplexity under the target, ROUGE-L against the references
    repeats: int = 1
    batch_size: int = 1  # prompts decoded at once (specrepro.decode.batched); > 1: every variant must batch
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
        if not isinstance(self.batch_size, int) or isinstance(self.batch_size, bool) or self.batch_size < 1:
            raise ValueError(f"--batch-size must be an integer >= 1, got {self.batch_size!r}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"--limit must be >= 1 (the first N prompts), got {self.limit}")
        if self.warmup_tokens < 0:
            raise ValueError(f"--warmup-tokens must be >= 0 (0: no warm-up), got {self.warmup_tokens}")
        if self.gamma_max < 1:
            raise ValueError(f"gamma_max must be >= 1, got {self.gamma_max}")
        object.__setattr__(self, "params", tuple(sorted(dict(self.params).items())))  # one order, as stored
        variants = self.variants()  # validates every label
        given = {**dict(self.params), **({} if self.acceptance == "exact" else {"acceptance": self.acceptance}),
                 **({} if self.tree_size is None else {"tree_size": self.tree_size})}
        check_parameters_taken(given, [v.method for v in variants])
        if self.temperature != 0 and any(v.method.loop is Loop.MJGD for v in variants):
            raise ValueError("mjgd searches for the argmax of the joint likelihood: it runs at temperature 0 only")
        for v in variants:
            self.decode_config(v, 0)  # validates max_new_tokens, gamma, the sampling knobs, the parameters
            v.method.check_batch(self.batch_size, v.gamma)
        check_runnable([v.label for v in variants if v.method.loop is Loop.LLAMA_CPP], self.target)

    def variants(self) -> list[Variant]:
        return [Variant.parse(m, self.dtype, self.gamma) for m in self.methods]

    def sampling(self) -> SamplingConfig:
        return SamplingConfig(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p)

    def decode_config(self, variant: Variant, repeat: int, max_new_tokens: int | None = None) -> DecodeConfig:
        """The resolved DecodeConfig of ``variant`` at ``repeat`` (seed = base seed + repeat)."""
        params = variant.method.params_from({**dict(self.params), **dict(variant.params)})
        return variant.method.config(max_new_tokens=max_new_tokens or self.max_new_tokens, gamma=variant.gamma,
                                     sampling=self.sampling(), tree_size=variant.tree_size or self.tree_size,
                                     acceptance=variant.acceptance or self.acceptance, seed=self.seed + repeat,
                                     params=params)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["params"] = dict(self.params)
        return json.loads(json.dumps(d))  # tuples -> lists, as read back

    @classmethod
    def normalised(cls, stored: dict) -> dict:
        """A stored config.json in today's form: a run written before the parameters were the methods' own kept
        every parameter as a field of its own (num_beams, tau, ...); those that differ from their method's default
        become ``params`` (the defaults are what today's run uses without them)."""
        d, fields = dict(stored), parameter_fields()
        d.setdefault("batch_size", 1)  # (a run written before --batch-size ran one prompt at a time)
        old = {k: d.pop(k) for k in list(d) if k in fields}
        if old and "params" not in d:
            d["params"] = {k: v for k, v in old.items() if v != fields[k][0].default}
        return d


@dataclass(frozen=True)
class BenchPrompt:
    id: str
    ids: list[int]  # encoded prompt, chat template applied
    reference: str | None = None  # a reference answer (ROUGE-L), where the suite has one
    where: str = ""  # how an error names it: "<file>:<line>", or its suite and id


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
    """Refuse to resume into ``out`` if its config.json differs from ``config`` (``ignore``d keys aside), or is not a
    bench's at all (a model folder's)."""
    path = Path(out) / "config.json"
    if not path.exists():
        return
    try:
        stored = json.loads(path.read_text())
    except (ValueError, OSError) as err:
        raise ValueError(f"--out {out}: its config.json cannot be read as a bench's ({err})") from None
    if not isinstance(stored, dict) or not {"methods", "target", "prompts"} <= set(stored):
        raise ValueError(f"--out {out} is not a bench folder: its config.json is not a bench's (a model's?); "
                         f"choose a new or empty folder")
    stored, current = BenchConfig.normalised(stored), config.to_dict()
    diff = sorted(k for k in set(stored) | set(current)
                  if k not in ignore and stored.get(k, "<missing>") != current.get(k, "<missing>"))
    if diff:
        short = lambda v: repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
        lines = "; ".join(f"{k}: stored {short(stored.get(k, '<missing>'))}, now {short(current.get(k, '<missing>'))}"
                          for k in diff[:3]) + (f"; and {len(diff) - 3} more" if len(diff) > 3 else "")
        raise ResumeMismatch(f"--out {out} holds a benchmark made with other arguments ({lines}); resume it with "
                             f"its own arguments (in its config.json) or use another --out")


def read_records(out: Path) -> tuple[list[bytes], list[str]]:
    """The lines of ``out``/records.jsonl that are records, in order, each (method, prompt_id, repeat) once, and what
    is wrong with the others, naming their line: not JSON, not a record, cut short, or a key written twice."""
    path = Path(out) / "records.jsonl"
    if not path.exists():
        return [], []
    good, problems, seen = [], [], set()
    with open(path, "rb") as handle:
        for n, line in enumerate(handle, start=1):
            try:
                if not line.endswith(b"\n"):
                    raise ValueError("cut short")
                key = record_key(json.loads(line))
            except (ValueError, KeyError, TypeError) as err:
                problems.append(f"records.jsonl:{n} is not a record ({type(err).__name__}: {str(err)[:60]})")
                continue
            if key in seen:
                problems.append(f"records.jsonl:{n} repeats the record of {key}")
                continue
            seen.add(key)
            good.append(line)
    return good, problems


def load_records(out: Path) -> list[dict]:
    """The records written so far, each (method, prompt_id, repeat) once; the file is not changed."""
    return [json.loads(line) for line in read_records(out)[0]]


def repair_records(out: Path) -> list[dict]:
    """The records, with damage reported, never silently repaired: when a line is not a record (or repeats one),
    the file as found is moved aside to records.jsonl.damaged-<time>, the valid records are kept byte for byte, and
    each problem is said on stderr; the missing records are then measured again."""
    good, problems = read_records(out)
    if problems:
        path = Path(out) / "records.jsonl"
        aside = path.with_name(f"records.jsonl.damaged-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
        shutil.copy2(path, aside)
        atomic_write_bytes(path, b"".join(good))
        for line in problems[:5] + ([f"and {len(problems) - 5} more"] if len(problems) > 5 else []):
            print(f"specrepro bench: {line}", file=sys.stderr)
        print(f"specrepro bench: kept the {len(good)} valid records of {path}; the file as found is {aside.name}; "
              f"the missing records are measured again", file=sys.stderr)
    return [json.loads(line) for line in good]


class RunFolder:
    """A bench's ``--out`` folder, held by one process: made if missing and locked (an exclusive ``flock`` on
    DIR/.lock, the holder's pid in it) before anything slow, so a second bench there is refused at once. A folder
    this call made (with any parents it made) that kept no record is removed again if the call fails or is
    interrupted, so nothing half-written stays."""

    def __init__(self, out: Path):
        self.out, self.made, self.handle = Path(out), None, None

    def __enter__(self) -> "RunFolder":
        check_writable(self.out, "--out")
        if not self.out.exists():
            self.made = next(p for p in [self.out, *self.out.parents] if p.parent.exists())  # the top folder made
            self.out.mkdir(parents=True)
        try:
            self.lock()
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def lock(self) -> None:
        handle = open(self.out / LOCK, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            pid = handle.read().strip()
            handle.close()
            raise ValueError(f"--out {self.out}: another process{f' (pid {pid})' if pid else ''} is running a bench "
                             f"there; wait for it to finish, or use another --out") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self.handle = handle

    def __exit__(self, kind, err, tb) -> None:
        if kind is not None and self.made is not None and not read_records(self.out)[0]:
            shutil.rmtree(self.made, ignore_errors=True)
        if self.handle is not None:
            self.handle.close()  # releases the lock
            self.handle = None


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
    """``suite:NAME`` or ``file:PATH`` -> the first ``limit`` prompts, encoded (only ``target.tokenizer`` is read)."""
    kind, _, name = source.partition(":")
    if kind == "suite":
        prompts = load_suite(name, limit=limit)
    elif kind == "file":
        prompts = load_prompts_file(name)[:limit]
    else:
        raise ValueError(f"prompt source must be suite:NAME or file:PATH, got {source!r}")
    return [BenchPrompt(p.id, encode_prompt(target, list(p.messages), chat_template), p.extra.get("reference"),
                        p.where) for p in prompts]


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
    """A context as long as a typical step sees: the median prompt plus half the generation. At --batch-size > 1 a
    step attends over its batch's longest row (the shorter ones are padded to it): the median over the batches of
    their longest prompt, plus half the generation."""
    size = config.batch_size
    widths = [max(len(p.ids) for p in prompts[i:i + size]) for i in range(0, len(prompts), size)]
    typical = statistics.median(widths) if size > 1 else statistics.median(len(p.ids) for p in prompts)
    length = int(typical) + config.max_new_tokens // 2
    length = max(2, min(length, context_length - n_max - 1))
    longest = max(prompts, key=lambda p: len(p.ids)).ids
    return (longest * (length // len(longest) + 1))[:length]


class _Models:
    """The target and draft at every dtype a run needs. Loaded by name at each dtype (so fp32 is the real fp32
    weights, not a cast of bf16 ones), or, for models passed in, copies cast to the dtype (recorded)."""

    def __init__(self, config: BenchConfig, target: LoadedModel | None, draft: LoadedModel | None,
                 needs_draft: bool):
        self.config, self.needs_draft, self.given = config, needs_draft, target is not None
        # dtype (or (dtype, "compiled")) -> (target, draft)
        self.by_dtype: dict[str | tuple[str, str], tuple[LoadedModel, LoadedModel | None]] = {}
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
            users = [v.label for v in self.config.variants() if v.method.needs is Needs.DRAFT_MODEL]
            raise ValueError(f"methods {users} need --draft NAME")
        return load_draft(self.config.draft, target, dtype=dtype)

    def at(self, dtype: str, compiled: bool = False) -> tuple[LoadedModel, LoadedModel | None]:
        """The models at ``dtype``; with ``compiled``, a copy of them whose forwards run through torch.compile (the
        eager ones stay as they are for the variants that run eagerly)."""
        if compiled:
            if (dtype, "compiled") not in self.by_dtype:
                copies = [None if m is None else LoadedModel(m.name, compile_forward(copy.deepcopy(m.model)),
                                                             m.tokenizer) for m in self.at(dtype)]
                self.by_dtype[dtype, "compiled"] = tuple(copies)
            return self.by_dtype[dtype, "compiled"]
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


def _n_max(variants: list[Variant], config: BenchConfig) -> int:
    """The largest forward a session's profile must time: γ+1 for the largest fixed γ, or γ_max+1."""
    gammas = [config.gamma_max if v.gamma == "auto" else v.gamma for v in variants if v.method.cost is not Cost.PLAIN]
    for v in variants:
        if v.method.token_tree:  # a tree's forward covers its nodes (and PPD's prompt tokens): the whole range
            gammas.append(63)
        elif v.method.nodes is not None and v.gamma != "auto":  # m chains of γ
            gammas.append(v.method.draft_nodes(v.gamma, config.decode_config(v, 0).params))
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
        # The bench times its steps at its own prompts' context already (``_cost_context``): no longer contexts, and
        # the prefill (which --dtype auto weighs) at its median prompt length only.
        prompt = max(1, len(context) - config.max_new_tokens // 2)
        key = ProfileKey.here(model_device(target.model), config.target, config.draft if draft else None, dtype,
                              context_tokens=len(context), repeats=config.cost_repeats, contexts=(),
                              prefill_sizes=(prompt,), batch=config.batch_size)
        profiles[dtype] = measure(target.model, draft.model if draft else None, context, key,
                                  ns=profile_sizes(n_max), repeats=config.cost_repeats, warmup=1)
    return profiles


def _request(v: Variant, config: BenchConfig, models: _Models, device: torch.device, alpha: float | None,
             kept: dict, prompt_tokens: int | None = None) -> RunRequest:
    """What ``v`` asks of ``plan_run``; a resumed run keeps the dtype and tree size its first session chose. Auto
    choices weigh the suite's mean prompt length ``prompt_tokens`` (its prefill, and the step at its context)."""
    dtype = kept.get("dtype", {}).get(v.label)
    tree = kept.get("tree_sizes", {}).get(v.label)
    named_tree = v.tree_size or config.tree_size
    return RunRequest(dtype=dtype["dtype"] if dtype else v.dtype, gamma=v.gamma, gamma_max=config.gamma_max,
                      tree_size=tree["size"] if tree else named_tree, alpha_prior=alpha, target=config.target,
                      candidates=candidate_dtypes(device), default_dtype=models.reference,
                      dtype_reason=dtype["reason"] if dtype else (None if v.dtype is None else "named in the method list"),
                      tree_size_reason=tree["reason"] if tree else "named", prompt_tokens=prompt_tokens,
                      new_tokens=config.max_new_tokens if prompt_tokens else None)


class _Run:
    """One call of ``run_bench``: its folder, provenance, records and the plan of every variant."""

    def __init__(self, out: Path, config: BenchConfig, models: _Models, prompts: list[BenchPrompt],
                 drafters: dict[str, Drafter]):
        self.out, self.config, self.models, self.prompts, self.given = out, config, models, prompts, drafters
        self.variants = config.variants()
        self.prov_path = out / "provenance.json"
        self.provenance = (json.loads(self.prov_path.read_text()) if self.prov_path.exists()
                           else {"config": config.to_dict(), "sessions": []})
        self.records = repair_records(out)
        self.written = {record_key(r) for r in self.records}
        self.done = len(self.written)
        # The prompts in batches of --batch-size (one prompt each at batch size 1); a job is (batch, repeat, variant),
        # to do while any of its prompts lacks its record.
        size = config.batch_size
        self.batches = [prompts[i:i + size] for i in range(0, len(prompts), size)]
        self.todo = [(g, r, v.label) for g, batch in enumerate(self.batches) for r in range(config.repeats)
                     for v in self.variants if any((v.label, p.id, r) not in self.written for p in batch)]
        self.device = model_device(models.target.model)
        self.alpha = draft_alpha_prior(config.draft, config.temperature) if config.draft else None
        self.failed: dict[str, dict] = {}  # label -> what it raised and where: one method never takes the others down
        self.plans: dict[str, Plan] = {}
        self.session: dict | None = None

    def save(self) -> None:
        atomic_write_text(self.prov_path, json.dumps(self.provenance, indent=1) + "\n")

    def attempt(self, label: str, where: str, work: Callable[[], object]) -> object | None:
        """``work()`` for variant ``label``, or None if it raised: then the variant is marked failed (stderr,
        provenance, summary) and not tried again in this call."""
        if label in self.failed:
            return None
        try:
            return work()
        except Exception as err:  # any method's bug or refusal: recorded, and the other methods go on
            self.failed[label] = {"error": type(err).__name__, "message": str(err), "where": where}
            print(f"specrepro bench: {label} failed ({where}): {type(err).__name__}: {err}", file=sys.stderr)
            return None

    def start_session(self) -> None:
        """The session's device profile of every dtype in use (every candidate when a variant says auto), measured
        before any timed record, then every variant's plan: dtype, γ policy, tree size and drafter."""
        kept = {"dtype": self.provenance.get("resolved_dtypes", {}), "tree_sizes": self.provenance.get("tree_sizes", {})}
        if self.todo or not kept["dtype"]:
            self.session = _session_info(self.config, self.device)
            _warn_if_busy(self.session)
            torch_variants = [v for v in self.variants if v.method.loop.own_weights]  # (llama.cpp's: no profile)
            dtypes = {kept["dtype"][v.label]["dtype"] if v.label in kept["dtype"] else
                      (v.dtype if v.dtype not in (None, "auto") else self.models.reference) for v in torch_variants}
            if any(v.dtype == "auto" and v.label not in kept["dtype"] for v in torch_variants):
                dtypes |= set(candidate_dtypes(self.device))
            n_max = _n_max(self.variants, self.config)
            context = _cost_context(self.prompts, self.config, self.models.target.context_length, n_max)
            profiles = _measure_profiles(self.models, sorted(dtypes, key=str), context, self.config, n_max)
            self.session["profiles"] = {d: p.to_dict() for d, p in profiles.items()}
            self.provenance["sessions"].append(self.session)
        self.profiles = _session_profiles(self.provenance["sessions"])
        for v in self.variants:
            self.attempt(v.label, "planning its run", lambda: self._plan(v, kept))
        self.provenance["resolved_dtypes"] = {label: {"dtype": p.dtype, "reason": p.dtype_reason}
                                              for label, p in self.plans.items()}
        self.provenance["tree_sizes"] = {label: {"size": p.tree_size, "reason": p.tree_size_reason}
                                         for label, p in self.plans.items() if p.tree_size is not None}
        if self.session is not None:
            base = next((self.plans[v.label] for v in self.variants if v.method.name == "ar" and v.label in self.plans),
                        next((p for p in self.plans.values() if p.method.loop.own_weights), None))
            gamma = self.config.gamma if isinstance(self.config.gamma, int) else None
            bp = self.profiles[base.dtype] if base is not None else None
            self.session["costs"] = None if bp is None else {
                "dtype": base.dtype, "c": bp.c, "beta": bp.beta(gamma + 1) if gamma and gamma + 1 <= bp.n_max else None}
        self.save()

    @functools.cached_property
    def peer(self) -> LlamaCppPeer:
        """llama.cpp on the target's GGUF with the run's threads (loaded by its first run)."""
        return LlamaCppPeer(gguf_for(self.config.target), threads=torch.get_num_threads())

    def _plan(self, v: Variant, kept: dict) -> None:
        if not v.method.loop.own_weights:  # llama.cpp: the GGUF's own types, a fixed γ
            self.plans[v.label] = Plan(v.method, self.peer.model_type, "llama.cpp decodes the GGUF in its own types",
                                       FixedGamma(v.gamma if v.method.cost is not Cost.PLAIN else 1), "named")
            return
        def models(dtype: str):
            target, draft = self.models.at(dtype, v.compiled)
            return target, v.method.needs.source(draft, self.config.ngram_table)  # self-drafting: the zoo's
        given = self.given.get(v.label, self.given.get(v.method.name))
        mean_prompt = round(sum(len(p.ids) for p in self.prompts) / len(self.prompts)) if self.prompts else None
        request = _request(v, self.config, self.models, self.device, self.alpha, kept, mean_prompt)
        plan = plan_run(v.method, self.profiles, request,
                        models=None if given is not None else models, config=self.config.decode_config(v, 0))
        if given is not None:
            plan.drafter = given
        if plan.tree_size is not None and plan.drafter.tree_size != plan.tree_size:
            plan.drafter = plan.drafter.resized(plan.tree_size)  # a drafter passed in, at another size
        self.plans[v.label] = plan

    def job(self, label: str, repeat: int, max_new_tokens: int | None = None):
        """(variant, plan, target, draft, resolved DecodeConfig) of ``label``'s run at ``repeat``."""
        v, plan = next(v for v in self.variants if v.label == label), self.plans[label]
        t, d = self.models.at(plan.dtype, v.compiled)
        return v, plan, t, d, plan.config(self.config.decode_config(v, repeat, max_new_tokens))

    def run_one(self, label: str, prompt: BenchPrompt, repeat: int, max_new_tokens: int | None = None):
        v = next(v for v in self.variants if v.label == label)
        if not v.method.loop.own_weights:  # llama.cpp: none of our models at its "dtype"
            dc = self.plans[label].config(self.config.decode_config(v, repeat, max_new_tokens))
            with self.meter.measure() as energy:
                rec = self.peer.generate(v.method, prompt.ids, dc, self.eos, self.models.target.tokenizer)
            rec.set_energy(energy.joules, energy.source, energy.reason)
            return rec
        v, plan, t, d, dc = self.job(label, repeat, max_new_tokens)
        with self.meter.measure() as energy:
            if v.method.loop is Loop.TRANSFORMERS:
                rec = hf_generate(v.method, t, prompt.ids, dc, self.eos, d)
                rec.provenance = {"dtype": plan.dtype, "dtype_reason": plan.dtype_reason}
            else:
                rec = generate_ids(t, prompt.ids, dc, draft=plan.drafter, gamma_policy=plan.gamma_policy,
                                   provenance={**plan.provenance(), **({"compiled": True} if v.compiled else {})})
        rec.set_energy(energy.joules, energy.source, energy.reason)
        return rec

    def run_batch(self, label: str, batch: list[BenchPrompt], repeat: int,
                  max_new_tokens: int | None = None) -> list:
        """The prompts of ``batch`` decoded at once (``generate.generate_batch``), each row drafted by a drafter of its
        own built from the plan's source, every row seeded as its batch-1 run; the batch's energy shared among its
        rows by their tokens."""
        v, plan, t, d, dc = self.job(label, repeat, max_new_tokens)
        with self.meter.measure() as energy:
            recs = generate_batch(t, [p.ids for p in batch], dc, seeds=[dc.seed] * len(batch),
                                  draft=v.method.needs.source(d, self.config.ngram_table),
                                  provenance={**plan.provenance(), **({"compiled": True} if v.compiled else {})})
        tokens = sum(rec.new_tokens for rec in recs)
        for rec in recs:
            share = rec.new_tokens / tokens if tokens else 1 / len(recs)
            rec.set_energy(None if energy.joules is None else energy.joules * share, energy.source, energy.reason)
        return recs

    def record_batch(self, label: str, g: int, repeat: int) -> list[dict]:
        """The timed run of batch ``g`` (one prompt at batch size 1) as the rows ``records.jsonl`` keeps, one per
        prompt, with their quality scores."""
        batch, v = self.batches[g], next(v for v in self.variants if v.label == label)
        if self.config.batch_size == 1:
            recs, where = [self.run_one(label, batch[0], repeat)], {}
        else:
            recs, where = self.run_batch(label, batch, repeat), {"batch_size": self.config.batch_size, "batch": g}
        return [{**rec.to_dict(), "method": label, "base_method": v.method.name, "prompt_id": prompt.id,
                 "repeat": repeat, "seed": self.config.seed + repeat, "target": self.config.target,
                 "draft": self.config.draft if v.method.needs is Needs.DRAFT_MODEL else None, **where,
                 **self.quality(rec, prompt)} for rec, prompt in zip(recs, batch)]

    def warm_up(self, label: str) -> None:
        """One unrecorded run of ``label`` on the first prompt (the first batch at --batch-size > 1)."""
        tokens = min(self.config.warmup_tokens, self.config.max_new_tokens)
        if self.config.batch_size == 1:
            self.attempt(label, "warm-up", lambda: self.run_one(label, self.prompts[0], 0, tokens))
        else:
            self.attempt(label, "warm-up", lambda: self.run_batch(label, self.batches[0], 0, tokens))

    def where(self, g: int, repeat: int) -> str:
        """How an error names job (batch ``g``, ``repeat``)."""
        batch = self.batches[g]
        if self.config.batch_size == 1:
            return f"prompt {batch[0].id}, repeat {repeat}"
        return f"batch {g} (prompts {', '.join(p.id for p in batch)}), repeat {repeat}"

    def quality(self, rec, prompt: BenchPrompt) -> dict:
        """MJSD paper Eq. (1) under the run's reference target (one dtype for every variant), and ROUGE-L."""
        if not self.config.quality:
            return {}
        ppl = perplexity(self.models.target.model, prompt.ids, rec.token_ids)
        return {"perplexity": ppl.ppl, "nll_sum": None if ppl.n == 0 else ppl.mean_nll * ppl.n, "nll_tokens": ppl.n,
                "rouge_l": rouge_l(rec.text, prompt.reference) if prompt.reference is not None else None}

    def measure(self, progress: bool, on_record: Callable[[dict], None] | None,
                executor: ExecutorConfig = LOCAL) -> None:
        """Warm every variant up, then run the (prompt, repeat, variant) jobs left, interleaved, each record appended
        and flushed as it finishes. A baseline that cannot run with these models is skipped and said. On Ray
        (``executor``), each prompt is a task (``_prompt_cell``) and its records are appended here in prompt order."""
        from tqdm.auto import tqdm

        self.eos = eos_ids(self.models.target.model, self.models.target.tokenizer)
        self.meter = open_meter(self.device)  # NVML / RAPL total-energy counters read around each generation
        skipped = {}
        draft = self.models.draft
        for v in self.variants:
            if (v.method.loop is Loop.TRANSFORMERS and v.method.cost is Cost.DRAFT_MODEL and draft is not None
                    and (why := assisted_unsupported(draft.model))):
                skipped[v.label] = why
                print(f"specrepro bench: skipping {v.label}: {why}", file=sys.stderr)
        todo = [job for job in self.todo if job[2] not in skipped]
        if not todo:
            return
        session = self.session
        if any(not v.method.loop.own_weights for v in self.variants if v.label not in {*skipped, *self.failed}):
            session["peer"] = self.peer.describe()  # engine, version, the GGUF, threads
        session.update(skipped=skipped, model_notes=self.models.notes,
                       energy={"source": self.meter.source, "scope": getattr(self.meter, "scope", None),
                               "reason": self.meter.reason},
                       quality=({"perplexity": f"MJSD Eq. (1) under the {self.models.reference} target, unwarped",
                                 "rouge_l": "rouge-score rougeL F-measure, stemmed, against the suite's references"}
                                if self.config.quality else None))
        if executor.kind != "local":
            return self._measure_cells(todo, executor, progress, on_record)
        if self.config.warmup_tokens > 0:
            for v in self.variants:
                if v.label not in skipped:
                    self.warm_up(v.label)
        bar = tqdm(total=self.done + sum(len(self.batches[g]) for g, _, _ in todo), initial=self.done,
                   desc=f"bench {self.out.name}", file=sys.stderr, disable=not progress, unit="run")
        written = 0
        with open(self.out / "records.jsonl", "a") as handle:
            for g, repeat, label in todo:
                rows = self.attempt(label, self.where(g, repeat), lambda: self.record_batch(label, g, repeat))
                bar.update(len(self.batches[g]))
                for row in rows or ():
                    written += self._append(handle, row, on_record)
        bar.close()
        session.update(finished_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), records_written=written)
        self.save()

    def _append(self, handle, row: dict, on_record: Callable[[dict], None] | None) -> int:
        """One record appended to records.jsonl, flushed and synced (an interrupted run keeps every finished line);
        1, or 0 for a record already written (a batch that a previous call left part-written runs whole again)."""
        if record_key(row) in self.written:
            return 0
        self.written.add(record_key(row))
        handle.write(json.dumps(row) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
        self.records.append(row)
        if on_record is not None:
            on_record(row)
        return 1

    def _measure_cells(self, todo: list[tuple[int, int, str]], executor: ExecutorConfig, progress: bool,
                       on_record: Callable[[dict], None] | None) -> None:
        """The jobs left as one cell per prompt (per batch at --batch-size > 1; its repeats and variants interleaved
        as here), run by ``executor``; each cell's records appended here in prompt order, so records.jsonl is the
        file a local run writes. A method that fails in a cell is marked failed; the cells already sent still try
        it."""
        cells: dict[int, tuple[int, list[tuple[int, str]]]] = {}
        for g, repeat, label in todo:  # batch-major already: the local order within each batch is kept
            cells.setdefault(g, (g, []))[1].append((repeat, label))
        meter, self.meter = self.meter, None  # each task opens its own (a counter of its node)
        written = 0
        with open(self.out / "records.jsonl", "a") as handle:
            def write(_: int, done: tuple[list[dict], dict]) -> None:
                nonlocal written
                rows, failed = done
                for label, err in failed.items():
                    self.failed.setdefault(label, err)
                for row in rows:
                    written += self._append(handle, row, on_record)
            try:
                run_cells(functools.partial(_prompt_cell, self), list(cells.values()), executor,
                          progress=f"bench {self.out.name} (prompts)" if progress else False, on_result=write)
            finally:
                self.meter = meter
        self.session.update(finished_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), records_written=written,
                            executor=executor.describe())
        self.save()

    def finish(self) -> BenchResult:
        """summary.csv, the failures and the T = 0 cross-check: every method should reproduce greedy decoding token
        for token (in bf16 a (γ+1)-token forward can round differently from a 1-token one and flip a near-tie)."""
        resolved = [dataclasses.replace(v, dtype=self.plans[v.label].dtype if v.label in self.plans else
                                        self.provenance.get("resolved_dtypes", {}).get(v.label, {}).get("dtype"))
                    for v in self.variants]
        greedy = self.config.temperature == 0
        baseline = next((v.label for v in resolved if v.label == "ar"),
                        next((v.label for v in resolved if v.method.name == "ar"), None))
        summary = summarize(self.records, resolved, greedy, self.profiles, baseline, self.failed)
        write_summary(self.out, summary)
        self.provenance["failed"] = self.failed
        self.provenance["t0_mismatches"] = mismatches(self.records, resolved, greedy)
        self.save()
        for line in self.provenance["t0_mismatches"]:
            print(f"specrepro bench: T=0 tokens differ: {line}", file=sys.stderr)
        return BenchResult(out=self.out, records=self.records, summary=summary, provenance=self.provenance,
                           failed=self.failed)


_WARM: set[tuple[str, str]] = set()  # in a Ray worker: the (run folder, variant) it has warmed up already


def _prompt_cell(run: _Run, cell: tuple[int, list[tuple[int, str]]]) -> tuple[list[dict], dict]:
    """One prompt (one batch at --batch-size > 1) of a bench on a Ray worker: each variant warmed up (once per worker
    process), then the (repeat, variant) jobs in order; (its records, the methods that failed). Module-level for
    Ray."""
    g, jobs = cell
    run.meter = open_meter(run.device)
    labels = [label for label in dict.fromkeys(label for _, label in jobs) if (str(run.out), label) not in _WARM]
    for label in labels if run.config.warmup_tokens > 0 else ():
        run.warm_up(label)
        _WARM.add((str(run.out), label))
    rows = [run.attempt(label, run.where(g, repeat), lambda: run.record_batch(label, g, repeat))
            for repeat, label in jobs]
    return [row for batch in rows if batch is not None for row in batch], run.failed


def _warn_if_busy(session: dict) -> None:
    load, cores = session["load_average"], os.cpu_count() or 1
    if load and load[0] > cores - 0.5:
        advice = ("; with several torch threads on a shared CPU every parallel region waits for descheduled "
                  "threads (consider --threads 1)" if torch.get_num_threads() > 1 else "")
        print(f"specrepro bench: the machine is busy (load {load[0]:.1f} on {cores} cores): timings will be "
              f"noisy{advice}", file=sys.stderr)


def _bench_prompts(config: BenchConfig, prompts: Sequence[BenchPrompt] | None,
                   target: LoadedModel | None) -> list[BenchPrompt]:
    """The run's prompts (the first ``limit``), each checked against the target's context before any model loads:
    its tokenizer and context length are read without its weights unless the target was passed in."""
    if target is not None:
        tokenizer, context = target.tokenizer, target.context_length
    elif (found := load_tokenizer(config.target)) is not None:
        tokenizer, context = found
    else:  # a reduced-vocabulary draft folder as the target: checked once loaded
        tokenizer, context = None, None
    if prompts is None:
        holder = target if target is not None else LoadedModel(config.target, None, tokenizer)  # tokenizer only
        prompts = encode_prompts(holder, config.prompts, config.limit, config.chat_template)
    else:
        prompts = list(prompts)[:config.limit]
    if not prompts:
        raise ValueError("no prompts to run")
    if len({p.id for p in prompts}) != len(prompts):
        raise ValueError("prompt ids must be unique: they key the records")
    if context is not None:
        for p in prompts:
            check_prompt(p.ids, config, context, p.where or f"prompt {p.id}")
    return prompts


def run_bench(config: BenchConfig, out: str | Path, *, target: LoadedModel | None = None,
              draft: LoadedModel | None = None, prompts: Sequence[BenchPrompt] | None = None,
              drafters: dict[str, Drafter] | None = None, on_record: Callable[[dict], None] | None = None,
              progress: bool = True, executor: ExecutorConfig | str | None = None) -> BenchResult:
    """Run (or resume) a benchmark into ``out``; models and prompts are loaded from ``config`` unless given.

    ``drafters`` overrides the drafter of a speculative method (e.g. an n-gram drafter built in memory), keyed
    by method name or variant label. ``on_record(record)`` runs after each record is written (tests interrupt a run
    with it). ``executor`` (``specrepro.core.executor``; default local) may run the prompts as Ray tasks of
    ``config.threads`` CPUs (1 if unset): the session's profile, plans and files stay here, each task times its
    prompt's interleaved runs on its own node (a paired speedup compares runs of one node), and the records are
    appended here in prompt order, under the same keys as a local run's.
    """
    executor = ExecutorConfig.parse(executor)
    if executor.kind == "ray":
        executor = dataclasses.replace(executor, num_cpus=config.threads or 1)
    out, drafters = Path(out), dict(drafters or {})
    check_config(out, config, ignore=("prompt_digest", "weights_digest"))  # before any slow loading
    variants = config.variants()
    if config.batch_size > 1 and drafters:
        raise ValueError(f"drafters passed in ({', '.join(drafters)}) run at batch size 1: a batch builds a drafter "
                         f"per row from the run's models and tables")
    own = [v for v in variants if v.label not in drafters and v.method.name not in drafters]
    if config.ngram_table is None and (ngram := [v.label for v in own if v.method.needs is Needs.NGRAM_TABLE]):
        raise ValueError(f"methods {ngram} need --ngram-table FILE (an .npz written by NGramTable.save)")
    with RunFolder(out):
        prompts = _bench_prompts(config, prompts, target)  # every prompt checked before a model loads
        if config.threads is not None:
            torch.set_num_threads(config.threads)
        models = _Models(config, target, draft, needs_draft=any(v.method.needs is Needs.DRAFT_MODEL for v in own))
        config = dataclasses.replace(config, prompt_digest=_digest(prompts), weights_digest=_weights_digest(
            models.target.model, models.draft.model if models.draft else None))
        check_config(out, config)
        atomic_write_text(out / "config.json", json.dumps(config.to_dict(), indent=1) + "\n")
        run = _Run(out, config, models, prompts, drafters)
        run.start_session()
        run.measure(progress, on_record, executor)
        return run.finish()


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


def sweep_cell(base: BenchConfig, out: Path, objects: dict, cell: tuple[float, int]) -> list[dict]:
    """One point of a sweep, ``cell`` = (temperature, γ): ``run_bench`` into ``out/T{T}_g{γ}`` (its own folder,
    lock, device profile and interleaving), and its summary rows. Module-level, so that a Ray task can run it."""
    temperature, gamma = cell
    config = dataclasses.replace(base, temperature=float(temperature), gamma=gamma)
    return run_bench(config, Path(out) / f"T{temperature:g}_g{gamma}", **objects).summary


def run_sweep(base: BenchConfig, out: str | Path, gammas: Sequence[int], temperatures: Sequence[float],
              executor: ExecutorConfig | str | None = None, **objects) -> list[dict]:
    """``run_bench`` once per (temperature, γ) into ``out/T{T}_g{γ}``; summary rows with both added.

    ``executor`` (``specrepro.core.executor``; default local, one bench after the other) may run the points as Ray
    tasks: each is a whole bench, timed on the node that ran it against its own ``ar`` and device profile, and
    written to its own folder (a filesystem every node sees, on a cluster of several machines). Timing benches
    side by side on one machine share its cores and memory bandwidth: give each task ``num_cpus`` = the bench's
    threads, and no more tasks at once than the machine has cores for."""
    cells = [(float(temperature), gamma) for temperature in temperatures for gamma in gammas]
    summaries = run_cells(functools.partial(sweep_cell, base, Path(out), objects), cells, executor)
    return [{"temperature": temperature, **row, "gamma": gamma}
            for (temperature, gamma), summary in zip(cells, summaries) for row in summary]
