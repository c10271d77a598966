"""Assemble report.json (schema version 1) from a run's verdicts, sample sets and exact findings."""

from __future__ import annotations

import os
import platform
from typing import Any

from verifier.runner.verdict import DecoderVerdict, session_figures
from verifier.suite.schema import Suite

__all__ = ["REPORT_SCHEMA_VERSION", "OVERALL", "build_report", "environment"]

REPORT_SCHEMA_VERSION = 1
OVERALL = {0: "PASS", 1: "FAIL", 2: "ERROR", 3: "ERROR", 4: "UNDERPOWERED"}  # exit code -> report verdict


def environment(suite: Suite) -> dict[str, Any]:
    """Python, platform, package versions, the suite's devices and dtypes, CPU count, and the
    ``GLIBC_TUNABLES`` the job ran with (``SPECVERIFY_HUGEPAGES=1`` adds huge-page malloc, see
    :mod:`verifier.cli._isolate`; None when unset)."""
    import importlib.metadata as md

    versions = {}
    for pkg in ("spec-verifier", "numpy", "scipy", "statsmodels", "torch", "transformers"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    devices = sorted({p.device for p in suite.models.values()})
    dtypes = sorted({p.dtype for p in suite.models.values()})
    return {"python": platform.python_version(), "platform": platform.platform(), "versions": versions,
            "devices": devices, "dtypes": dtypes, "cpu_count": os.cpu_count(),
            "glibc_tunables": os.environ.get("GLIBC_TUNABLES") or None}


def build_report(suite: Suite, env: dict, exact: dict, verdicts: list[DecoderVerdict], sets_info: list[dict],
                 errors: dict, code: int, run_info: dict) -> dict[str, Any]:
    """The report.json dictionary.

    Parameters
    ----------
    suite : Suite
        With its profile applied.
    env : dict
        :func:`environment`.
    exact : dict
        Exact-stage findings (``ran``, ``ok``, ``findings``, ``wrong_rules``).
    verdicts : list of DecoderVerdict
        One per decoder, with its cells.
    sets_info : list of dict
        One per sample set (plan, samples on disk, acceptance figures).
    errors : dict
        Decoder name -> where it stopped.
    code : int
        The run's exit code (decides ``verdict``).
    run_info : dict
        Run id, timestamps, wall times: the only volatile part; the decoders' per-session figures are added to it
        (:func:`~verifier.runner.verdict.session_figures`: ``requests_sent_session``, ``{decoder: requests}``).
    """
    cells = [c.to_dict() for v in verdicts for c in v.cells]
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "tool": "spec-verifier",
        "verdict": OVERALL.get(code, "ERROR"),
        "exit_code": code,
        "summary": _summary(verdicts, exact, code),
        "suite": {"name": suite.name, "source": suite.source, "profile": suite.profile, "seed": suite.seed,
                  "description": suite.description, "stats": stats_dict(suite),
                  "num_sample_sets": len(sets_info), "num_cells": len(cells)},
        "environment": env,
        "exact": exact,
        "decoders": [v.to_dict() for v in verdicts],
        "sample_sets": sets_info,
        "cells": cells,
        "stopped": list(errors.values()),
        "run": {**run_info, **session_figures(verdicts)},  # the only volatile section: run id, times, session figures
    }


def _summary(verdicts: list[DecoderVerdict], exact: dict, code: int) -> str:
    parts = []
    if exact.get("ran"):
        parts.append("exact stage OK" if exact["ok"] else f"exact stage WRONG: {', '.join(exact['wrong_rules'])}")
    for v in verdicts:
        mark = "as expected" if v.expectation_met else f"EXPECTED {v.expect.upper()}"
        parts.append(f"{v.decoder}: {v.verdict} ({mark})")
    return "; ".join(parts) + f" -> exit {code}"


def stats_dict(suite: Suite) -> dict[str, Any]:
    """The suite's statistics settings as plain JSON values."""
    s = suite.stats
    out = {"alpha": s.alpha, "correction": s.correction, "target_mde": s.target_mde, "power": s.power}
    if s.cell_weights:  # the planned alpha allocation (weighted Holm; verifier.stats.allocation): only where set
        out["cell_weights"] = dict(s.cell_weights)
    return out
