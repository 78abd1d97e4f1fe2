"""Energy per generation from the hardware's own cumulative counters, read before and after (issue 14).

The MJSD paper (``000``) reports joules per token (Tables 1-3) and its Appendix B measures them by polling
``nvidia-smi --query-gpu=power.draw`` once a second and summing. A 1 Hz sample misses most of a generation
that lasts a second or two, so here a meter reads an energy *counter* the hardware integrates itself:

    nvml   on CUDA: NVML's total energy since the driver loaded, ``nvmlDeviceGetTotalEnergyConsumption``, in
           millijoules (nvidia-ml-py; Volta and later). It counts the whole GPU, other processes on it included;
    rapl   on the CPU: the RAPL *package* domains under ``/sys/class/powercap`` (``intel-rapl:<i>``, named
           ``package-<i>``), summed over sockets; ``energy_uj`` in microjoules, which wraps to 0 after
           ``max_energy_range_uj``. Sub-domains (core, uncore, dram) lie inside a package and are not added
           again; ``intel-rapl-mmio`` repeats a package through another interface and is skipped. A package
           counts everything on the socket, other processes included: on a shared machine compare against an
           idle baseline of the same length;
    none   otherwise, with a reason: no powercap on this machine, ``energy_uj`` readable by root only (Linux
           5.10 and later, after CVE-2020-8694), no NVML, a GPU without the counter, ...

    meter = open_meter(device)          # never raises for a missing counter: check meter.available
    with meter.measure() as m:
        generate(...)
    m.joules, m.seconds                  # None and meter.reason when unavailable

``read_j()`` is the meter's cumulative joules since it was opened. RAPL wrap-around is undone between two
reads, so reads must come less than one wrap period apart (``max_energy_range_uj`` / package power: about
an hour at 70 W for a 262 kJ range); ``measure`` reads at the start and the end of its block.
"""
from __future__ import annotations

import re
from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch

from ..core.decoding import Clock

POWERCAP_ROOT = Path("/sys/class/powercap")
_PACKAGE_DIR = re.compile(r"intel-rapl:\d+")  # top-level RAPL domains; intel-rapl:<i>:<j> are sub-domains


@dataclass
class Measurement:
    """Energy and wall time of one ``measure()`` block, filled in when the block exits."""

    source: str  # the meter's source: "nvml", "rapl" or "none"
    joules: float | None = None  # None while the block runs, or when the meter is unavailable
    seconds: float | None = None  # wall time of the block, device-synchronised on CUDA
    reason: str | None = None  # why joules is None


class EnergyMeter(ABC):
    """A cumulative energy counter: ``read_j()`` before and after, the difference is the energy spent."""

    source: str  # "nvml", "rapl" or "none"
    scope: str  # what is counted, in words (which GPU, which packages)
    resolution_s: float = 0.0  # a block shorter than this reads no energy, or a whole update period's

    def __init__(self, device: torch.device):
        self.clock = Clock(device)  # synchronises CUDA, so queued kernels are counted before a read

    @property
    def available(self) -> bool:
        return True

    @property
    def reason(self) -> str | None:
        """Why the meter cannot measure; None when it can."""
        return None

    @abstractmethod
    def read_j(self) -> float:
        """Joules counted since the meter was opened."""

    @contextmanager
    def measure(self) -> Iterator[Measurement]:
        """Energy and wall time of the ``with`` block; an unavailable meter gives joules None and its reason."""
        m = Measurement(source=self.source, reason=self.reason)
        start_s = self.clock.now()
        start_j = self.read_j() if self.available else None
        yield m
        m.seconds = self.clock.now() - start_s
        if start_j is not None:
            m.joules = self.read_j() - start_j
            if m.joules <= 0 or m.seconds < self.resolution_s:  # the counter had no update inside the block
                m.joules, m.reason = None, (
                    f"below {self.source} resolution: a {m.seconds * 1e3:.1f} ms block read {m.joules:.3f} J "
                    f"(the counter updates about every {max(self.resolution_s, 1e-3) * 1e3:.0f} ms); "
                    f"measure a longer block")


class UnavailableMeter(EnergyMeter):
    """No counter can be read here; ``reason`` says why."""

    source = "none"

    def __init__(self, reason: str, device: torch.device = torch.device("cpu")):
        super().__init__(device)
        self._reason = reason
        self.scope = "nothing"

    @property
    def available(self) -> bool:
        return False

    @property
    def reason(self) -> str:
        return self._reason

    def read_j(self) -> float:
        raise RuntimeError(f"no energy counter: {self._reason}")


# ---------------------------------------------------------------------------------------------- NVML


class NvmlMeter(EnergyMeter):
    """NVML's total-energy counter of one GPU (millijoules since the driver loaded; 64-bit, never wraps)."""

    source = "nvml"
    resolution_s = 0.1  # NVML refreshes the counter every 20-100 ms, depending on the GPU; the longest is taken

    def __init__(self, nvml, handle, scope: str, device: torch.device):
        super().__init__(device)
        self._nvml, self._handle, self.scope = nvml, handle, scope
        self._origin_mj = self._read_mj()

    def _read_mj(self) -> int:
        return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))

    def read_j(self) -> float:
        return (self._read_mj() - self._origin_mj) / 1e3


def nvml_meter(uuid: str, device: torch.device | None = None) -> EnergyMeter:
    """The NVML meter of the GPU with this NVML UUID ("GPU-..."), or an unavailable meter saying why.

    The UUID, not the CUDA index, names the GPU: NVML numbers every GPU on the machine, CUDA only the
    visible ones (``CUDA_VISIBLE_DEVICES``). ``device`` is the torch device used to synchronise before reads.
    """
    device = device if device is not None else torch.device("cpu")
    try:
        import pynvml
    except ImportError:
        return UnavailableMeter("the nvidia-ml-py package (module pynvml) is not installed", device)
    try:
        pynvml.nvmlInit()  # reference-counted by NVML, so repeated opens are cheap
        handle, scope = pynvml.nvmlDeviceGetHandleByUUID(uuid), f"GPU {uuid}"
        if uuid.startswith("MIG-"):  # a slice has no energy counter of its own: its GPU's counts every slice
            handle = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
            scope = f"the whole GPU holding MIG slice {uuid} (every slice on it counted)"
        meter = NvmlMeter(pynvml, handle, scope=scope, device=device)
    except pynvml.NVMLError as exc:  # no driver, unknown UUID, NOT_SUPPORTED before Volta or on a MIG slice
        return UnavailableMeter(f"NVML total-energy counter of GPU {uuid} unreadable: {exc}", device)
    return meter


def _cuda_uuid(device: torch.device) -> str:
    """NVML's name of the CUDA device torch calls ``device``: "GPU-<hex>", or "MIG-<hex>" for a MIG slice (CUDA
    names a slice "<GPU name> MIG <profile>" and gives the slice's own UUID)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    uuid = str(props.uuid)
    if uuid.startswith(("GPU-", "MIG-")):
        return uuid
    return f"{'MIG' if ' MIG ' in f' {props.name} ' else 'GPU'}-{uuid}"


# ---------------------------------------------------------------------------------------------- RAPL


@dataclass(frozen=True)
class RaplPackage:
    """One RAPL package domain: its counter file and the value at which the counter wraps to 0."""

    name: str  # "package-0"
    energy_file: Path  # .../intel-rapl:0/energy_uj
    max_range_uj: int  # .../intel-rapl:0/max_energy_range_uj


class RaplMeter(EnergyMeter):
    """The sum of the RAPL package counters; wrap-around undone at every read.

    A counter that reads lower than the last time wrapped once: the energy spent is
    ``max_energy_range_uj - last + now`` (the counter's one-unit step at the wrap, tens of µJ, is not counted).
    """

    source = "rapl"

    def __init__(self, packages: list[RaplPackage], device: torch.device = torch.device("cpu")):
        if not packages:
            raise ValueError("a RAPL meter needs at least one package domain")
        super().__init__(device)
        self.packages = tuple(packages)
        self.scope = " + ".join(p.name for p in self.packages)
        self._last_uj = [_read_uj(p.energy_file) for p in self.packages]  # [n_packages]
        self._total_uj = 0

    def read_j(self) -> float:
        for i, package in enumerate(self.packages):
            now = _read_uj(package.energy_file)
            delta = now - self._last_uj[i]
            if delta < 0:  # wrapped past max_energy_range_uj since the last read
                delta += package.max_range_uj
            self._total_uj += delta
            self._last_uj[i] = now
        return self._total_uj / 1e6


def _read_uj(path: Path) -> int:
    return int(path.read_text().strip())


def rapl_meter(root: str | Path = POWERCAP_ROOT) -> EnergyMeter:
    """The RAPL meter over every package domain under ``root`` (a powercap sysfs tree), or an unavailable
    meter saying why: no such tree, no package domain, or a counter that cannot be read (every package
    must be readable, as a partial sum would understate the energy)."""
    root = Path(root)
    if not root.is_dir():
        return UnavailableMeter(f"no powercap tree at {root} (not Linux, a VM or container without RAPL, "
                                f"or the intel_rapl driver not loaded)")
    packages = []
    try:
        for domain in sorted(d for d in root.iterdir() if _PACKAGE_DIR.fullmatch(d.name)):
            name = (domain / "name").read_text().strip()
            if not name.startswith("package"):  # e.g. "psys", the whole platform on some laptops
                continue
            packages.append(RaplPackage(name, domain / "energy_uj", _read_uj(domain / "max_energy_range_uj")))
        if not packages:
            return UnavailableMeter(f"no RAPL package domain (intel-rapl:<i> named package-<i>) under {root}")
        return RaplMeter(packages)
    except PermissionError as exc:
        return UnavailableMeter(f"permission denied reading {exc.filename}: RAPL counters are readable by root "
                                f"only since Linux 5.10 (CVE-2020-8694); run as root or make energy_uj "
                                f"readable (chmod o+r)")
    except (OSError, ValueError) as exc:
        return UnavailableMeter(f"RAPL counter under {root} unreadable: {exc}")


# --------------------------------------------------------------------------------------------- entry


def open_meter(device: str | torch.device = "cpu", powercap_root: str | Path = POWERCAP_ROOT) -> EnergyMeter:
    """The energy meter for ``device``: NVML on CUDA, RAPL packages on the CPU, else an unavailable meter.

    Never raises for a missing counter; check ``.available`` and ``.reason``. ``powercap_root`` is the
    sysfs tree the CPU meter reads (a parameter so tests can give a fake one).
    """
    device = torch.device(device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return UnavailableMeter(f"{device} asked for but CUDA is not available")
        return nvml_meter(_cuda_uuid(device), device)
    if device.type == "cpu":
        return rapl_meter(powercap_root)
    return UnavailableMeter(f"no energy counter is known for device type {device.type!r}", device)
