"""Argument checks shared by the statistics modules (the ``_..._iv`` helpers of the house style).

Every check raises :class:`verifier.errors.InvalidArgumentError` naming the argument, its value
and what is allowed; none of them uses ``assert``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from verifier.errors import invalid_argument

__all__ = ["PROBS_SUM_ATOL", "check_probs", "check_counts", "check_alpha", "check_fraction", "check_positive_int", "check_min_expected", "short"]

PROBS_SUM_ATOL = 1e-6  # float64 processed probs over a 150k vocabulary sum to 1 within ~1e-12; 1e-6 tolerates float32 upstream


def short(value: Any, limit: int = 8) -> Any:
    """A printable, truncated view of an array argument for error messages."""
    arr = np.asarray(value)
    if arr.ndim == 0:
        return arr.item()
    flat = arr.ravel()
    out = flat[:limit].tolist()
    return out if flat.size <= limit else out + [f"... ({flat.size} values, shape {arr.shape})"]


def check_probs(values: Any, name: str, *, ndim: int = 1, atol: float = PROBS_SUM_ATOL, renormalize: bool = True) -> np.ndarray:
    """Return ``values`` as float64 probability vectors (last axis sums to 1), renormalised exactly
    (``renormalize=False`` returns the input without the copy, for large per-row arrays).

    Raises
    ------
    InvalidArgumentError
        Wrong number of dimensions, empty, NaN/inf, a negative entry, or a row sum farther than
        ``atol`` from 1.
    """
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise invalid_argument(name, short(values) if np.ndim(values) else values, "a numeric array") from None
    if arr.ndim != ndim:
        raise invalid_argument(f"{name}.ndim", arr.ndim, f"{ndim} (shape {arr.shape})")
    if arr.size == 0 or arr.shape[-1] == 0:
        raise invalid_argument(f"{name}.shape", arr.shape, "a non-empty vocabulary axis")
    sums = arr.sum(axis=-1)
    if not np.all(np.isfinite(sums)):  # NaN or inf anywhere makes its row sum non-finite
        raise invalid_argument(name, short(arr), "finite values (no NaN or inf)")
    if arr.min() < 0:
        raise invalid_argument(name, short(arr), "non-negative probabilities")
    bad = np.abs(sums - 1.0) > atol
    if np.any(bad):
        first = float(np.ravel(sums)[np.flatnonzero(np.ravel(bad))[0]])
        raise invalid_argument(name, short(arr), f"rows summing to 1 within {atol:g} (a row sums to {first!r})")
    return arr / sums[..., None] if renormalize else arr


def check_counts(values: Any, name: str, *, ndim: int = 1, allow_zero_total: bool = False) -> np.ndarray:
    """Return ``values`` as an int64 count array.

    Raises
    ------
    InvalidArgumentError
        Non-integer, NaN, negative, wrong dimensions, or (unless ``allow_zero_total``) n = 0.
    """
    arr = np.asarray(values)
    if arr.ndim != ndim:
        raise invalid_argument(f"{name}.ndim", arr.ndim, f"{ndim} (shape {arr.shape})")
    if arr.size == 0:
        raise invalid_argument(f"{name}.shape", arr.shape, "a non-empty count array")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise invalid_argument(name, short(arr), "whole-number counts (no NaN, inf or fractions)")
    elif arr.dtype.kind not in "iu":
        raise invalid_argument(name, short(arr), "an integer count array")
    arr = arr.astype(np.int64)
    if np.any(arr < 0):
        raise invalid_argument(name, short(arr), "non-negative counts")
    if not allow_zero_total and arr.sum() == 0:
        raise invalid_argument(f"{name} total (n)", 0, "n >= 1 observations")
    return arr


def check_alpha(alpha: Any, name: str = "alpha") -> float:
    """Return ``alpha`` as a float in (0, 1) or raise."""
    return check_fraction(alpha, name)


def check_fraction(value: Any, name: str) -> float:
    """Return ``value`` as a float strictly between 0 and 1 or raise."""
    if isinstance(value, bool):
        raise invalid_argument(name, value, "a number strictly between 0 and 1")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise invalid_argument(name, value, "a number strictly between 0 and 1") from None
    if not 0.0 < v < 1.0:
        raise invalid_argument(name, value, "a number strictly between 0 and 1")
    return v


def check_positive_int(value: Any, name: str, minimum: int = 1) -> int:
    """Return ``value`` as an int >= ``minimum`` or raise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise invalid_argument(name, value, f"an integer >= {minimum}")
    return int(value)


def check_min_expected(value: Any, name: str = "min_expected") -> float:
    """Return a pooling floor (expected count per pooled category) as a finite float > 0 or raise."""
    try:
        v = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        v = math.nan
    if not (math.isfinite(v) and v > 0):
        raise invalid_argument(name, value, "a finite expected count > 0 (default 10)")
    return v
