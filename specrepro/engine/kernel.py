"""The engine's own CPU kernels (``kernels.cpp``), built once per machine on first use.

- ``rms_norm()``: RMSNorm in fp32 as one op (torch's CPU one is six);
- ``attention()``: grouped-query attention over a layer's cache in fp32 as one op (torch's way is five);
- ``q4_mm()``: the 4-bit GEMM (``llama.Q4``), where the CPU has AVX-512 BF16 (VDPBF16PS) or else AVX2 with FMA and
  F16C (``kernels_avx2.h``: the same sums in fp32 FMAs); a prompt's rows (``bulk``) on AMX's tiles where it has
  AMX-BF16 too (``kernels_amx.h``: a prefill at about a third of the cost);
- ``q8_mm()``: the 8-bit GEMM of a GGUF Q8_0 weight (the offline model's LM head), likewise (``llama.Q8``);
- ``llama_layer()``: a whole decoder layer on 4-bit weights as one op, likewise (``llama.LlamaStack.forward``).

Each returns its op, or None where it cannot run: not an x86 Linux CPU, no C++ compiler or ninja (torch's
``cpp_extension`` drives the build), a failed build (one line says so), or for ``q4_mm`` a CPU with neither set of
flags, or ``$SPECREPRO_KERNELS``: "no-amx" keeps a prompt's rows off AMX, "torch-int4" keeps torch's int4 kernel, "off"
every torch op (all three for side-by-side measurements). ``why_not()`` says why ``q4_mm`` is None. The engine then
runs torch's ops: nothing but speed depends on these.

The build (about 30 s on 2 cores: torch's headers) is compiled for this CPU (``-march=native``) and goes where torch
keeps its extensions (``$TORCH_EXTENSIONS_DIR``, default ``~/.cache/torch_extensions``), keyed by the source, the
flags, torch's version and the CPU's flags: every later process loads it from there (whatever its
``$SPECREPRO_CACHE``, which tests point at temporary folders), and concurrent builds wait on one lock.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import platform
import shutil
import sys
from pathlib import Path

import torch


SOURCE = Path(__file__).with_name("kernels.cpp")
# included by SOURCE, and so part of the build's key:
HEADERS = [Path(__file__).with_name(name) for name in ("kernels_amx.h", "kernels_avx2.h")]
FLAGS = ["-O3", "-march=native", "-fopenmp"]  # (OpenMP: ATen's parallel_for on torch's threads, and simd loops)
# either set of flags, as /proc/cpuinfo spells them: VDPBF16PS, else FMAs on AVX2
Q4_CPU_FLAGS = (("avx512f", "avx512bw", "avx512_bf16"), ("avx2", "fma", "f16c"))
ENV = "SPECREPRO_KERNELS"  # "on" (default), "no-amx" (ours without AMX), "torch-int4" (torch's int4 kernel, ours for
CHOICES = ("on", "no-amx", "torch-int4", "off")  # the rest), "off" (torch's ops)
_state: dict = {}  # "ops" (torch.ops.specrepro, or None) and "why" (why it is None), once per process


def rms_norm():
    """``rms_norm(x [..., H] fp32, w [H] fp32, eps) -> fp32``, or None."""
    ops = _ops()
    return None if ops is None else ops.rms_norm


def attention():
    """``attention(q [B, Hq, Q, D], k [B, Hkv, C, D], v, S, mask [B, 1, Q, S], scale) -> [B, Q, Hq·D]``, all fp32 (see
    kernels.cpp), or None."""
    ops = _ops()
    return None if ops is None else ops.attention


def q4_mm():
    """``q4_mm(x [..., K] fp32 or bf16, packed, d, z, bulk=None) -> [..., N] fp32`` (see kernels.cpp; ``bulk``: bool,
    x's leading shape, the rows that are a prompt's), or None."""
    return None if why_not() else _ops().q4_mm


def q8_mm():
    """``q8_mm(x [..., K] fp32 or bf16, packed, d) -> [..., N] fp32`` (see kernels.cpp), or None (where ``q4_mm``
    is)."""
    return None if why_not() else _ops().q8_mm


def llama_layer():
    """``llama_layer(x, attn_norm, mlp_norm, eps, w, cos, ssin, k, v, slots, S, mask, n_heads, bulk=None) -> x`` (a layer
    on 4-bit weights as one op; see kernels.cpp), or None (where ``q4_mm`` is)."""
    return None if why_not() else _ops().llama_layer


AMX_CPU_FLAGS = ("amx_tile", "amx_bf16")


def bulk_tiles() -> bool:
    """Whether ``q4_mm``'s ``bulk`` rows run on AMX's tiles (``kernels_amx.h``): the kernel runs, the CPU has AMX-BF16
    and ``$SPECREPRO_KERNELS`` is "on". Elsewhere a bulk row is an ordinary one, and the engine does not mark any."""
    return choice() == "on" and all(f in cpu_flags() for f in AMX_CPU_FLAGS) and q4_mm() is not None


def why_not() -> str | None:
    """Why ``q4_mm()`` is None (None when it runs)."""
    if choice() not in ("on", "no-amx"):
        return f"{ENV}={choice()}"
    if not any(all(f in cpu_flags() for f in flags) for flags in Q4_CPU_FLAGS):
        return f"this CPU lacks {' or '.join(', '.join(flags) for flags in Q4_CPU_FLAGS)}"
    if _ops() is None:
        return _state["why"]
    return None


def choice() -> str:
    """``$SPECREPRO_KERNELS`` (default "on")."""
    value = os.environ.get(ENV, "on")
    if value not in CHOICES:
        raise ValueError(f"{ENV}={value!r}: choose one of {', '.join(CHOICES)}")
    return value


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's flags as /proc/cpuinfo lists them (empty where there is none), read once per process (the engine
    asks at every forward)."""
    info = Path("/proc/cpuinfo")
    for line in (info.read_text().splitlines() if info.exists() else []):
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def _ops():
    if choice() == "off":
        return None
    if "ops" not in _state:
        _state["ops"] = None
        if platform.machine() not in ("x86_64", "AMD64") or platform.system() != "Linux":
            _state["why"] = f"the kernels are built for x86 Linux (this is {platform.machine()} {platform.system()})"
        else:
            _state["ops"] = _load()
    return _state["ops"]


def _load():
    from torch.utils import cpp_extension
    if shutil.which("ninja") is None:  # the PyPI package's binary (a dependency), where no ninja is on the PATH
        with contextlib.suppress(ImportError):
            import ninja
            os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
    parts = [SOURCE.read_bytes(), *(h.read_bytes() for h in HEADERS), " ".join(FLAGS).encode(),
             torch.__version__.encode(), " ".join(sorted(cpu_flags())).encode()]
    key = hashlib.sha256(b"\n".join(parts)).hexdigest()
    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR", "~/.cache/torch_extensions")).expanduser()
    folder = root / f"specrepro-{key[:16]}"
    folder.mkdir(parents=True, exist_ok=True)
    if not any(folder.glob("*.so")):
        print(f"building the engine's CPU kernels for this machine, once (about 30 s) into {folder}",
              file=sys.stderr, flush=True)
    try:
        cpp_extension.load(name="specrepro_kernels", sources=[str(SOURCE)], extra_cflags=FLAGS,
                           extra_ldflags=["-fopenmp"], build_directory=str(folder), is_python_module=False,
                           verbose=False)
    except Exception as err:  # (no compiler, no ninja, an old assembler: torch's ops run instead)
        last = str(err).strip().splitlines()[-1] if str(err).strip() else repr(err)
        _state["why"] = f"the engine's CPU kernels did not build ({last})"
        print(f"{_state['why']}; torch's ops run instead", file=sys.stderr, flush=True)
        return None
    return torch.ops.specrepro
