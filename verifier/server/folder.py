"""The run folder of a self-reported URL audit (``--design self-reported``) for ``specverify report``,
``diagnose`` and ``merge``.

Such a folder holds report.json and the journal of every reply (``server/responses.jsonl``), no run.json:
its statistics come from replies, not from stored sample chunks, and are recomputed by rerunning the audit
command with the same ``--run-dir`` (the journal answers every request already sent; nothing is resampled).
``specverify report`` re-renders report.md / report.html / junit.xml from its report.json once the seal
(``run.report_sha256``) holds and the verdicts give its exit code; ``diagnose`` and ``merge`` say why they do
not apply instead of "run.json is missing".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from verifier.errors import ConfigError

__all__ = ["DESIGN", "self_reported_report", "rerender_self_reported", "not_for_self_reported"]

DESIGN = "self-reported"  # report.json design.name of verifier.server.self_audit

_RERUN = ("rerun its `specverify audit --url URL --design self-reported ... --run-dir {run_dir}` command: the journal "
          "({run_dir}/server/responses.jsonl) answers every request already sent, so nothing is resampled")


def self_reported_report(run_dir: str | Path) -> dict[str, Any] | None:
    """The report.json of a self-reported audit folder, else None.

    Parameters
    ----------
    run_dir : path
        A folder given as RUN_DIR.

    Returns
    -------
    dict or None
        report.json's content when the folder has no run.json and report.json says
        ``design.name == "self-reported"``; None for any other folder (the runner's own checks then apply).
    """
    folder = Path(run_dir)
    if (folder / "run.json").exists():
        return None
    try:
        report = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(report, dict) and isinstance(report.get("design"), dict) and report["design"].get("name") == DESIGN:
        return report
    return None


def rerender_self_reported(run_dir: str | Path, report: dict[str, Any], out_dir: str | Path | None,
                           regenerated_at: str) -> dict[str, Any]:
    """Write report.json/.md/.html and junit.xml of a self-reported audit again from its report.json.

    Parameters
    ----------
    run_dir : path
        The audit's run folder (for messages).
    report : dict
        Its report.json (:func:`self_reported_report`).
    out_dir : path or None
        Where to write; None: ``run_dir``.
    regenerated_at : str
        UTC time stamp stored as ``run.regenerated_at``.

    Returns
    -------
    dict
        The report written (statistics and verdict unchanged).

    Raises
    ------
    ConfigError
        report.json does not match its own seal ``run.report_sha256`` (edited or corrupted), or its verdicts do not
        give its exit code: nothing is re-rendered, and the message says how to recompute it.
    ReportWriteError
        ``out_dir`` cannot be written.
    """
    from verifier.reports import write_reports
    from verifier.reports.cache import seal_problem

    path = Path(run_dir) / "report.json"
    if not isinstance(report.get("run"), dict):
        raise ConfigError(f"{path} is not a report.json the audit wrote (no run record); " + _RERUN.format(run_dir=run_dir))
    try:
        why = seal_problem(report)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path} is not a report.json the audit wrote ({exc}); " + _RERUN.format(run_dir=run_dir)) from None
    if why is not None:
        raise ConfigError(f"{path} {why}; its verdict is not re-rendered. To recompute the statistics, "
                          + _RERUN.format(run_dir=run_dir))
    report["run"]["regenerated_at"] = regenerated_at
    report["run"]["report_stage_seconds"] = {"statistics": 0.0}
    report["run"]["regenerated_from"] = ("report.json of the self-reported audit (sealed); statistics not recomputed "
                                         "(rerun the audit command with the same --run-dir for that)")
    write_reports(report, Path(out_dir) if out_dir else Path(run_dir))
    return report


def not_for_self_reported(command: str, run_dir: str | Path) -> ConfigError:
    """The usage error (exit 2) of ``specverify diagnose`` / ``merge`` / ``report --recompute`` on a self-reported
    audit folder, saying why the command does not apply and what does.

    Parameters
    ----------
    command : {"diagnose", "merge", "report --recompute", "run --resume"}
        The command refused.
    run_dir : path
        The folder given.
    """
    why = {
        "diagnose": ("a self-reported audit has no local target or draft model, so no mechanism can be scored against "
                     "its samples; audit the server in the known-target design (`--target MODEL`, with `--draft MODEL` "
                     "when you know the server's draft) to get a diagnosis"),
        "merge": ("a self-reported audit is not sharded; to add samples or finish an interrupted audit, "
                  + _RERUN.format(run_dir=run_dir)),
        "run --resume": ("it has no suite to resume (its requests are planned by the audit command); to finish an "
                         "interrupted audit, " + _RERUN.format(run_dir=run_dir)),
        "report --recompute": ("its statistics are computed from the journaled replies by the audit itself; to "
                               "recompute them, " + _RERUN.format(run_dir=run_dir)),
    }[command]
    return ConfigError(f"RUN_DIR={str(run_dir)!r} is a self-reported URL audit (report.json design "
                       f"{DESIGN!r}, no run.json): `specverify {command}` does not apply -- {why}")
