"""What a bench runs: its variants and its configuration, parsed and checked before any model loads.

A method may be listed as a *variant* with its own dtype, γ, tree size, acceptance rule and parameters, so one run
compares them side by side: ``speculative:fp32:g2``, ``prompt-lookup:bf16:gauto``, ``ar:fp32``, ``ppd:t20``,
``medusa:typical``, ``mjsd:b4:tau0.5``, ``spectr:m2``, ``bild:f0.3:r2``, ``mentored:kl0.05`` (:meth:`Variant.parse`).
:class:`BenchConfig` is every argument of a run, stored as its ``config.json``; :func:`check_config` refuses to resume
a folder made with other arguments (:class:`ResumeMismatch`).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..acceptance import TREE_RULES
from ..core.config import DecodeConfig, SamplingConfig
from ..methods import METHODS, Loop, Method, check_parameters_taken, method, parameter_fields
from ..metrics.profile import dtype_name
from . import openvino_peer
from .peers import check_runnable

ALL_METHODS = METHODS  # the registry's: ours, transformers' and llama.cpp's baselines
DTYPE_FIELDS = ("auto", "bf16", "fp16", "fp32")


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
        openvino_peer.check_runnable([v.label for v in variants if v.method.loop is Loop.OPENVINO], self.target)

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

