"""The seal of a report.json: :func:`report_digest`, stored as ``run.report_sha256`` by every writer
(:func:`verifier.reports.write_reports`) and checked before a re-render (:mod:`verifier.reports.cache`)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["DIGEST_FIELD", "report_digest"]

DIGEST_FIELD = "report_sha256"  # report.json run.<DIGEST_FIELD>: report_digest() of the rest


# run.* entries a re-render rewrites (and the digest itself): outside the digest
_VOLATILE_RUN_KEYS = (DIGEST_FIELD, "regenerated_at", "report_stage_seconds", "regenerated_from")


def report_digest(report: dict[str, Any]) -> str:
    """SHA-256 of a (strict-JSON) report's canonical JSON, without :data:`_VOLATILE_RUN_KEYS`."""
    run = report.get("run")
    body = dict(report)
    if isinstance(run, dict):
        body["run"] = {k: v for k, v in run.items() if k not in _VOLATILE_RUN_KEYS}
    text = json.dumps(body, sort_keys=True, allow_nan=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()
