"""Configs for the engines that serve large targets (issue 24, item 4): a method of ours, at its γ, tree size and
parameters, written as vLLM's ``speculative_config`` or as SGLang's ``--speculative-*`` server flags, so that a
result found here is run there.

    python -m specrepro export-config --engine vllm --method prompt-lookup --gamma 4
    python -m specrepro export-config --engine sglang --from figures/bench/eagle-t0 --method eagle:shapechain \\
        --engine-draft <an EAGLE checkpoint in SGLang's format>

What maps to what (the engines' own names; ``DOCUMENTED`` says in which file and commit each key was read):

============== =================================================== ============================================
ours           vLLM ``method``                                     SGLang ``--speculative-algorithm``
============== =================================================== ============================================
speculative    ``draft_model`` (``model``: the draft)              ``STANDALONE`` (topk 1, steps γ, γ+1 tokens)
prompt-lookup  ``ngram`` (``prompt_lookup_min/max``: our n-grams)  ``NGRAM`` (a different n-gram drafter, noted)
medusa         ``medusa`` (each head's argmax: a chain, noted)     none
eagle          ``eagle`` / ``eagle3``: a chain, or a static tree   ``EAGLE`` / ``EAGLE3``: EAGLE-2's dynamic tree
               (``speculative_token_tree``)                        (topk, steps, draft tokens)
============== =================================================== ============================================

Every other method (MJSD, mentored, PPD, BiLD, SpecTr, staged, n-gram tables, online, ...) is one clear error that
names the method and the engine and lists what that engine runs.

Trees. Our static trees are rank paths from the root (``(0,)`` the draft's best guess, ``(0, 1)`` its second guess
after that, ...; ``drafters.medusa.sparse_tree``), which is exactly vLLM's ``speculative_token_tree``: the Python
literal of that list of tuples, breadth-first, with ``num_speculative_tokens`` = its number of nodes. Our EAGLE
dynamic tree is EAGLE-2's: the top-k children of the k best nodes per depth, reranked by path probability, the best
N kept; SGLang's EAGLE is the same construction, with ``--speculative-eagle-topk`` k, ``--speculative-num-steps`` the
depth and ``--speculative-num-draft-tokens`` N + 1 (its verify window counts the last committed token). vLLM has no
dynamic tree, and SGLang no static one: each gets the nearest of its own, said in the notes.

Weights. The engines load their own checkpoint formats. Our zoo's target has a hub id, which is what the engine is
told to load; our Medusa heads, EAGLE draft and reduced-vocabulary draft are specrepro's format, read here only for
their tree settings (rank probabilities, heads, top-k), so the engine's draft is named with ``--engine-draft``.
Sampling (temperature, top-k, top-p) is per request in both engines; a result's warping is reported beside.
"""
from __future__ import annotations

import argparse
import ast
import collections
import json
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..core.cli import check_writable, positive_int
from ..core.prompts import iter_jsonl
from ..core.config import MethodParams
from ..methods import Method, check_parameters_taken, method, parameter_fields

ENGINES = ("vllm", "sglang")
DEFAULT_TARGET, DEFAULT_GAMMA = "smollm2-135m-instruct", 4  # as the other commands' --target and --gamma
ENGINE_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}  # our dtype names -> both engines' --dtype


@dataclass(frozen=True)
class EngineDoc:
    """What an engine documents for speculative decoding, as read from its source: the test checks every export
    against the engine's own class when the engine is importable, and against this table otherwise."""

    name: str  # as the engine spells itself
    source: str  # repository, file, commit and class where the keys below were read
    keys: tuple[str, ...]  # the keys we write: speculative_config fields (vLLM) or server flags (SGLang)
    methods: tuple[str, ...]  # the values its method / algorithm key takes (builtins)


VLLM = EngineDoc(
    "vLLM", "vllm-project/vllm, vllm/config/speculative.py at f19b16d9 (SpeculativeConfig and its SpeculativeMethod "
            "Literal; the tree's format from its __post_init__, which sorts it breadth-first)",
    keys=("method", "model", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max",
          "speculative_token_tree"),
    methods=("ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "eagle", "eagle3", "mtp", "ngram_gpu"))
SGLANG = EngineDoc(
    "SGLang", "sgl-project/sglang, python/sglang/srt/server_args.py at 001067ff (ServerArgs, its speculative "
              "decoding fields; the topk = 1 rule from its speculative-decoding checks)",
    keys=("--speculative-algorithm", "--speculative-draft-model-path", "--speculative-num-steps",
          "--speculative-eagle-topk", "--speculative-num-draft-tokens"),
    methods=("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK"))
DOCUMENTED = {"vllm": VLLM, "sglang": SGLANG}

# ours -> the engine's name for it (eagle becomes eagle3 / EAGLE3 for a draft on fused layers, or with --eagle3)
SUPPORTED = {"vllm": {"speculative": "draft_model", "prompt-lookup": "ngram", "medusa": "medusa", "eagle": "eagle"},
             "sglang": {"speculative": "STANDALONE", "prompt-lookup": "NGRAM", "eagle": "EAGLE"}}


@dataclass(frozen=True)
class Run:
    """What is exported: one method of ours at a fixed γ, resolved from a bench label and flags, or from a result."""

    label: str  # the bench label it came from: "eagle:shapestatic:t12", "prompt-lookup:gauto"
    method: Method
    gamma: int  # γ: the engines take a fixed number of draft tokens
    params: MethodParams  # the method's own parameters, resolved
    target: str  # ours: zoo name, folder or hub id
    draft: str | None = None  # ours: the draft model, or the Medusa / EAGLE weights (None: the zoo's for the target)
    tree_size: int | None = None  # nodes of the draft tree (token-tree methods); None: the drafter's default
    acceptance: str = "exact"  # the verification rule it ran with
    dtype: str | None = None  # the engine's --dtype (bfloat16, float16, float32), when the label or result names one
    sampling: dict | None = None  # the result's warping (temperature, top_k, top_p), reported beside
    origin: str = "command line"  # where the settings were read
    notes: tuple[str, ...] = ()  # how they were resolved (what γ auto chose, ...)


@dataclass(frozen=True)
class EngineConfig:
    """One export: the engine's settings, the command that serves the target with them, and what differs."""

    engine: str  # "vllm" | "sglang"
    run: Run
    target: str  # the model the engine loads
    settings: dict  # vLLM: the speculative_config; SGLang: {flag: value}
    command: str  # ready to paste
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        run = self.run
        out = {"engine": self.engine, "method": run.label, "base_method": run.method.name, "from": run.origin,
               "target": self.target, "gamma": run.gamma}
        if run.tree_size is not None and run.method.token_tree:
            out["tree_size"] = run.tree_size
        out["speculative_config" if self.engine == "vllm" else "server_args"] = self.settings
        out["command"] = self.command
        if run.sampling is not None:
            out["sampling"] = run.sampling
        out["notes"] = list(self.notes)
        out["checked_against"] = DOCUMENTED[self.engine].source
        return out


# ------------------------------------------------------------------------------------------ resolving the run


def engine_doc(engine: str) -> EngineDoc:
    if engine not in DOCUMENTED:
        raise ValueError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    return DOCUMENTED[engine]


def check_supported(engine: str, name: str) -> None:
    """One clear error for a method of ours that ``engine`` has no equivalent of, listing what it runs."""
    doc = engine_doc(engine)
    if name not in SUPPORTED[engine]:
        runs = ", ".join(f"{ours} (as {theirs}{'/' + theirs + '3' if ours == 'eagle' else ''})"
                         for ours, theirs in SUPPORTED[engine].items())
        raise ValueError(f"{doc.name} has no equivalent of --method {name}; of ours, {doc.name} runs {runs} "
                         f"(read in {doc.source.split(' (')[0]})")


def run_from_label(label: str, *, target: str | None = None, draft: str | None = None, gamma: int | str | None = None,
                   tree_size: int | None = None, params: dict | None = None, engine: str | None = None) -> Run:
    """A run from a bench label (``eagle:shapestatic:t12:g5``, parsed as ``bench`` parses it) and the flags: the
    label's fields win over the flags, as in ``bench``; a flag the method does not read is one clear error."""
    from .variants import Variant

    variant = Variant.parse(label, None, DEFAULT_GAMMA if gamma is None else gamma)
    spec = variant.method
    if engine is not None:
        check_supported(engine, spec.name)
    given = {**(params or {}), **{k: v for k, v in (("gamma", gamma), ("tree_size", tree_size), ("draft", draft))
                                  if v is not None}}
    check_parameters_taken(given, [spec])
    if variant.gamma == "auto":
        raise ValueError(f"{label}: γ auto is our loop's per-step choice; the engines take a fixed number of draft "
                         f"tokens: name one (--gamma N or gN), or export a result with --from, whose records say "
                         f"which γ the policy chose")
    resolved = spec.params_from({**(params or {}), **dict(variant.params)})
    return Run(label=label, method=spec, gamma=variant.gamma, params=resolved, target=target or DEFAULT_TARGET,
               draft=draft, tree_size=variant.tree_size or tree_size, acceptance=variant.acceptance or "exact",
               dtype=ENGINE_DTYPES.get(variant.dtype or ""))


def read_result(path: str | Path) -> tuple[list[dict], Path]:
    """The records of a result: a bench folder (or its summary.csv, records.jsonl or config.json), a JSON Lines
    file of records (``generate --json``), or one record (.json)."""
    path = Path(path).expanduser()
    if path.is_file() and path.name in ("summary.csv", "config.json", "provenance.json"):
        path = path.parent
    if path.is_dir():
        if not (path / "records.jsonl").is_file():
            raise ValueError(f"--from {path}: no records.jsonl in it (a bench folder keeps one record per run)")
        path = path / "records.jsonl"
    if not path.is_file():
        raise ValueError(f"--from {path}: no such file or folder")
    text = path.read_text()
    if path.suffix == ".json":
        text = text.replace("\n", " ")  # one record, over several lines (JSON strings hold no raw newline)
    records = []
    for n, rec in iter_jsonl(text, f"--from {path}", objects_only=False):
        if not isinstance(rec, dict) or "method" not in rec or "config" not in rec:
            raise ValueError(f"--from {path}: line {n} is not a record of ours (no method and config)")
        records.append(rec)
    if not records:
        raise ValueError(f"--from {path}: no records in it")
    return records, path


def run_from_result(path: str | Path, label: str | None = None, engine: str | None = None) -> Run:
    """The run behind one row of a result: its label, γ (γ auto: the γ the policy chose most often), tree size and
    parameters as its records resolved them, its target and draft, dtype and warping."""
    records, where = read_result(path)
    labels = list(dict.fromkeys(r["method"] for r in records))
    if label is None:
        if len(labels) > 1:
            runs = [x for x in labels if engine is None or x.split(":")[0] in SUPPORTED[engine]]
            which = f"; {DOCUMENTED[engine].name} runs {', '.join(runs) or 'none of them'}" if engine else ""
            raise ValueError(f"--from {where} holds {len(labels)} methods ({', '.join(labels)}): choose one with "
                             f"--method LABEL{which}")
        label = labels[0]
    if label not in labels:
        raise ValueError(f"--from {where}: no row {label!r}; it holds {', '.join(labels)}")
    rows = [r for r in records if r["method"] == label]
    first, config = rows[0], rows[0]["config"]
    spec = method(config.get("method") or label.split(":")[0])
    if engine is not None:
        check_supported(engine, spec.name)
    notes = []
    gamma = config["gamma"]
    if gamma == "auto":
        chosen = collections.Counter(g for r in rows for g in r.get("gammas", []) if g > 0)
        if not chosen:
            raise ValueError(f"--from {where}: {label} ran with γ auto and its records hold no step: name γ with "
                             f"--method {label.split(':')[0]} --gamma N instead of --from")
        gamma, times = min(chosen.items(), key=lambda kv: (-kv[1], kv[0]))  # the most frequent; a tie: the smaller
        notes.append(f"γ auto chose γ = {gamma} in {times} of {sum(chosen.values())} steps of {label}; the engine "
                     f"runs that γ fixed")
    dtype = first.get("provenance", {}).get("dtype")
    sampling = config.get("sampling")
    return Run(label=label, method=spec, gamma=int(gamma), params=spec.params_from(config.get("params") or {}),
               target=first.get("target") or DEFAULT_TARGET, draft=first.get("draft"),
               tree_size=config.get("tree_size") if spec.token_tree else None,
               acceptance=config.get("acceptance") or "exact",
               dtype=dtype if dtype in ENGINE_DTYPES.values() else None, sampling=sampling,
               origin=f"{where} (row {label}, {len(rows)} record{'s' if len(rows) != 1 else ''})", notes=tuple(notes))


# ---------------------------------------------------------------------------------------------- the engines


def engine_model(name: str | None) -> str | None:
    """What an engine can load for a model named here: a zoo entry's hub id, a hub id, a folder with a Hugging
    Face ``config.json``; None for specrepro's own formats (the zoo's drafts and heads, ``layers:K``)."""
    from ..engine.models import ZOO

    if name is None or name.startswith("layers:"):
        return None
    if name in ZOO:
        return ZOO[name].hub_id
    path = Path(name).expanduser()
    if path.is_dir():
        return str(path) if (path / "config.json").is_file() else None
    return name


def _engine_draft(engine: str, run: Run, engine_draft: str | None, what: str) -> str:
    """The draft checkpoint the engine loads: ``--engine-draft``, else ours where the engine can load it."""
    if engine_draft is not None:
        return engine_draft
    loadable = engine_model(run.draft)
    if loadable is not None:
        return loadable
    doc = DOCUMENTED[engine]
    if run.draft is not None and run.draft.startswith("layers:"):
        raise ValueError(f"--draft {run.draft} drafts with the target's own first layers, which {doc.name} does not "
                         f"run as a {what}: name a checkpoint with --engine-draft")
    ours = f"--draft {run.draft}" if run.draft else f"the zoo's {what} for {run.target}"
    raise ValueError(f"{doc.name} loads its own {what} checkpoint; {ours} is specrepro's format (no hub id): name "
                     f"the checkpoint {doc.name} should load with --engine-draft (a hub id or a folder)")


def _weights_config(run: Run, kind: str, file: str) -> dict | None:
    """Our self-drafting weights' config (JSON only, no tensors) for their tree settings, or None where --draft
    names no weights of ours (an engine's hub id)."""
    from ..engine.models import self_draft_folder

    try:
        folder = self_draft_folder(kind, run.draft, run.target)
    except ValueError:
        return None
    path = folder / file
    return json.loads(path.read_text()) if path.is_file() else None


def _draft_model(engine: str, run: Run, engine_draft: str | None, eagle3: bool) -> tuple[dict, list[str]]:
    if run.draft is None and engine_draft is None:
        raise ValueError("--method speculative needs a draft model: --draft NAME (ours) or --engine-draft ID")
    draft = _engine_draft(engine, run, engine_draft, "draft model")
    if engine == "vllm":
        return {"method": "draft_model", "model": draft, "num_speculative_tokens": run.gamma}, []
    return {"--speculative-algorithm": "STANDALONE", "--speculative-draft-model-path": draft,
            "--speculative-num-steps": run.gamma, "--speculative-eagle-topk": 1,
            "--speculative-num-draft-tokens": run.gamma + 1}, []


def _ngram(engine: str, run: Run, engine_draft: str | None, eagle3: bool) -> tuple[dict, list[str]]:
    from ..drafters.prompt_lookup import PromptLookupDrafter

    ours = PromptLookupDrafter()  # the n-gram sizes our prompt lookup matches (its defaults)
    if engine == "vllm":
        return {"method": "ngram", "num_speculative_tokens": run.gamma, "prompt_lookup_min": ours.min_ngram,
                "prompt_lookup_max": ours.max_ngram}, []
    return {"--speculative-algorithm": "NGRAM", "--speculative-num-draft-tokens": run.gamma + 1}, [
        "SGLang's NGRAM drafts from a trie of earlier prompts and outputs of every request (a tree, CUDA only); ours "
        "copies what followed the context's latest suffix match: the same family, not the same drafter"]


def _medusa(engine: str, run: Run, engine_draft: str | None, eagle3: bool) -> tuple[dict, list[str]]:
    from ..drafters.medusa import MEDUSA_CONFIG

    ours = _weights_config(run, "medusa heads", MEDUSA_CONFIG)
    heads = ours.get("num_heads") if ours else None
    n = min(run.gamma, heads) if heads else run.gamma
    nodes = f"{run.tree_size} node{'s' if run.tree_size != 1 else ''}" if run.tree_size else "its default size"
    notes = [f"vLLM's Medusa drafts each head's argmax, a chain of {n} tokens; ours verifies a sparse tree of "
             f"{nodes}, which vLLM's Medusa has no setting for"]
    if heads is None:
        notes.append(f"no Medusa heads of ours to read: num_speculative_tokens is γ = {run.gamma}; it must not "
                     f"exceed the checkpoint's heads")
    model = _engine_draft(engine, run, engine_draft, "Medusa heads")
    return {"method": "medusa", "model": model, "num_speculative_tokens": n}, notes


def _eagle(engine: str, run: Run, engine_draft: str | None, eagle3: bool) -> tuple[dict, list[str]]:
    from ..drafters import eagle, medusa

    shape, notes = run.params.tree_shape, []
    if engine == "sglang" and shape == "static":
        raise ValueError(f"{run.label}: SGLang's EAGLE drafts EAGLE-2's dynamic tree (topk, steps, draft tokens); a "
                         f"static tree (shape static) has no SGLang setting: export it to vLLM "
                         f"(speculative_token_tree), or use eagle:shapedynamic or eagle:shapechain")
    ours = _weights_config(run, "eagle draft", eagle.EAGLE_CONFIG)
    config = eagle.EagleConfig(**{**ours, "feature_layers": tuple(ours["feature_layers"]),
                                  "rank_probs": tuple(map(tuple, ours.get("rank_probs", ())))}) if ours else None
    if config is not None and len(config.feature_layers) > 1:
        eagle3 = True  # features fused from several layers: EAGLE-3's draft
    top_k = run.params.eagle_top_k or (config.top_k if config else eagle.EagleConfig.top_k)
    if not run.params.eagle_top_k and config is None and shape == "dynamic":
        notes.append(f"no EAGLE draft of ours to read its top-k from: k = {top_k}, EagleConfig's default "
                     f"(--eagle-top-k names it)")
    size = run.tree_size
    if size is None and shape != "chain":
        size = eagle.DEFAULT_TREE_SIZE
        notes.append(f"tree size {size}, the drafter's default: our hardware-aware size needs this device's profile "
                     f"(--tree-size or a label's tN names it; a result's records carry the size it ran)")
    draft = _engine_draft(engine, run, engine_draft, "EAGLE draft")
    if engine == "sglang":
        settings = {"--speculative-algorithm": "EAGLE3" if eagle3 else "EAGLE", "--speculative-draft-model-path": draft}
        if shape == "chain" or top_k == 1:
            steps = run.gamma if shape == "chain" else min(run.gamma, size)
            return {**settings, "--speculative-num-steps": steps, "--speculative-eagle-topk": 1,
                    "--speculative-num-draft-tokens": steps + 1}, notes
        steps = min(run.gamma, size)  # a tree of N nodes is at most N deep (as our drafter caps it)
        candidates = top_k + (steps - 1) * top_k ** 2  # k at depth 1, k·k per later depth: what is reranked
        if size > candidates:
            notes.append(f"tree size {size} exceeds the {candidates} candidates of k = {top_k} over {steps} steps: "
                         f"all of them are kept, as ours keeps them")
        return {**settings, "--speculative-num-steps": steps, "--speculative-eagle-topk": top_k,
                "--speculative-num-draft-tokens": min(size, candidates) + 1}, notes
    settings = {"method": "eagle3" if eagle3 else "eagle", "model": draft}
    if shape == "chain":
        return {**settings, "num_speculative_tokens": run.gamma}, notes
    if config is None or not config.rank_probs:
        raise ValueError(f"{run.label}: vLLM's EAGLE tree is static, built here from the held-out rank "
                         f"probabilities of our EAGLE draft; no draft of ours is found for {run.target} (--draft "
                         f"names one; or use eagle:shapechain)")
    depth = min(run.gamma, size) if shape == "dynamic" else run.gamma
    paths = medusa.sparse_tree(config.rank_probs, size, min(depth, config.depth))
    notes.append(f"the tree: the {len(paths)} most probable rank paths under the held-out rank probabilities of our "
                 f"EAGLE draft for {run.target}")
    if shape == "dynamic":
        notes.append(f"vLLM's EAGLE tree is static: this is the static tree of the same {len(paths)} nodes from "
                     f"the draft's held-out rank probabilities (eagle:shapestatic here); EAGLE-2's dynamic tree is "
                     f"SGLang's")
    if all(p == (0,) * len(p) for p in paths):  # a chain: vLLM's default tree
        return {**settings, "num_speculative_tokens": len(paths)}, notes
    notes.append("speculative_token_tree is a SpeculativeConfig field at vLLM f19b16d9; the later main read "
                 "(002e77c1) has none: serve the tree with a vLLM that has the field")
    return {**settings, "num_speculative_tokens": len(paths), "speculative_token_tree": token_tree(paths)}, notes


BUILDERS = {"speculative": _draft_model, "prompt-lookup": _ngram, "medusa": _medusa, "eagle": _eagle}
SUPPORTED_LINE = {engine: f"{DOCUMENTED[engine].name} runs " + ", ".join(SUPPORTED[engine]) for engine in ENGINES}


def token_tree(paths) -> str:
    """vLLM's ``speculative_token_tree``: the Python literal of the rank paths (tuples of child ranks from the
    root), breadth-first as vLLM sorts them, by (depth, path)."""
    return str(sorted((tuple(int(r) for r in p) for p in paths), key=lambda p: (len(p), p)))


def validate(engine: str, settings: dict) -> None:
    """One clear error unless ``settings`` are what the engine documents (``DOCUMENTED``) and its own checks
    accept: known keys and method, positive counts; vLLM's tree a prefix-closed breadth-first list of rank paths
    with one node per speculative token; SGLang's topk = 1 with steps + 1 draft tokens, and no more draft tokens
    than its tree's candidates."""
    doc = engine_doc(engine)
    unknown = [k for k in settings if k not in doc.keys]
    if unknown:
        raise ValueError(f"{doc.name} documents no {', '.join(unknown)} (read in {doc.source})")
    name = settings.get("method" if engine == "vllm" else "--speculative-algorithm")
    if name not in doc.methods:
        raise ValueError(f"{doc.name} has no speculative method {name!r}; it has {', '.join(doc.methods)}")
    for key, value in settings.items():
        if key not in ("method", "model", "speculative_token_tree", "--speculative-algorithm",
                       "--speculative-draft-model-path") and (not isinstance(value, int) or value < 1):
            raise ValueError(f"{doc.name}'s {key} must be an integer >= 1, got {value!r}")
    if engine == "vllm":
        if name in ("draft_model", "medusa", "eagle", "eagle3") and not settings.get("model"):
            raise ValueError(f"vLLM's {name} needs a model")
        if settings.get("prompt_lookup_min", 1) > settings.get("prompt_lookup_max", 1 << 30):
            raise ValueError("vLLM's prompt_lookup_min must be <= prompt_lookup_max")
        tree = settings.get("speculative_token_tree")
        if tree is not None:
            if name not in ("eagle", "eagle3"):
                raise ValueError(f"vLLM reads speculative_token_tree for eagle and eagle3 only, not {name}")
            paths = ast.literal_eval(tree)
            if not all(isinstance(p, tuple) and p and all(isinstance(r, int) and r >= 0 for r in p) for p in paths):
                raise ValueError(f"speculative_token_tree must be a list of rank paths (tuples of ints), got {tree}")
            if tree != token_tree(paths) or len(set(paths)) != len(paths):
                raise ValueError(f"speculative_token_tree must list each path once, breadth-first, got {tree}")
            if any(len(p) > 1 and p[:-1] not in set(paths) for p in paths):
                raise ValueError(f"speculative_token_tree is not prefix-closed: {tree}")
            if len(paths) != settings.get("num_speculative_tokens"):
                raise ValueError(f"vLLM drafts one token per tree node: num_speculative_tokens must be {len(paths)}")
        return
    if name in ("EAGLE", "EAGLE3", "STANDALONE") and not settings.get("--speculative-draft-model-path"):
        raise ValueError(f"SGLang's {name} needs --speculative-draft-model-path")
    steps, topk = settings.get("--speculative-num-steps"), settings.get("--speculative-eagle-topk")
    tokens = settings.get("--speculative-num-draft-tokens")
    if topk == 1 and tokens != steps + 1:
        raise ValueError(f"SGLang sets --speculative-num-draft-tokens to steps + 1 = {steps + 1} when topk is 1 "
                         f"(got {tokens})")
    if topk is not None and topk > 1 and tokens - 1 > topk + (steps - 1) * topk ** 2:
        raise ValueError(f"SGLang keeps at most topk + (steps - 1)·topk² = {topk + (steps - 1) * topk ** 2} draft "
                         f"tokens, asked for {tokens - 1}")


def command_line(engine: str, target: str, settings: dict, dtype: str | None) -> str:
    """The command that serves ``target`` with ``settings``: ``vllm serve`` or SGLang's ``launch_server``."""
    extra = ["--dtype", dtype] if dtype else []
    if engine == "vllm":
        return shlex.join(["vllm", "serve", target, *extra, "--speculative-config",
                           json.dumps(settings, separators=(",", ":"))])
    flags = [str(part) for flag, value in settings.items() for part in (flag, value)]
    return shlex.join(["python", "-m", "sglang.launch_server", "--model-path", target, *extra, *flags])


def export(engine: str, run: Run, *, engine_target: str | None = None, engine_draft: str | None = None,
           eagle3: bool = False) -> EngineConfig:
    """``run`` as ``engine``'s settings, checked against what the engine documents (``validate``)."""
    doc = engine_doc(engine)
    check_supported(engine, run.method.name)
    if run.acceptance == "typical":
        raise ValueError(f"{run.label}: typical acceptance (lossy) has no {doc.name} setting; {doc.name} verifies "
                         f"with its exact rule: export the exact run")
    if eagle3 and run.method.name != "eagle":
        raise ValueError(f"--eagle3 is for --method eagle, not {run.method.name}")
    target = engine_target or engine_model(run.target)
    if target is None:
        raise ValueError(f"--target {run.target} is in specrepro's own format (no hub id): name the model "
                         f"{doc.name} should load with --engine-target")
    settings, notes = BUILDERS[run.method.name](engine, run, engine_draft, eagle3)
    validate(engine, settings)
    if run.sampling is not None:
        notes.append(f"sampled here with temperature {run.sampling.get('temperature')}, top_k "
                     f"{run.sampling.get('top_k')}, top_p {run.sampling.get('top_p')}: {doc.name} takes these per "
                     f"request (its sampling parameters), not as a server setting")
    return EngineConfig(engine=engine, run=run, target=target, settings=settings,
                        command=command_line(engine, target, settings, run.dtype),
                        notes=tuple(run.notes) + tuple(notes))


# ----------------------------------------------------------------------------------------------- command line


def gamma_value(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        return positive_int(value)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"gamma must be an integer >= 1 or auto, got {value!r}") from None


def add_parser(sub) -> None:
    """The ``export-config`` subcommand (``python -m specrepro export-config --help``)."""
    p = sub.add_parser("export-config", help="vLLM's speculative_config or SGLang's --speculative-* flags for a method "
                                             "of ours (specrepro.run.export_config)")
    p.add_argument("--engine", required=True, choices=ENGINES)
    p.add_argument("--method", default=None,
                   help="a bench label: speculative:g5, prompt-lookup, medusa, eagle:shapestatic:t12, ... "
                        "(with --from: the row to export)")
    p.add_argument("--from", dest="source", default=None,
                   help="a result: a bench folder (or its summary.csv / records.jsonl), or a generate --json file; "
                        "the row's method, γ, tree size, parameters, target and draft are read from its records")
    p.add_argument("--target", default=None, help=f"ours: zoo name, folder or hub id (default {DEFAULT_TARGET})")
    p.add_argument("--draft", default=None,
                   help="ours: the draft model (speculative), or the Medusa / EAGLE weights whose tree settings are "
                        "exported (zoo name or folder; default: the zoo's for the target)")
    p.add_argument("--gamma", type=gamma_value, default=None, help=f"draft tokens per step (default {DEFAULT_GAMMA})")
    p.add_argument("--tree-size", type=positive_int, default=None, help="nodes of the draft tree (medusa, eagle)")
    exported = {name for names in SUPPORTED.values() for name in names}
    for name, (f, takers) in parameter_fields().items():  # the parameters of the methods an engine runs
        if not exported & set(takers):
            continue
        p.add_argument(f"--{name.replace('_', '-')}", type=type(f.default), default=None,
                       choices=f.metadata.get("choices"),
                       help=f"{f.metadata['help']} (default {f.default}; methods: {', '.join(takers)})")
    p.add_argument("--engine-target", default=None,
                   help="the model the engine loads (default: the target's hub id)")
    p.add_argument("--engine-draft", default=None,
                   help="the draft checkpoint the engine loads, in its format (default: --draft where the engine can "
                        "load it)")
    p.add_argument("--eagle3", action="store_true", help="the engine's EAGLE-3 (eagle3 / EAGLE3) for --method eagle")
    p.add_argument("--out", default=None, help="write the JSON here (atomically) and print the command line")
    p.set_defaults(func=cmd_export_config, interrupted=lambda args, argv: "nothing was written")


def run_from_args(args: argparse.Namespace) -> Run:
    params = {name: getattr(args, name) for name in parameter_fields() if getattr(args, name, None) is not None}
    if args.source is not None:
        given = {**params, **{k: v for k, v in (("target", args.target), ("draft", args.draft),
                                                ("gamma", args.gamma), ("tree_size", args.tree_size))
                              if v is not None}}
        if given:
            flags = ", ".join("--" + k.replace("_", "-") for k in given)
            raise ValueError(f"--from reads the method's settings from the result; drop {flags} (--engine-target "
                             f"and --engine-draft name what the engine loads)")
        return run_from_result(args.source, args.method, args.engine)
    if args.method is None:
        raise ValueError(f"name a method (--method LABEL) or a result (--from PATH); {SUPPORTED_LINE[args.engine]}")
    return run_from_label(args.method, target=args.target, draft=args.draft, gamma=args.gamma,
                          tree_size=args.tree_size, params=params, engine=args.engine)


def cmd_export_config(args: argparse.Namespace) -> int:
    if args.out is not None:
        check_writable(args.out, "--out", folder=False)
    result = export(args.engine, run_from_args(args), engine_target=args.engine_target,
                    engine_draft=args.engine_draft, eagle3=args.eagle3)
    text = json.dumps(result.to_dict(), indent=1) + "\n"
    if args.out is None:
        sys.stdout.write(text)
        return 0
    from ..core.provenance import atomic_write_text

    atomic_write_text(Path(args.out), text)
    print(f"wrote {args.out}; serve with:\n{result.command}")
    for note in result.notes:
        print(f"note: {note}")
    return 0
