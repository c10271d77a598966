"""The process's diagnosis mode (``run`` / ``audit --diagnose auto|off``), in a module that imports nothing heavy.

The CLI sets it before a command runs (:func:`verifier.cli._diagnose_args.applied`); the runner reads it after BIAS
DETECTED (:mod:`verifier.diagnose.run_dir`, which re-exports both functions).  Kept apart from the diagnosis so that
setting it does not import torch, scipy and statsmodels before an ``audit --engine`` has started its engine.
"""

from __future__ import annotations

__all__ = ["DIAGNOSE_MODES", "AUTO_DIAGNOSE_DISTINCT_ROWS", "set_mode", "mode", "set_distinct_rows", "distinct_rows"]

DIAGNOSE_MODES = ("auto", "off")  # `run`/`audit --diagnose`: after BIAS DETECTED diagnose (auto) or not (off)
_MODE = "auto"  # one switch for the process, as verifier.progress: the CLI sets it from --diagnose / --no-diagnosis
# distinct rows per sample set the automatic diagnosis reads (verifier.diagnose.row_budget; None: every row)
AUTO_DIAGNOSE_DISTINCT_ROWS = 1000
_ROWS: int | None = AUTO_DIAGNOSE_DISTINCT_ROWS  # the CLI sets it from --diagnose-rows


def set_mode(value: str) -> None:
    """``"auto"``: the runner diagnoses every decoder with BIAS DETECTED; ``"off"``: it skips the diagnosis.

    Raises
    ------
    InvalidArgumentError
        ``value`` is not one of :data:`DIAGNOSE_MODES`.
    """
    from verifier.errors import invalid_argument

    global _MODE
    if value not in DIAGNOSE_MODES:
        raise invalid_argument("diagnose", value, " | ".join(repr(m) for m in DIAGNOSE_MODES))
    _MODE = value


def mode() -> str:
    """The process's diagnosis mode (:func:`set_mode`)."""
    return _MODE


def set_distinct_rows(value: int | None) -> None:
    """Distinct rows per sample set the automatic diagnosis reads (:mod:`verifier.diagnose.row_budget`); None: every row.

    Raises
    ------
    InvalidArgumentError
        ``value`` is not None and not an integer >= 1.
    """
    from verifier.errors import invalid_argument

    global _ROWS
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise invalid_argument("diagnose-rows", value, "an integer >= 1, or 'all' (every row)")
    _ROWS = value


def distinct_rows() -> int | None:
    """The process's budget of distinct rows per sample set for the automatic diagnosis (:func:`set_distinct_rows`)."""
    return _ROWS
