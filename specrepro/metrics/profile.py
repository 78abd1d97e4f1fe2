"""The device profile: what one target forward over n new tokens costs here, per dtype (issue 12).

For a (target, draft) pair on the device at hand, and for one dtype, a profile holds

    L_fp(n)   median seconds of one target forward over n new tokens after a realistic cached prefix,
              n on a grid over 1..64 (linear in between), with the spread (25th and 75th percentiles);
              measured after a prefix of ``context_tokens`` (256), and on a coarser grid after each of the longer
              ``contexts`` (512, 1024): ``at_context(c)`` gives the curve at the run's own context;
    L_pre(P)  seconds of the prefill, one forward over a P-token prompt from an empty cache (``prefill_s``);
    β(n)      = L_fp(n) / L_fp(1), the verification cost of the survey blog's *Batch Size* section;
    c         = one draft decode step / one target decode step (L_fp(1)), the cost ratio;
    host      the host's seconds per step outside the forwards, a plain step's and a speculative step's
              (``HostCost``; issue 64: on a 2-core Zen 1 a prompt-lookup step spent 2.6 ms there against AR's
              1.2 ms, around forwards of 10-18 ms, which a forwards-only prediction never saw).

A profile keyed with ``batch`` B > 1 (a bench at ``--batch-size B``) times every forward over B rows at once:
L_fp(n) is then L(B, n) of ``metrics.batching``, β(n) the survey's β(B, n) and c the batched draft's step over the
batched target's, so the bench predicts a batched run from what a batched step costs.

``python -m specrepro calibrate`` measures it and caches it under ``$SPECREPRO_CACHE/profiles/``, keyed by
the device (CPU model and the instruction-set flags that change kernels, or the GPU name), the model pair,
the dtype, the thread count and the torch / transformers versions: a changed key never reuses a stale file.
The profile is what ``--dtype auto`` and ``--gamma auto`` decide with (:func:`choose_dtype`,
``specrepro.decode.adaptive``), and what the bench predicts speedups from.

Why the longer contexts and the prefill (issue 23): on an AVX2-only EPYC a bf16 decode step after 256 tokens cost
63 ms against fp32's 73, so auto chose bf16, yet the bench's bf16 AR ran 1.39x slower than fp32: a bf16 prefill of
a few hundred tokens costs seconds there (no bf16 units), several times fp32's, and the step's cost grows with the
context. A choice for a run weighs the prefill of its prompts and the step at its context, not one short-prefix step.

Why it exists: on a Xeon without bf16 instructions a 5-token bf16 verify cost β ≈ 2.3 and fp32 won for
speculation; on one with avx512_bf16 and AMX, bf16 verifies 5 tokens for β ≈ 1.1 while fp32 has the faster
one-token step. The right dtype depends on the CPU and the method: it is measured, not assumed.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import platform
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from simulations.speculative import BetaCurve

from ..core.cost import seconds_per_token, tau
from ..core.decoding import Clock, model_device
from ..core.kvcache import CachedModel
from ..core.machine import cpu_fields, cpu_model
from ..engine.models import native_bf16
from ..core.provenance import atomic_write_text
from .prefix import BatchedPrefix, batch_contexts

FORMAT = "specrepro-device-profile/2"  # /2 adds the longer contexts and the prefill
FORMAT_1 = "specrepro-device-profile/1"  # still read (committed benches hold such profiles), never written
N_MAX = 64
# The longer cached prefixes a profile also times, on a coarser grid of sizes (a long prompt's step costs more:
# attention reads the whole cache), and the prompt lengths whose prefill it times (linear beyond the last).
LONG_CONTEXTS = (512, 1024)
LONG_NS = (1, 2, 3, 5, 9, 17)  # larger sizes follow the base curve's shape (a 64-token bf16 forward after 1024
PREFILL_SIZES = (32, 128, 256)  # tokens costs seconds per round on a CPU without bf16 units)
# Every size up to 17 (γ ≤ 16 verifies γ+1 tokens), then a coarser grid up to 64 (tree sizes).
DEFAULT_NS = tuple(range(1, 18)) + (20, 24, 28, 32, 40, 48, 56, 64)
# CPU flags that select different matmul kernels for bf16 / fp16 (recorded and part of the device key).
KERNEL_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile", "amx_fp16")
DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


# ------------------------------------------------------------------------------------------- device


def cpu_info() -> dict:
    """CPU model name, its vendor/family/model/stepping (``core.machine.cpu_model``: a VM's model name may say only
    "AMD EPYC" for a Zen 1 and a Zen 4), logical cores and the kernel-relevant flags, from /proc/cpuinfo where it
    exists."""
    fields = cpu_fields()
    flags = set(fields.get("flags", "").split())
    return {"name": fields.get("model name") or platform.processor() or platform.machine(), "model": cpu_model(),
            "logical_cores": os.cpu_count(), "kernel_flags": [f for f in KERNEL_FLAGS if f in flags]}


def device_key(device: torch.device) -> str:
    """A stable name for the device: GPU name, or CPU model name, vendor/family/model/stepping and the flags that
    change kernels (so that a profile measured on one CPU generation is never read on another of the same name)."""
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    info = cpu_info()
    return f"cpu:{info['name']}:{info['model'] or 'unknown'}:{'+'.join(info['kernel_flags']) or 'baseline'}"


def cpu_label() -> str:
    """The CPU as a footer names it: "CPU AMD EPYC (AuthenticAMD family 25 model 17 stepping 1)"."""
    info = cpu_info()
    return f"CPU {info['name']}" + (f" ({info['model']})" if info["model"] else "")


def device_name(device: torch.device | str, threads: int | None = None) -> str:
    """The device as a table or a footer names it: "NVIDIA H100 80GB HBM3 (cuda:0)", or "CPU <model>" with its
    ``threads`` when given (what the CPU's timings depend on)."""
    device = torch.device(device)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"{torch.cuda.get_device_name(index)} (cuda:{index})"
    name = cpu_label() if device.type == "cpu" else str(device)
    return f"{name}, {threads} thread(s)" if threads is not None else name


def candidate_dtypes(device: torch.device) -> tuple[str, ...]:
    """The dtypes ``--dtype auto`` chooses among on this device (fp16 on a CPU has no fast kernels)."""
    if device.type == "cuda":
        return ("bf16", "fp16", "fp32") if native_bf16(device) else ("fp16", "fp32")
    return ("bf16", "fp32")


def dtype_name(dtype: torch.dtype | str) -> str:
    if isinstance(dtype, torch.dtype):
        return DTYPE_NAMES[dtype]
    names = {"bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16", "fp32": "fp32",
             "float32": "fp32"}
    if dtype not in names:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of auto, bf16, fp16, fp32")
    return names[dtype]


# ---------------------------------------------------------------------------------------------- key


def weights_digest(*names: str | None) -> str:
    """A cheap content digest of the weight files behind model names (zoo names or folders): size and the first
    and last MiB of every ``*.safetensors`` file; a name with no local files (a hub id) counts as its name."""
    from ..engine.models import ZOO, zoo_path
    h = hashlib.sha256()
    for name in names:
        if name is None:
            continue
        h.update(name.encode())
        base = name.split(":", 1)[0] if name.startswith("layers:") else name
        folder = None
        if base in ZOO:
            folder = (Path(__file__).parents[1] / ZOO[base].folder) if ZOO[base].folder else zoo_path(base)
        elif Path(base).expanduser().is_dir():
            folder = Path(base).expanduser()
        for f in sorted(folder.glob("*.safetensors")) if folder is not None and folder.is_dir() else []:
            size = f.stat().st_size
            with open(f, "rb") as handle:
                head = handle.read(2**20)
                handle.seek(max(0, size - 2**20))
                h.update(f"{f.name}:{size}".encode() + head + handle.read(2**20))
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class ProfileKey:
    """What a profile is valid for; a profile measured under another key is never reused."""

    device: str  # device_key(): GPU name, or CPU model + kernel flags
    target: str  # the target's name (zoo name, folder or hub id)
    draft: str | None  # the draft's name, None for a profile of the target alone
    dtype: str  # bf16 | fp16 | fp32
    threads: int  # torch.get_num_threads() during the measurement
    torch: str
    transformers: str
    weights: str = ""  # digest of the pair's weight files (a model retrained under the same name is a new key)
    context_tokens: int = 256  # the cached prefix every timed forward follows
    repeats: int = 5  # timed rounds per median
    contexts: tuple[int, ...] = LONG_CONTEXTS  # longer cached prefixes, each timed on the coarse grid LONG_NS
    prefill_sizes: tuple[int, ...] = PREFILL_SIZES  # prompt lengths whose prefill is timed
    compiled: bool = False  # the forwards ran through torch.compile (specrepro.engine.compiled)
    batch: int = 1  # rows per forward: L_fp(n) is one forward over B rows × n tokens (a bench at --batch-size B)
    engine: str = "transformers"  # which forward ran (``engine.engine_name``): the static-cache engine, or transformers'

    def __post_init__(self) -> None:  # (JSON gives lists back)
        object.__setattr__(self, "contexts", tuple(int(c) for c in self.contexts))
        object.__setattr__(self, "prefill_sizes", tuple(int(p) for p in self.prefill_sizes))

    @classmethod
    def here(cls, device: torch.device, target: str, draft: str | None, dtype: str,
             threads: int | None = None, context_tokens: int = 256, repeats: int = 5,
             contexts: Sequence[int] = LONG_CONTEXTS, prefill_sizes: Sequence[int] = PREFILL_SIZES,
             compiled: bool = False, batch: int = 1, engine: str | None = None) -> "ProfileKey":
        import transformers

        from ..engine import default_engine_label
        engine = default_engine_label(compiled) if engine is None else engine
        return cls(device=device_key(device), target=target, draft=draft, dtype=dtype_name(dtype),
                   threads=threads or torch.get_num_threads(), torch=torch.__version__,
                   transformers=transformers.__version__, weights=weights_digest(target, draft),
                   context_tokens=context_tokens, repeats=repeats, contexts=tuple(contexts),
                   prefill_sizes=tuple(prefill_sizes), compiled=compiled, batch=batch, engine=engine)

    def filename(self) -> str:
        """A readable, unique file name: the pair, dtype and threads, then a hash of the whole key."""
        fields = dataclasses.asdict(self)
        if fields["batch"] == 1:
            del fields["batch"]  # (a batch-1 key hashes as it did before batched profiles: cached files stay valid)
        if fields["engine"] == "transformers":
            del fields["engine"]  # (likewise a transformers-path key: profiles from before the engine stay valid)
        digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]
        pair = f"{self.target}__{self.draft or 'nodraft'}"
        return re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{pair}__{self.dtype}__t{self.threads}__{digest}") + ".json"


# ------------------------------------------------------------------------------------------ profile


@dataclass(frozen=True)
class Latency:
    """Median and spread (25th, 75th percentile) of repeated timings, in seconds."""

    median_s: float
    p25_s: float
    p75_s: float

    @classmethod
    def of(cls, times: Sequence[float]) -> "Latency":
        if len(times) == 1:
            return cls(times[0], times[0], times[0])
        q = statistics.quantiles(times, n=4, method="inclusive")
        return cls(statistics.median(times), q[0], q[2])


@dataclass(frozen=True)
class PeerProfile:
    """Another engine's forward on the same machine, in the same calibration: llama.cpp on the GGUF the target was
    dequantised from (``specrepro.run.peers``), same threads, the same cached context, the same sizes n. Its β(n) is read as
    ours is: a forward over n new tokens (logits for all n, as a verification needs) over one forward over 1."""

    engine: str  # "llama.cpp"
    version: str  # llama-cpp-python's version (the llama.cpp it vendors)
    model_file: str  # the GGUF's file name
    model_type: str  # its weights' type ("q4_1")
    threads: int
    context_tokens: int  # the cached prefix every timed forward follows (the calibration context's tokens)
    repeats: int
    forward: tuple[tuple[int, Latency], ...]  # (n, L(n)), n ascending from 1

    @property
    def decode_s(self) -> float:
        return self.forward[0][1].median_s

    def l_fp(self, n: int) -> float:
        ns = [m for m, _ in self.forward]
        if not ns[0] <= n <= ns[-1]:
            raise ValueError(f"n = {n} is outside the {self.engine} profile's measured range 1..{ns[-1]}")
        return float(np.interp(n, ns, [lat.median_s for _, lat in self.forward]))

    def beta(self, n: int) -> float:
        """β(n) = L(n) / L(1), the engine's verification cost factor."""
        return self.l_fp(n) / self.decode_s

    def same_setup(self, other: "PeerProfile | dict") -> bool:
        """Whether ``other`` (a profile, or ``describe()``'s dict of an engine) ran the same engine, version, file and
        threads: a cached peer profile is reused only then."""
        o = other if isinstance(other, dict) else dataclasses.asdict(other)
        return all(o.get(k) == getattr(self, k) for k in ("engine", "version", "model_file", "threads"))

    @classmethod
    def from_dict(cls, d: dict) -> "PeerProfile":
        return cls(**{**d, "forward": tuple((int(n), Latency(**lat)) for n, lat in d["forward"])})


@dataclass(frozen=True)
class HostCost:
    """The host's seconds per decode step outside every forward (sampling, acceptance, proposals, trees and masks,
    cache bookkeeping), steady state (the first step, with the prefill, left out): what the forward curve does not
    hold. Measured by running the loops themselves (``specrepro.run.host_cost``), on this machine, once per profile.

    ``ar_step_s`` is a plain decode step's; ``spec_step_s`` a speculative step's with a model-free drafter
    (``method``, γ = ``gamma``): the loop's own work, which every drafter pays; a drafter's extra host work (EAGLE
    growing its tree) is not in it, so a prediction with it is still a lower bound on a step's seconds."""

    ar_step_s: float
    spec_step_s: float
    method: str = "prompt-lookup"
    gamma: int = 4
    steps: int = 0  # steady steps timed, of each loop

    def __post_init__(self) -> None:
        for name in ("ar_step_s", "spec_step_s"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")

    def step_s(self, gamma: int) -> float:
        """Host seconds of a step that proposes ``gamma`` drafts (0: a plain decode step)."""
        return self.ar_step_s if gamma == 0 else self.spec_step_s


@dataclass(frozen=True)
class Profile:
    """One dtype's measurements for a model pair on one device (see the module docstring)."""

    key: ProfileKey
    context_tokens: int  # length of the cached prefix every timed forward follows
    repeats: int  # timed calls per median
    forward: tuple[tuple[int, Latency], ...]  # (n, L_fp(n)) on the measured grid, n ascending from 1
    draft_decode: Latency | None  # one draft decode step, None without a draft
    machine: dict  # cpu / gpu description, versions, git revision, when and how long
    # (context c, ((n, L_fp(n) after c cached tokens), ...)) for each longer context, c ascending; () if none
    contexts: tuple[tuple[int, tuple[tuple[int, Latency], ...]], ...] = ()
    prefill: tuple[tuple[int, Latency], ...] = ()  # (P, seconds of one forward over P tokens from an empty cache)
    # llama.cpp's step on the same GGUF, threads and context, measured by ``calibrate`` where llama-cpp-python is
    # installed (None otherwise, and in profiles written before it: such files read as they were)
    peer: PeerProfile | None = None
    # the host's work per step outside the forwards (``HostCost``), measured where the loops can run (the bench, the
    # calibrate command); None in profiles measured without it: predictions then count the forwards alone
    host: HostCost | None = None

    def __post_init__(self) -> None:
        ns = [n for n, _ in self.forward]
        if not ns or ns[0] != 1 or any(b <= a for a, b in zip(ns, ns[1:])):
            raise ValueError(f"a profile's forward sizes must start at 1 and increase, got {ns}")
        cs = [self.context_tokens] + [c for c, _ in self.contexts]
        if any(b <= a for a, b in zip(cs, cs[1:])) or any(not curve or curve[0][0] != 1 for _, curve in self.contexts):
            raise ValueError(f"a profile's longer contexts must increase from {self.context_tokens} and each curve "
                             f"start at n = 1, got {cs}")

    @property
    def n_max(self) -> int:
        return self.forward[-1][0]

    @property
    def decode_s(self) -> float:
        """L_fp(1): one target decode step."""
        return self.forward[0][1].median_s

    def l_fp(self, n: int) -> float:
        """Seconds of one target forward over n new tokens (linear between measured sizes)."""
        if not 1 <= n <= self.n_max:
            raise ValueError(f"n = {n} is outside this profile's measured range 1..{self.n_max}")
        return float(np.interp(n, [m for m, _ in self.forward], [lat.median_s for _, lat in self.forward]))

    @property
    def floor_s(self) -> float | None:
        """The bandwidth floor of one decode step: the target's weight bytes ÷ the measured copy bandwidth (None
        for a profile measured before it was recorded)."""
        m = self.machine
        return m["weight_bytes"] / m["bandwidth_bytes_s"] if m.get("bandwidth_bytes_s") else None

    @property
    def held_floor_s(self) -> float | None:
        """The bandwidth floor of the bytes the engine holds (4-bit and 8-bit weights where it packs them), None where
        not recorded or the same as ``floor_s``."""
        m = self.machine
        if not m.get("held_bytes") or not m.get("bandwidth_bytes_s") or m["held_bytes"] >= m["weight_bytes"]:
            return None
        return m["held_bytes"] / m["bandwidth_bytes_s"]

    @property
    def compute_floor_s(self) -> float | None:
        """The compute floor of a one-token step: its GEMM FLOPs ÷ the measured GEMM rate in this dtype
        (``gemm_roofline``); a forward over n tokens needs n times it. None where not measured (bench sessions and
        profiles from before ``calibrate`` measured it)."""
        m = self.machine
        return m["step_flops"] / m["gemm_flops_s"] if m.get("gemm_flops_s") and m.get("step_flops") else None

    def at_context(self, context: int) -> "Profile":
        """This profile's L_fp(n) curve after ``context`` cached tokens: linear between the measured contexts, the
        nearest measured one outside them (a shorter context than ``context_tokens`` keeps the base curve, a slight
        overestimate). Sizes beyond a longer context's grid keep the base curve's ratio to its last measured size.
        Everything read from the result (L_fp, β, τ-per-second choices) is then for a run at that context."""
        if not self.contexts or context <= self.context_tokens:
            return self
        curves = [(self.context_tokens, self.forward)] + list(self.contexts)
        cs = [c for c, _ in curves]

        def at(curve, n: int) -> float:
            ns, ts = [m for m, _ in curve], [lat.median_s for _, lat in curve]
            if n <= ns[-1]:
                return float(np.interp(n, ns, ts))
            return ts[-1] * self.l_fp(n) / self.l_fp(ns[-1])  # (beyond a coarse grid's end: the base curve's shape)
        forward = []
        for n, lat in self.forward:
            t = float(np.interp(context, cs, [at(curve, n) for _, curve in curves]))
            scale = t / lat.median_s
            forward.append((n, Latency(t, lat.p25_s * scale, lat.p75_s * scale)))
        return dataclasses.replace(self, context_tokens=min(context, cs[-1]), forward=tuple(forward), contexts=())

    def prefill_s(self, prompt_tokens: int) -> float | None:
        """L_pre(P): seconds of the prefill of a P-token prompt, linear between the measured lengths and through
        the origin below the first, extrapolated from the last two beyond the longest (None if not measured)."""
        if not self.prefill:
            return None
        ps, ts = [0] + [p for p, _ in self.prefill], [0.0] + [lat.median_s for _, lat in self.prefill]
        if prompt_tokens <= ps[-1]:
            return float(np.interp(prompt_tokens, ps, ts))
        slope = (ts[-1] - ts[-2]) / (ps[-1] - ps[-2])
        return ts[-1] + slope * (prompt_tokens - ps[-1])

    def beta(self, n: int) -> float:
        """β(n) = L_fp(n) / L_fp(1)."""
        return self.l_fp(n) / self.decode_s

    def beta_curve(self) -> BetaCurve:
        """β over the measured grid, for the simulators (simulations.BetaCurve)."""
        return BetaCurve(tuple(n for n, _ in self.forward), tuple(l.median_s / self.decode_s for _, l in self.forward))

    @property
    def c(self) -> float | None:
        """Cost ratio c: one draft decode step / one target decode step."""
        return None if self.draft_decode is None else self.draft_decode.median_s / self.decode_s

    def host_s(self, gamma: int) -> float:
        """The host's seconds of a step proposing ``gamma`` drafts (``HostCost.step_s``; 0 without a measurement)."""
        return 0.0 if self.host is None else self.host.step_s(gamma)

    def time_per_token(self, gamma: int, alpha: float, c: float | None = None) -> float:
        """Expected seconds per generated token with γ drafts per step at acceptance rate α.

        A step costs γ draft steps (γ·c·L_fp(1)), one verification forward L_fp(γ+1) and the host's work around
        them (``host_s``), and yields τ = (1 − α^{γ+1}) / (1 − α) tokens (survey blog, *Batch Size*); γ = 0 is
        plain decoding (L_fp(1) and a plain step's host work). ``c`` defaults to the profile's draft; pass 0 for a
        model-free drafter.
        """
        c = (self.c or 0.0) if c is None else c
        return seconds_per_token(gamma, alpha, c, self.l_fp) + self.host_s(gamma) / tau(alpha, gamma)

    def summary(self) -> dict:
        """The numbers a reader wants first: L_fp(1), c and β(2..9)."""
        host = {} if self.host is None else {"host_ar_ms": 1e3 * self.host.ar_step_s,
                                             "host_spec_ms": 1e3 * self.host.spec_step_s}
        return {"dtype": self.key.dtype, "decode_ms": 1e3 * self.decode_s, "c": self.c, **host,
                **{f"beta_{n}": self.beta(n) for n in range(2, min(9, self.n_max) + 1)}}

    def to_dict(self) -> dict:
        return {"format": FORMAT, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, d: dict, source: str = "profile") -> "Profile":
        """Read back a profile; a corrupt or foreign file gets one error naming it."""
        if isinstance(d, dict) and d.get("format") == FORMAT_1:
            # A profile from before the longer contexts and the prefill (a committed bench's): read as it was made.
            d = {**d, "key": {**d.get("key", {}), "contexts": (), "prefill_sizes": ()}, "contexts": (), "prefill": ()}
        elif not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ValueError(f"{source} is not a specrepro device profile (expected format {FORMAT!r})")
        try:
            def curve(pairs) -> tuple[tuple[int, Latency], ...]:
                return tuple((int(n), Latency(**lat)) for n, lat in pairs)
            return cls(key=ProfileKey(**d["key"]), context_tokens=int(d["context_tokens"]), repeats=int(d["repeats"]),
                       forward=curve(d["forward"]),
                       draft_decode=Latency(**d["draft_decode"]) if d["draft_decode"] else None,
                       machine=dict(d["machine"]), contexts=tuple((int(c), curve(f)) for c, f in d["contexts"]),
                       prefill=curve(d["prefill"]),
                       peer=PeerProfile.from_dict(d["peer"]) if d.get("peer") else None,
                       host=HostCost(**d["host"]) if d.get("host") else None)
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{source} is a damaged device profile ({type(err).__name__}: {err})") from None


def save_profile(profile: Profile, path: str | Path) -> Path:
    """Write atomically (tmp + rename): an interrupted write never leaves half a profile."""
    return atomic_write_text(Path(path), json.dumps(profile.to_dict(), indent=1) + "\n")


def load_profile(path: str | Path, key: ProfileKey | None = None) -> Profile:
    """Read a profile file; with ``key``, refuse one measured under another key."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err}); delete it or run calibrate --recalibrate") from None
    profile = Profile.from_dict(data, source=str(path))
    if key is not None and profile.key != key:
        diff = [f"{f}: {getattr(profile.key, f)!r} vs {getattr(key, f)!r}" for f in dataclasses.asdict(key)
                if getattr(profile.key, f) != getattr(key, f)]
        raise ValueError(f"{path} was measured under another key ({'; '.join(diff)})")
    return profile


# ---------------------------------------------------------------------------------------- measuring


def forward_timer(model: torch.nn.Module, context: list[int], batch: int = 1) -> Callable[[int], float]:
    """A function n -> seconds of one forward over n new tokens after ``context`` (cached once, rolled back
    after each call), device-synchronised. The one timing primitive of the package. With ``batch`` B > 1, one
    forward over B different sequences of ``len(context)`` tokens × n new tokens each (``prefix.BatchedPrefix``,
    the context rotated per row), as a batched step scores them."""
    clock = Clock(model_device(model))
    tokens = context * (N_MAX // max(1, len(context)) + 1)
    if batch > 1:
        prefix = BatchedPrefix(model, batch_contexts(context, batch))  # [B, L] cached
        new = batch_contexts(tokens[:N_MAX], batch)  # [B, N_MAX]: row b's new tokens

        def time_batch(n: int) -> float:
            t0 = clock.now()
            prefix.forward(new[:, :n])
            return clock.now() - t0
        return time_batch
    cm = CachedModel(model)
    cm.logits_for(context)

    def time_forward(n: int) -> float:
        t0 = clock.now()
        cm.logits_for(context + tokens[:n])
        elapsed = clock.now() - t0
        cm.rollback(len(context))
        return elapsed
    return time_forward


def calibration_context(tokenizer, vocab_size: int, length: int = 256) -> list[int]:
    """A realistic prefix: the offline suites' prompt text, encoded and cut to ``length`` tokens (token ids
    0..V−1 cycled when there is no tokenizer, e.g. a tiny test model)."""
    if tokenizer is None:
        return [i % vocab_size for i in range(length)]
    from ..core.prompts import load_suite
    text = "\n\n".join(p.prompt for p in load_suite("mixed"))
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return (ids * (length // max(1, len(ids)) + 1))[:length]


# ------------------------------------------------------------------------------------------ choices

# What the choice assumes about α before a generation has measured any: the draft's record where it has one
# (the zoo draft's held-out α), else this middle value; the adaptive policy replaces it within a few steps.
DEFAULT_ALPHA_PRIOR = 0.5


@dataclass(frozen=True)
class DtypeChoice:
    dtype: str
    reason: str  # one sentence with the numbers the choice was made on
    seconds_per_token: dict  # dtype -> expected seconds per token under the criterion


def choose_dtype(profiles: dict[str, Profile], kind: str, gamma: int | str = 4,
                 alpha: float = DEFAULT_ALPHA_PRIOR, gamma_max: int = 16,
                 tree_cost: Callable[[Profile], tuple[float, str]] | None = None,
                 prompt_tokens: int | None = None, new_tokens: int | None = None) -> DtypeChoice:
    """The dtype with the lowest expected seconds per token for a method of ``kind``:

    - "plain" (autoregressive): L_fp(1);
    - "draft model" / "model-free" (speculative with a draft model, or with c = 0): the profile's
      (γ·c·L_fp(1) + L_fp(γ+1)) / τ(α, γ) at the given γ, or at each dtype's best γ ≤ gamma_max for "auto";
    - "self-drafting" (Medusa, PPD): ``tree_cost(profile)``, the measured latency of the tree forward at the
      hardware-aware size over its expected tokens per call (``plan.tree_cost``); without one, a c = 0 chain.

    With the run's ``prompt_tokens`` (P) and ``new_tokens`` (G), every step is costed at the run's mean context
    P + G/2 (``Profile.at_context``) and the prefill's L_pre(P) / G is added per token: on a CPU without bf16 units
    a long prompt's bf16 prefill alone can outweigh a cheaper bf16 decode step.
    """
    if not profiles:
        raise ValueError("choose_dtype needs at least one profile")
    if kind not in ("plain", "draft model", "model-free", "self-drafting"):
        raise ValueError(f"kind must be plain, draft model, model-free or self-drafting, got {kind!r}")
    if (prompt_tokens is None) != (new_tokens is None) or (new_tokens is not None and new_tokens < 1):
        raise ValueError(f"give both prompt_tokens and new_tokens >= 1, or neither (got {prompt_tokens}, {new_tokens})")
    cost, detail = {}, {}
    for name, base in profiles.items():
        prof = base if prompt_tokens is None else base.at_context(prompt_tokens + new_tokens // 2)
        if kind == "plain":
            cost[name] = prof.decode_s + prof.host_s(0)
            detail[name] = f"L_fp(1) {1e3 * prof.decode_s:.1f} ms" + (
                f" + host {1e3 * prof.host_s(0):.2f} ms" if prof.host is not None else "")
        elif kind == "self-drafting" and tree_cost is not None:
            cost[name], detail[name] = tree_cost(prof)
        else:
            c = prof.c if kind == "draft model" else 0.0
            if c is None:
                raise ValueError(f"the {name} profile has no draft timing: calibrate with --draft")
            gammas = range(1, min(gamma_max, prof.n_max - 1) + 1) if gamma == "auto" else [int(gamma)]
            best = min(gammas, key=lambda g: prof.time_per_token(g, alpha, c))
            cost[name] = prof.time_per_token(best, alpha, c)
            host = f", host {1e3 * prof.host_s(best):.2f} ms a step" if prof.host is not None else ""
            detail[name] = (f"{1e3 * cost[name]:.1f} ms/token at γ={best} (β({best + 1})={prof.beta(best + 1):.2f}, "
                            f"c={c:.3f}{host}, α prior {alpha:.2f})")
        prefill = base.prefill_s(prompt_tokens) if prompt_tokens is not None else None
        if prefill is not None:
            cost[name] += prefill / new_tokens
            detail[name] += (f" at context {prof.context_tokens}, + prefill of {prompt_tokens} tokens "
                             f"{1e3 * prefill:.0f} ms over {new_tokens} tokens")
    chosen = min(cost, key=cost.get)
    others = "; ".join(f"{n}: {detail[n]}" for n in cost if n != chosen)
    reason = f"{chosen} is fastest for a {kind} method here: {detail[chosen]}" + (f" (vs {others})" if others else "")
    return DtypeChoice(dtype=chosen, reason=reason, seconds_per_token=cost)
