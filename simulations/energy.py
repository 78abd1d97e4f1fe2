"""Energy model of LLM inference: E = P_flop · T_flop + P_mem · T_mem, fitted to MJSD Table 1.

MJSD paper (``000_c24b55bca4e940a6.txt``), §4 "Energy Efficiency Analysis", Eq. (2):
E_total = PW_flop · T_flop + PW_mem · T_mem, with PW the power drawn by arithmetic and by
memory operations and T the time spent on each. The paper argues PW_mem ≫ PW_flop and
T_mem ≫ T_flop at small batch, so energy follows memory time, which speculative decoding
cuts by running the target fewer times. Its Table 1 measures OPT-13B on 2 Nvidia A10 GPUs at a
fixed number of target runs (about 3,000) and batch size b ∈ {1, 2, 4, 8, 16}.

The table gives total time and energy, not their split between arithmetic and memory, so the
worked fit (:func:`fit_mjsd_table1`) assumes the simplest split the paper's argument implies:
per run, memory time is a constant T_mem (the weights are read once whatever b) and arithmetic
time grows in proportion to b, T_flop = b · t_flop. Both come from a least-squares line through
Time/run; the powers then come from :func:`fit_energy_model` on Energy/run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from . import _checks


@dataclass(frozen=True)
class BatchEnergyTable:
    """Energy and time of a fixed number of model runs at several batch sizes (one row per b)."""

    batch_size: tuple[int, ...]
    energy_J: tuple[float, ...]  # total energy of all runs
    energy_per_run_J: tuple[float, ...]
    energy_per_input_J: tuple[float, ...]  # per run / batch size
    time_s: tuple[float, ...]  # total time of all runs
    time_per_run_s: tuple[float, ...]
    time_per_input_s: tuple[float, ...]
    source: str

    def column(self, name: str) -> np.ndarray:
        """One column as a float array [rows]."""
        return np.asarray(getattr(self, name), dtype=float)

    @property
    def n_runs(self) -> np.ndarray:
        """Runs implied by each row (total / per run): the paper fixes it, so about constant."""
        return self.column("energy_J") / self.column("energy_per_run_J")


# MJSD paper, §4, Table 1, "The effect of batch size to inference speed and energy consumption":
# OPT-13B on 2 Nvidia A10 (24 GB), energy from nvidia-smi power.draw sampled every second
# (Appendix B). Copied as printed, rounding included.
MJSD_TABLE1 = BatchEnergyTable(
    batch_size=(1, 2, 4, 8, 16),
    energy_J=(42_450.0, 49_621.0, 53_325.0, 59_210.0, 74_058.0),
    energy_per_run_J=(14.1, 16.5, 17.7, 19.7, 24.7),
    energy_per_input_J=(14.1, 8.26, 4.43, 2.46, 1.54),
    time_s=(1_129.0, 1_191.0, 1_178.0, 1_211.0, 1_255.0),
    time_per_run_s=(0.376, 0.397, 0.392, 0.403, 0.418),
    time_per_input_s=(0.376, 0.198, 0.098, 0.050, 0.026),
    source="MJSD (seed 000), §4 Table 1: OPT-13B, 2x Nvidia A10 24GB",
)


# MJSD paper, §5.1, Table 2: speedup over greedy and energy per token (J) of greedy, vanilla
# speculative decoding and MJSD, per dataset (CP ChatGPT-Prompt, CA ChatAlpaca, CD CNN
# DailyMail) and model pair (Llama-2: Llama-68M drafting for Llama-2-13B; OPT: OPT-125m for
# OPT-13B); 1 Nvidia L40, batch size 1 (Appendix C), 4 draft tokens per step (Fig. 3). Means as
# printed, without the ± standard deviations. BiLD and SpecTr columns omitted.
MJSD_TABLE2_COLUMNS = ("dataset", "model", "speedup_speculative", "speedup_mjsd",
                       "energy_greedy_J", "energy_speculative_J", "energy_mjsd_J")
MJSD_TABLE2 = (
    ("CP", "Llama-2", 1.63, 2.78, 11.7, 6.62, 3.38),
    ("CP", "OPT", 1.51, 2.50, 13.2, 7.48, 3.61),
    ("CA", "Llama-2", 1.43, 2.00, 11.2, 6.98, 4.72),
    ("CA", "OPT", 1.49, 2.08, 11.3, 5.74, 4.03),
    ("CD", "Llama-2", 1.41, 2.04, 11.3, 7.07, 4.80),
    ("CD", "OPT", 1.36, 1.87, 11.5, 6.37, 4.86),
)


def energy_saving_over_speedup(gamma, c, c_energy, fit: "BatchEnergyFit"):
    """Predicted (energy saving) / (speedup) of speculative decoding over target-only decoding.

    Per token, decoding with the target alone costs one run at b = 1; a speculative step costs γ
    draft runs and one verification that the fit treats like a run at batch γ + 1, and yields
    τ tokens. So the speedup is τ / (γc + β_T) (survey blog *Batch Size*) and the energy saving
    τ / (γc_E + β_E), with β_T, β_E the fit's time and energy ratios at batch γ + 1 (MJSD §4
    Eq. 2 through Table 1). τ cancels: the ratio does not depend on α.

    Args:
        gamma: draft tokens per step, ≥ 1.
        c: draft/target time ratio per run, ≥ 0.
        c_energy: draft/target energy ratio per run, ≥ 0.
        fit: a :class:`BatchEnergyFit` (e.g. :func:`fit_mjsd_table1`).
    """
    gamma = _checks.integer("gamma", gamma, minimum=1)
    c = _checks.nonnegative("c", c)
    c_energy = _checks.nonnegative("c_energy", c_energy)
    batch = gamma + 1.0
    ratio = (gamma * c + fit.time_beta(batch)) / (gamma * c_energy + fit.energy_beta(batch))
    return _checks.scalar_result(np.asarray(ratio))


def energy_model(p_flop, p_mem, t_flop, t_mem):
    """Energy of a run: E = P_flop · T_flop + P_mem · T_mem (MJSD §4, Eq. 2).

    Args:
        p_flop, p_mem: power of arithmetic and of memory operations (W), ≥ 0.
        t_flop, t_mem: time spent on each (s), ≥ 0. All array-like, broadcast together.
    """
    p_flop = _checks.nonnegative("p_flop", p_flop)
    p_mem = _checks.nonnegative("p_mem", p_mem)
    t_flop = _checks.nonnegative("t_flop", t_flop)
    t_mem = _checks.nonnegative("t_mem", t_mem)
    return _checks.scalar_result(np.asarray(p_flop * t_flop + p_mem * t_mem))


@dataclass(frozen=True)
class EnergyFit:
    """Powers fitted to E = P_flop · T_flop + P_mem · T_mem."""

    p_flop: float  # W
    p_mem: float  # W
    residuals: tuple[float, ...]  # measured − fitted energy, one per observation (J)
    r_squared: float

    def predict(self, t_flop, t_mem):
        return energy_model(self.p_flop, self.p_mem, t_flop, t_mem)


def fit_energy_model(t_flop, t_mem, energy) -> EnergyFit:
    """Least-squares powers (P_flop, P_mem) ≥ 0 of MJSD §4 Eq. (2) from observed runs.

    Solves min ‖[T_flop T_mem] · [P_flop P_mem]ᵀ − E‖² with non-negative powers (scipy nnls;
    a negative power has no physical meaning).

    Args:
        t_flop, t_mem, energy: 1-D arrays [n] (s, s, J), n ≥ 2.
    """
    t_flop = _checks.nonnegative("t_flop", t_flop)
    t_mem = _checks.nonnegative("t_mem", t_mem)
    energy = _checks.nonnegative("energy", energy)
    if not (t_flop.ndim == t_mem.ndim == energy.ndim == 1) or not (
            t_flop.size == t_mem.size == energy.size):
        raise ValueError(f"t_flop, t_mem and energy must be 1-D arrays of one length, got shapes "
                         f"{t_flop.shape}, {t_mem.shape}, {energy.shape}")
    if energy.size < 2:
        raise ValueError(f"energy must hold at least 2 observations, got {energy.size}")
    design = np.column_stack([t_flop, t_mem])  # [n, 2]
    (p_flop, p_mem), _ = nnls(design, energy)
    fitted = design @ np.array([p_flop, p_mem])
    residuals = energy - fitted
    total = np.sum((energy - energy.mean()) ** 2)
    r_squared = 1.0 - np.sum(residuals**2) / total if total > 0 else 1.0
    return EnergyFit(float(p_flop), float(p_mem), tuple(residuals.tolist()), float(r_squared))


def split_time_by_batch(batch_size, time_per_run):
    """Least-squares split of time per run into memory and arithmetic: T(b) = T_mem + b · t_flop.

    The assumption behind :func:`fit_mjsd_table1` (MJSD §4: memory traffic per run does not
    depend on b, arithmetic grows with it).

    Returns:
        (t_mem, t_flop_per_input) in seconds.
    """
    batch_size = _checks.positive("batch_size", batch_size)
    time_per_run = _checks.nonnegative("time_per_run", time_per_run)
    if batch_size.shape != time_per_run.shape or batch_size.ndim != 1 or batch_size.size < 2:
        raise ValueError(f"batch_size and time_per_run must be 1-D arrays of one length >= 2, got "
                         f"shapes {batch_size.shape} and {time_per_run.shape}")
    design = np.column_stack([np.ones_like(batch_size), batch_size])  # [n, 2]
    (t_mem, t_flop), _ = nnls(design, time_per_run)
    return float(t_mem), float(t_flop)


@dataclass(frozen=True)
class BatchEnergyFit:
    """The worked fit of MJSD Table 1 (see :func:`fit_mjsd_table1`)."""

    t_mem: float  # s per run, memory part (constant in b)
    t_flop_per_input: float  # s per run per unit of batch size, arithmetic part
    powers: EnergyFit  # P_flop, P_mem fitted on energy per run

    def time_per_run(self, batch_size):
        b = _checks.positive("batch_size", batch_size)
        return _checks.scalar_result(np.asarray(self.t_mem + b * self.t_flop_per_input))

    def energy_per_run(self, batch_size):
        b = _checks.positive("batch_size", batch_size)
        return self.powers.predict(b * self.t_flop_per_input, np.full_like(b, self.t_mem))

    def memory_share(self, batch_size):
        """Fraction of a run's energy spent on memory, P_mem T_mem / E."""
        b = _checks.positive("batch_size", batch_size)
        return _checks.scalar_result(
            np.asarray(self.powers.p_mem * self.t_mem / self.energy_per_run(b)))

    def time_beta(self, batch_size):
        """Time of a run at batch b relative to b = 1: β of the survey blog for this fit."""
        return _checks.scalar_result(np.asarray(self.time_per_run(batch_size) / self.time_per_run(1.0)))

    def energy_beta(self, batch_size):
        """Energy of a run at batch b relative to b = 1: the energy counterpart of β.

        Verifying γ+1 draft tokens in one target pass moves about as many weights and does about
        as much arithmetic as a batch of γ+1 single tokens, so energy_beta(γ+1) estimates the
        energy of a verification step relative to one decode step.
        """
        return _checks.scalar_result(np.asarray(self.energy_per_run(batch_size) / self.energy_per_run(1.0)))


def fit_mjsd_table1(table: BatchEnergyTable = MJSD_TABLE1) -> BatchEnergyFit:
    """Worked fit of MJSD §4 Eq. (2) on its Table 1 (batch size vs energy and time).

    1. Split Time/run into T_mem + b · t_flop by least squares (:func:`split_time_by_batch`).
    2. Fit P_flop, P_mem on Energy/run with T_flop = b · t_flop, T_mem constant
       (:func:`fit_energy_model`).
    """
    b = table.column("batch_size")
    t_mem, t_flop = split_time_by_batch(b, table.column("time_per_run_s"))
    powers = fit_energy_model(b * t_flop, np.full_like(b, t_mem), table.column("energy_per_run_J"))
    return BatchEnergyFit(t_mem, t_flop, powers)
