"""Argument validation shared by the analytic simulators.

Every public function of :mod:`simulations` validates its arguments here, so that a bad value
fails at once with a message naming the argument and the offending value, instead of turning
into a silent NaN three functions later. Each checker returns the argument as a float (or int)
``numpy`` array so that callers can broadcast it.
"""

from __future__ import annotations

import numpy as np


def _first_bad(array: np.ndarray, bad: np.ndarray):
    """The first offending element, as a plain Python number (for the error message)."""
    return array[bad].flat[0].item()


def as_float(name: str, value) -> np.ndarray:
    """``value`` as a finite float array, or ValueError naming ``name``."""
    try:
        array = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number or an array of numbers, got {value!r}") from None
    bad = ~np.isfinite(array)
    if bad.any():
        raise ValueError(f"{name} must be finite, got {_first_bad(array, bad)!r}")
    return array


def probability(name: str, value) -> np.ndarray:
    """A finite float array with every element in [0, 1] (an acceptance rate α, say)."""
    array = as_float(name, value)
    bad = (array < 0.0) | (array > 1.0)
    if bad.any():
        raise ValueError(f"{name} must lie in [0, 1], got {_first_bad(array, bad)!r}")
    return array


def nonnegative(name: str, value) -> np.ndarray:
    """A finite float array with every element ≥ 0 (a cost ratio c, say)."""
    array = as_float(name, value)
    bad = array < 0.0
    if bad.any():
        raise ValueError(f"{name} must be >= 0, got {_first_bad(array, bad)!r}")
    return array


def positive(name: str, value) -> np.ndarray:
    """A finite float array with every element > 0 (a verification cost β, say)."""
    array = as_float(name, value)
    bad = array <= 0.0
    if bad.any():
        raise ValueError(f"{name} must be > 0, got {_first_bad(array, bad)!r}")
    return array


def integer(name: str, value, minimum: int = 0) -> np.ndarray:
    """An int64 array of whole numbers ≥ ``minimum`` (γ, a number of experts, a sample size)."""
    array = as_float(name, value)
    bad = array != np.round(array)
    if bad.any():
        raise ValueError(f"{name} must be a whole number, got {_first_bad(array, bad)!r}")
    bad = array < minimum
    if bad.any():
        raise ValueError(f"{name} must be >= {minimum}, got {_first_bad(array, bad)!r}")
    return array.astype(np.int64)


def scalar_int(name: str, value, minimum: int = 0) -> int:
    """One whole number ≥ ``minimum``, as a Python int."""
    array = integer(name, value, minimum)
    if array.ndim != 0:
        raise ValueError(f"{name} must be a single whole number, got an array of shape {array.shape}")
    return int(array)


def generator(rng) -> np.random.Generator:
    """A ``numpy.random.Generator``: passed through, or seeded from an int.

    ``None`` is refused: every simulation in specrepro takes its randomness explicitly, so that
    the seed is recorded next to the result.
    """
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool) and rng >= 0:
        return np.random.default_rng(int(rng))
    raise ValueError(f"rng must be a numpy.random.Generator or a non-negative int seed, got {rng!r}")


def scalar_result(array: np.ndarray):
    """Unwrap a 0-d result to a numpy scalar; leave arrays alone."""
    return array[()] if np.ndim(array) == 0 else array
