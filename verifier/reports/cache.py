"""``specverify report RUN_DIR`` without recomputing what cannot have changed.

The statistics of a run are a pure function of its inputs: the stored samples (``samples/``
chunk files), ``stopped.json``, the suite (``run.json``), the target/draft model files, ``--allow-partial``
and the code that computes them (a suite whose models are ``module:attr`` code is never reused).  :func:`inputs_key` hashes all of these (chunk files by name, size and
modification time; the code as every ``verifier/**/*.py`` outside ``verifier/reports/`` and
``verifier/cli/``, which only render and dispatch).  The runner stores the key in report.json
(``run.inputs_sha256``); when ``specverify report`` finds the same key in the run folder's
report.json it re-renders report.md / report.html / junit.xml from that report.json (seconds)
instead of loading the models and recomputing every cell (most of a run's wall time).  Any change
to a sample file, the suite or the statistics code changes the key and everything is recomputed;
``--recompute`` forces it.

The suite part of the key is run.json's ``suite`` entry as stored, so the check needs neither torch
nor the runner (:func:`try_rerender`: ``specverify report`` re-renders in about a second).

Only JSON is read back (report.json), never pickles: a run folder received from someone else
cannot run code through this cache.

report.json is believed only as written (issue 28 item 7): :func:`report_digest` is a SHA-256 of the
report's whole content (statistics, cells, verdicts, exit code and the inputs key; not the
regeneration's own time stamps), stored as ``run.report_sha256`` by every writer
(:func:`verifier.reports.write_reports`).  A report.json whose content no longer matches it (edited by
hand: a forged PASS) is never re-rendered: :func:`try_rerender` says so and ``specverify report``
recomputes every statistic and the verdict from the stored samples.  The digest is a seal against
edits and corruption, not a signature: a report.json is no evidence on its own -- the samples are.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from verifier.reports.digest import DIGEST_FIELD, report_digest
from verifier.runner.inputs_key import KEY_FIELD, inputs_key, run_inputs_key

__all__ = ["inputs_key", "run_inputs_key", "cached_report", "rerender", "try_rerender", "report_digest", "verdicts_disagree", "seal_problem",
           "KEY_FIELD", "DIGEST_FIELD"]

_EXIT_OK, _EXIT_BIAS, _EXIT_DECODER, _EXIT_UNDERPOWERED = 0, 1, 3, 4  # verifier.errors (torch-free copy)


def verdicts_disagree(report: dict[str, Any]) -> str | None:
    """Why the verdicts of a report.json do not follow from its stored cells (None: they do).

    Re-derived, as :mod:`verifier.runner.verdict` derives them: a cell with a support violation is BIAS;
    a decoder with a BIAS cell is BIAS DETECTED (or ERROR), one with PASS has no BIAS or UNDERPOWERED
    cell; each expectation (pass: PASS, detect: BIAS DETECTED or invalid output); the exit code
    from those and the exact stage.  A sealed report whose verdict was rewritten with a new seal is
    caught here unless its cells were rewritten to match too -- then only recomputing (``--recompute``)
    from the samples can tell."""
    try:
        cells: dict[str, list[dict]] = {}
        for c in report.get("cells", []):
            if c.get("support_violation") and c.get("verdict") != "BIAS":
                return f"has cell {c.get('id')!r} with a support violation but verdict {c.get('verdict')!r}"
            cells.setdefault(c.get("decoder"), []).append(c)
        codes = []
        for d in report.get("decoders", []):
            mine = [c.get("verdict") for c in cells.get(d.get("decoder"), [])]
            verdict, expect = d.get("verdict"), d.get("expect")
            if "BIAS" in mine and verdict not in ("BIAS DETECTED", "ERROR"):
                return f"says {verdict} for decoder {d.get('decoder')!r}, whose cells include BIAS"
            if verdict == "PASS" and (not mine or any(v != "PASS" for v in mine)):
                return f"says PASS for decoder {d.get('decoder')!r}, whose cells are not all PASS"
            met = ((expect == "pass" and verdict == "PASS") or (expect == "detect" and verdict == "BIAS DETECTED")
                   or (expect == "detect" and verdict == "ERROR" and (d.get("error") or {}).get("kind") == "invalid_output"))
            if bool(d.get("expectation_met")) != met:
                return f"says expectation_met={d.get('expectation_met')} for decoder {d.get('decoder')!r} ({verdict}, expect {expect})"
            codes.append((verdict, expect, met))
        exact_ok = bool((report.get("exact") or {}).get("ok", True))
        if any(v == "ERROR" and not met for v, _e, met in codes):
            code = _EXIT_DECODER
        elif not exact_ok or any(not met and v != "UNDERPOWERED" for v, _e, met in codes):
            code = _EXIT_BIAS
        elif any(v == "UNDERPOWERED" for v, _e, _m in codes):
            code = _EXIT_UNDERPOWERED if all(e == "pass" for v, e, _m in codes if v == "UNDERPOWERED") else _EXIT_BIAS
        else:
            code = _EXIT_OK
    except (AttributeError, TypeError) as exc:  # not the shape the runner writes
        return f"is malformed ({exc})"
    if report.get("exit_code") != code:
        return f"says exit code {report.get('exit_code')!r} where its verdicts give {code}"
    return None


def try_rerender(run_dir: str | Path, out_dir: str | Path | None, allow_partial: bool, regenerated_at: str):
    """Re-render when report.json holds the same inputs' key: ``(report, stage_seconds)``, else None.

    Torch-free (json, hashlib, jinja2): ``specverify report`` calls it before importing the runner.
    """
    key = run_inputs_key(run_dir, allow_partial)
    report = cached_report(run_dir, key) if key else None
    if report is None:
        return None
    why = seal_problem(report)
    if why is not None:
        import sys

        print(f"note: {Path(run_dir) / 'report.json'} {why}: its statistics and verdict are not reused; "
              "recomputing them from the stored samples", file=sys.stderr)
        return None
    from verifier.errors import ReportWriteError

    try:
        return report, rerender(report, Path(out_dir) if out_dir else Path(run_dir), regenerated_at)
    except ReportWriteError as exc:  # the same hint as the runner's
        raise ReportWriteError(f"{exc}; the samples are kept in {Path(run_dir) / 'samples'} -- rerun "
                               f"`specverify report {run_dir} --out DIR` with a writable DIR") from None


def seal_problem(report: dict[str, Any]) -> str | None:
    """Why a report.json cannot be re-rendered as it stands (None: it can): no seal ``run.report_sha256``, a seal
    that does not match (edited by hand or corrupted), or verdicts that do not follow from its cells."""
    stored = report["run"].get(DIGEST_FIELD)
    if stored != report_digest(report):  # edited (or written before the seal)
        return ("has no run.report_sha256 (written by an older version)" if stored is None else
                "does not match its own digest run.report_sha256 (edited by hand or corrupted)")
    return verdicts_disagree(report)


def cached_report(run_dir: str | Path, key: str) -> dict[str, Any] | None:
    """The run folder's report.json when it was computed from exactly these inputs, else None."""
    if not key:
        return None
    path = Path(run_dir) / "report.json"
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(report, dict) or not isinstance(report.get("run"), dict):
        return None
    return report if report["run"].get(KEY_FIELD) == key else None


def rerender(report: dict[str, Any], out_dir: str | Path, regenerated_at: str) -> dict[str, float]:
    """Write the four reports of a cached report.json into ``out_dir`` (the run's stage times kept,
    this regeneration's own under ``run.report_stage_seconds``); returns that stage time."""
    import time

    from verifier.reports import write_reports

    t0 = time.perf_counter()
    report["run"]["regenerated_at"] = regenerated_at
    report["run"]["report_stage_seconds"] = {"statistics": 0.0}  # reused: computed from the same inputs
    report["run"]["regenerated_from"] = "report.json of the same inputs (run.inputs_sha256); statistics not recomputed"
    write_reports(report, out_dir)
    return {"statistics": 0.0, "reports": time.perf_counter() - t0}
