"""The explorer's controls and its cost model: β(n) and c from the sliders or from a device profile, at a batch size.

Batch size enters through a roofline assumption (ours, not a document's): a forward of t tokens costs
max(1, t/K) weight loads, K the knee in tokens, so a measured batch-1 β(n) becomes β(n) · r_B(n) / r_1(n) at
batch B, with
r_B(n) = max(1, B·n/K) / max(1, B/K); with the constant β, β(n) = β · r_B(n), so a token tree wider than the knee
costs more even at batch 1.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

import simulations as sim

from ..engine.disk import profiles_dir


@dataclass(frozen=True)
class Controls:
    alpha: float = 0.6  # acceptance rate α; also the tree drafter's top-1 accuracy at distance 1
    gamma: int = 4  # draft tokens per step γ
    c: float = 0.05  # draft/target cost ratio of one forward
    beta: float = 1.0  # verification cost of γ+1 tokens relative to one decode step (constant), when no profile
    profile: str = ""  # a device profile (.json from `python -m specrepro calibrate`): its measured β(n) and c
    temperature: float = 0.0  # which committed benches' points to show (their sampling temperature)
    tree_size: int = 16  # nodes of the token tree
    batch: int = 1  # sequences decoded together
    knee: int = 32  # tokens per forward at which the roofline turns compute-bound
    experts: int = 8  # MoE experts per layer E
    top_k: int = 2  # experts each token routes to
    bound: float = 0.1  # mentored decoding's KL bound D (nats)
    gamma_max: int = 16  # the γ axes run 1..gamma_max

    def __post_init__(self) -> None:
        checks = {"alpha": 0.0 <= self.alpha < 1.0, "gamma": 1 <= self.gamma <= self.gamma_max,
                  "c": self.c >= 0.0, "beta": self.beta > 0.0, "temperature": self.temperature >= 0.0,
                  "tree_size": self.tree_size >= 2, "batch": self.batch >= 1, "knee": self.knee >= 1,
                  "experts": self.experts >= 1, "top_k": 1 <= self.top_k <= self.experts, "bound": self.bound >= 0.0,
                  "gamma_max": self.gamma_max >= 1}
        wanted = {"alpha": "in [0, 1)", "gamma": f"in 1..gamma_max = {self.gamma_max}", "c": "≥ 0", "beta": "> 0",
                  "temperature": "≥ 0", "tree_size": "≥ 2", "batch": "≥ 1", "knee": "≥ 1", "experts": "≥ 1",
                  "top_k": f"in 1..experts = {self.experts}", "bound": "≥ 0", "gamma_max": "≥ 1"}
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"{name} must be {wanted[name]}, got {getattr(self, name)!r}")


# ------------------------------------------------------------------ cost model: β(n), batch, the device profile


@dataclass(frozen=True)
class DeviceCosts:
    """β(n) and c of one device profile file (``calibrate``), without importing torch."""

    name: str  # the file's name
    device: str  # e.g. "cpu:AMD EPYC:avx2"
    dtype: str
    beta: sim.BetaCurve
    c: float | None  # None: a profile without a draft model


def device_profiles(folder: Path | None = None) -> dict[str, Path]:
    """name -> path of every device profile cached here, newest first."""
    folder = profiles_dir() if folder is None else Path(folder)
    files = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True) if folder.is_dir() else []
    return {p.name: p for p in files}


# metrics.profile.FORMAT_1 and FORMAT, spelled here so that the explorer reads profiles without importing torch
PROFILE_FORMATS = ("specrepro-device-profile/1", "specrepro-device-profile/2")


@functools.lru_cache(maxsize=32)
def read_profile(path: str) -> DeviceCosts:
    """The β curve and c of a profile file (format ``specrepro-device-profile/1`` or ``/2``, which adds longer contexts
    and the prefill: the β here is the base context's, as before)."""
    d = json.loads(Path(path).read_text())
    if d.get("format") not in PROFILE_FORMATS:
        raise ValueError(f"{path} is not a specrepro device profile (format {d.get('format')!r})")
    forward = {int(n): float(t["median_s"]) for n, t in d["forward"]}
    ns = sorted(forward)
    l1 = forward[1]
    key = d.get("key", {})
    draft = d.get("draft_decode")
    return DeviceCosts(name=Path(path).name, device=str(key.get("device", "?")), dtype=str(key.get("dtype", "?")),
                       beta=sim.BetaCurve(tuple(ns), tuple([1.0] + [forward[n] / l1 for n in ns[1:]])),
                       c=draft["median_s"] / l1 if draft else None)


def roofline(n, batch: int, knee: int):
    """r_B(n) = max(1, B·n/K) / max(1, B/K): a forward of B sequences × n tokens against one of B × 1 tokens, in the
    roofline of the module docstring."""
    n = np.asarray(n, dtype=float)
    return np.maximum(1.0, batch * n / knee) / max(1.0, batch / knee)


def beta_of(ctrl: Controls) -> Callable[[int], float]:
    """n -> β(n) at the controls' batch size. With a profile: its measured batch-1 curve (clipped to its largest
    measured n) times r_B(n) / r_1(n). Without: the constant β for every n > 1 times r_B(n), the roofline's growth
    once B·n passes the knee."""
    if ctrl.profile:
        curve = read_profile(ctrl.profile).beta
        return lambda n: (float(curve(min(int(n), curve.n_max)))
                          * float(roofline(n, ctrl.batch, ctrl.knee) / roofline(n, 1, ctrl.knee)))
    return lambda n: (1.0 if int(n) <= 1 else ctrl.beta) * float(roofline(n, ctrl.batch, ctrl.knee))


def cost_ratio(ctrl: Controls) -> float:
    """c: the profile's measured c when it has one, else the slider's."""
    if ctrl.profile:
        measured = read_profile(ctrl.profile).c
        if measured is not None:
            return measured
    return ctrl.c


def describe_costs(ctrl: Controls) -> str:
    """One line for a figure's footer: where β(n) and c come from, the batch and knee, and their values at γ+1."""
    beta = beta_of(ctrl)
    where = (f"β(n), c measured ({read_profile(ctrl.profile).device}, {read_profile(ctrl.profile).dtype})"
             if ctrl.profile else f"constant β = {ctrl.beta:g}, c = {ctrl.c:g}")
    return (f"{where}; batch {ctrl.batch} (knee {ctrl.knee}): β(γ+1) = {beta(ctrl.gamma + 1):.2f}, "
            f"c = {cost_ratio(ctrl):.3g}")
