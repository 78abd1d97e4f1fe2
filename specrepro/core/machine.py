"""Which machine a run was made on, as exactly as the system says: what keys the run cache and names a CPU in a
notebook's record.

A virtual machine's model name may say only "AMD EPYC" for CPUs two generations and 2x in speed apart (a Zen 1 and a
Zen 3 both did), so the model name alone cannot keep one machine's timings from being read back on another. The
vendor, family, model and stepping of ``/proc/cpuinfo`` can, with the flags that select kernels and the core count
beside them; a GPU is named by the driver (``/proc/driver/nvidia``), without starting CUDA.
"""
from __future__ import annotations

import functools
import hashlib
import os
import platform
from pathlib import Path

from .deps import bookkeeping

bookkeeping(__file__)  # names the machine a result was made on, never what the result is

CPUINFO = Path("/proc/cpuinfo")
NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")


def cpu_fields(cpuinfo: Path = CPUINFO) -> dict[str, str]:
    """The first processor's fields of ``cpuinfo`` (up to its flags), or {} where there is no such file."""
    fields: dict[str, str] = {}
    try:
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
            if key.strip() == "flags":
                break
    except OSError:
        return {}
    return fields


def cpu_model(cpuinfo: Path = CPUINFO) -> str | None:
    """The CPU's vendor, family, model and stepping ("AuthenticAMD family 25 model 1 stepping 1"), or None where
    ``/proc/cpuinfo`` does not say."""
    fields = cpu_fields(cpuinfo)
    if "cpu family" not in fields:
        return None
    return (f"{fields.get('vendor_id', '?')} family {fields['cpu family']} model {fields.get('model', '?')} "
            f"stepping {fields.get('stepping', '?')}")


def gpu_names(root: Path = NVIDIA_GPUS) -> list[str]:
    """The models of the NVIDIA GPUs the driver lists, in bus order (none without the driver)."""
    names = []
    for info in sorted(root.glob("*/information")) if root.is_dir() else []:
        for line in info.read_text(errors="replace").splitlines():
            if line.startswith("Model:"):
                names.append(line.split(":", 1)[1].strip())
    return names


@functools.lru_cache(maxsize=None)
def machine() -> dict:
    """What a cached result's machine is: CPU name, vendor/family/model/stepping, flags, logical cores, GPUs."""
    fields = cpu_fields()
    return {"cpu": fields.get("model name") or platform.processor() or platform.machine(), "cpu_model": cpu_model(),
            "cpu_flags": sorted(fields.get("flags", "").split()), "cores": os.cpu_count(), "gpus": gpu_names()}


def fingerprint() -> str:
    """16 hex digits naming this machine (:func:`machine`): the run cache keys every cell by it, so that a timing or
    a sampled result made on one CPU is never read back on another."""
    text = repr(sorted(machine().items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
