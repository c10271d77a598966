"""The rate each engine adapter gets, read from the audits committed beside the code.

``specverify engines`` says which path an adapter drives (``drives``, ``runs``, ``batching``); this module adds how
fast that path went in the largest committed audit of the same engine version: the harness's sampling rate (rows
per second of the adapter's generate calls, ``report.json`` ``run.cost``; for a kernel audit, draws per second of
the kernel calls, a case's ``num_draws / draw_seconds``), the end-to-end rate of the same run (rows over the wall
time from process start to the verdict, ``run.time_to_verdict``; a kernel case's ``seconds``) and their ratio.  Nothing is
measured here: a checkout without ``reports/audits/<engine>-<version>/`` (an installed wheel) says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["audits_root", "measured_rate", "rate_sentence", "describe_rate"]


def audits_root() -> Path:
    """``reports/audits`` of the checkout this package runs from (may not exist: an installed wheel)."""
    return Path(__file__).resolve().parents[2] / "reports" / "audits"


def _runs(folder: Path):
    """(timed rows, sampling rate, end-to-end seconds or None, report path, finished_at, unit, basis) of every timed decoder
    (unit "rows") and kernel case (unit "draws")."""
    for path in sorted(folder.rglob("report.json")):
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for case in report.get("cases") or []:  # a kernel audit: draws of the verification kernel per case
            draws, draw_s, total_s = case.get("num_draws"), case.get("draw_seconds"), case.get("seconds")
            if draws and (draw_s or total_s):  # without draw_seconds: the case's whole time (no end-to-end split)
                yield (int(draws), draws / float(draw_s or total_s), (float(total_s) if draw_s and total_s else None),
                       path, "", "draws", "while sampling" if draw_s else "over the whole case (kernel time not recorded)")
        run = report.get("run") or {}
        wall = (run.get("time_to_verdict") or {}).get("wall_seconds")
        for cost in (run.get("cost") or {}).values():
            rows, rate = cost.get("timed_samples"), cost.get("rate_samples_per_s")
            if rows and rate:
                yield int(rows), float(rate), (float(wall) if wall else None), path, run.get("finished_at") or "", "rows", "while sampling"


def measured_rate(name: str, version: str, root: Path | None = None) -> dict[str, Any] | None:
    """The largest committed audit of ``name`` at ``version``: its rates, or None when there is none.

    Parameters
    ----------
    name, version : str
        The engine's registry name and pinned version (``reports/audits/<name>-<version>/`` holds its audits).
    root : Path, optional
        Folder of the audit folders; default :func:`audits_root`.

    Returns
    -------
    dict or None
        ``{"rows", "unit" ("rows" of a decoder, "draws" of a kernel), "sampling_rate" (per second of generate or
        kernel calls), "basis" (what the sampling rate's seconds are), "end_to_end_rate" (rows/s from process start to
        verdict; None when the run did not record it), "ratio" (end to end / sampling, or None), "report" (path of
        the report.json, relative to the audits root), "finished_at"}``.
    """
    folder = (root or audits_root()) / f"{name}-{version}"
    if not folder.is_dir():
        return None
    runs = list(_runs(folder))
    if not runs:
        return None
    rows, rate, wall, path, when, unit, basis = max(runs, key=lambda r: (r[0], r[2] is not None, r[4]))
    e2e = rows / wall if wall else None
    return {"rows": rows, "unit": unit, "basis": basis, "sampling_rate": rate, "end_to_end_rate": e2e,
            "ratio": (e2e / rate if e2e else None), "report": str(path.relative_to(folder.parent)), "finished_at": when}


def rate_sentence(name: str, version: str, root: Path | None = None) -> str:
    """One line for ``specverify engines``: the rate of the largest committed audit, or why there is none."""
    return describe_rate(measured_rate(name, version, root), name, version)


def describe_rate(m: dict[str, Any] | None, name: str, version: str) -> str:
    """:func:`rate_sentence` of an already read :func:`measured_rate` ``m`` (None: no committed audit)."""
    if m is None:
        return (f"no committed audit of {name} {version} in this checkout (reports/audits/{name}-{version}/); "
                "every audit's report says its own rate (run.cost)")
    u = m["unit"]
    e2e = (f", {m['end_to_end_rate']:.3g} {u}/s from process start to the verdict ({m['ratio']:.2f} of it)"
           if m["end_to_end_rate"] else ", end to end not recorded by that run")
    day = f", {m['finished_at'][:10]}" if m["finished_at"] else ""
    return (f"{m['sampling_rate']:.3g} {u}/s {m['basis']}{e2e}, at n = {m['rows']:,} {u} "
            f"(reports/audits/{m['report']}{day}; the shared 2-core machine, other jobs beside it)")
